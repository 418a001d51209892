"""An exported graph checked against PyTorch: a runtime (onnxruntime, OpenVINO, TorchScript) and the
eager model on random inputs and on a real photo, the largest absolute difference of each output, and
a verdict against tolerances (:func:`verify_outputs`; :func:`verify_onnx` for an ONNX file).

Classifier logits and detector class probabilities must agree within 1e-4; a detector's decoded boxes
(cx, cy, w, h in input pixels, values up to the image size) within 1e-3. A deep detector can be further
than that from the exact result in PyTorch itself: its distribution-focal box decoding amplifies float32
rounding (measured on yolov8n-CBAM at 128 px with batch-norm statistics from random images: PyTorch
float32 0.011-0.013 px from float64, and 0.005 px between 1 and 2 threads). So a detector also passes
where onnxruntime is within 4x PyTorch float32's own distance from a float64 run of the same model on
the same input: the export adds no more error than float32 arithmetic itself makes. OpenVINO's CPU
convolutions (Winograd among them) round further: measured 2-6x PyTorch float32's own distance on that
model (random batch-norm statistics, four seeds), so its check allows 8x (``factor``); classifiers
agree within 2e-6.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Callable

import torch

from vision_attn.errors import ExportError
from vision_attn.export.onnx import onnx_session, run_onnx
from vision_attn.export.sample import classifier_input, letterbox_input
from vision_attn.export.source import Deployable
from vision_attn.export.topk import DetectorWithTopK

__all__ = ["ParityCheck", "ParityReport", "verify_onnx", "verify_outputs", "TOLERANCE", "BOX_TOLERANCE"]

TOLERANCE = 1e-4
BOX_TOLERANCE = 1e-3


@dataclass
class ParityCheck:
    """One input: its description, shape, and the max abs difference per output quantity."""

    input: str
    shape: tuple[int, ...]
    diffs: dict[str, float]  # the runtime vs PyTorch float32
    exact: dict[str, float] = field(default_factory=dict)  # detectors: the runtime vs PyTorch float64
    own: dict[str, float] = field(default_factory=dict)  # detectors: PyTorch float32 vs float64

    def passes(self, tolerances: dict[str, float], factor: float = 4.0) -> bool:
        return all(self.diffs[k] <= tol
                   or (k in self.exact and self.exact[k] <= max(tol, factor * self.own[k]))
                   or (k in self.own and k not in self.exact and self.diffs[k] <= max(tol, factor * self.own[k]))
                   for k, tol in tolerances.items())


@dataclass
class ParityReport:
    """All checks, the tolerances per quantity, and whether every difference is within them."""

    checks: list[ParityCheck] = field(default_factory=list)
    tolerances: dict[str, float] = field(default_factory=dict)
    factor: float = 4.0  # a detector passes within this many times PyTorch float32's own error

    @property
    def max_diffs(self) -> dict[str, float]:
        return {k: max(c.diffs[k] for c in self.checks) for k in self.tolerances}

    @property
    def ok(self) -> bool:
        return all(c.passes(self.tolerances, self.factor) for c in self.checks)


def _diffs(kind: str, ours: torch.Tensor, ref: torch.Tensor, exact: bool = False, rows: bool = False
           ) -> dict[str, float]:
    if ours.shape != ref.shape:
        raise ExportError(f"the exported model returned shape {tuple(ours.shape)} where PyTorch gives {tuple(ref.shape)}"
                          f"{' (a different number of detections)' if ours.ndim == 2 and kind == 'detector' else ''}")
    diff = (ours.double() - ref.double()).abs() if exact else (ours.float() - ref.float()).abs()
    if not torch.isfinite(ours).all():
        return {k: float("inf") for k in (("boxes", "scores") if kind == "detector" else ("logits",))}
    if kind == "detector" and (ours.ndim == 2 or rows):  # after NMS or top-k: (..., N, 6) x1 y1 x2 y2 score class
        if ours.shape[0] == 0:
            return {"boxes": 0.0, "scores": 0.0}
        return {"boxes": float(diff[..., :4].max()), "scores": float(diff[..., 4:].max())}
    if kind == "detector":  # (B, 4 + nc, A)
        return {"boxes": float(diff[:, :4].max()), "scores": float(diff[:, 4:].max()) if diff.shape[1] > 4 else 0.0}
    return {"logits": float(diff.max())}


def verify_onnx(path: str | os.PathLike, deployable: Deployable, *, batches: tuple[int, ...] = (1,),
                seed: int = 0, model: torch.nn.Module | None = None) -> ParityReport:
    """Run ``path`` in onnxruntime and ``deployable.model`` in PyTorch (see :func:`verify_outputs`)."""
    session = onnx_session(path)
    return verify_outputs(lambda x: run_onnx(session, x)[0], path, "onnxruntime", deployable, batches=batches,
                          seed=seed, model=model, hint="try the other exporter (--exporter) or another --opset")


def verify_outputs(run: Callable[[torch.Tensor], torch.Tensor], path: str | os.PathLike, runtime: str,
                   deployable: Deployable, *, batches: tuple[int, ...] = (1,), seed: int = 0,
                   model: torch.nn.Module | None = None, scale: float = 1.0, factor: float = 4.0,
                   hint: str = "") -> ParityReport:
    """Run ``run`` (the exported ``path`` in ``runtime``) and ``deployable.model`` in PyTorch on a random
    batch of each size in ``batches`` and on scikit-learn's china.jpg (centre-cropped and normalised for
    a classifier, letterboxed for a detector); raises :class:`ExportError` when a difference exceeds its
    tolerance (times ``scale``: 0.1 for TorchScript, which must agree to 1e-5). ``model``: what was
    exported when it is not ``deployable.model`` itself (a detector with NMS); a detection count that
    differs is an error too. ``factor``: a detector also passes within this many times PyTorch float32's
    own distance from float64 (see the module docstring). ``hint``: what to try when the check fails."""
    model = deployable.model if model is None else model
    rows = isinstance(model, DetectorWithTopK)  # (B, K, 6) detections, not (B, 4 + nc, A)
    h, w = deployable.input_size
    gen = torch.Generator().manual_seed(seed)
    inputs: list[tuple[str, torch.Tensor]] = []
    for b in batches:
        x = torch.randn(b, 3, h, w, generator=gen)
        if deployable.kind == "detector":
            x = torch.rand(b, 3, h, w, generator=gen)  # detectors take [0, 1] pixels
        inputs.append((f"random batch {b}", x))
    photo = (letterbox_input((h, w)) if deployable.kind == "detector"
             else classifier_input((h, w), deployable.mean, deployable.std))
    inputs.append(("china.jpg", photo))
    report = ParityReport(tolerances={"boxes": BOX_TOLERANCE * scale, "scores": TOLERANCE * scale}
                          if deployable.kind == "detector" else {"logits": TOLERANCE * scale}, factor=factor)
    model64 = copy.deepcopy(model).double() if deployable.kind == "detector" else None
    for name, x in inputs:
        with torch.no_grad():
            ref = model(x)
            exact = model64(x.double()) if model64 is not None else None
        try:
            ours = run(x)
        except Exception as e:  # noqa: BLE001 - runtimes raise one type per cause
            raise ExportError(f"{path}: {runtime} failed on {name} {tuple(x.shape)}: "
                              f"{str(e).strip().splitlines()[0][:300]}") from None
        check = ParityCheck(name, tuple(x.shape), _diffs(deployable.kind, ours, ref, rows=rows))
        if exact is not None and exact.shape == ref.shape:
            check.exact = _diffs(deployable.kind, ours.double(), exact, exact=True, rows=rows)
            check.own = _diffs(deployable.kind, ref.double(), exact, exact=True, rows=rows)
        elif exact is not None:  # NMS kept another count in float64: PyTorch's own error before the NMS
            with torch.no_grad():
                check.own = _diffs(deployable.kind, deployable.model(x).double(),
                                   getattr(model64, "detector", model64)(x.double()), exact=True)
        report.checks.append(check)
    if not report.ok:
        worst = next(c for c in report.checks if not c.passes(report.tolerances, report.factor))
        bad = [f"{k} {worst.diffs[k]:.3g} > {tol:g}" + (f" (PyTorch float32 itself is {worst.own[k]:.3g} from float64, "
                                                          f"{runtime} {worst.exact[k]:.3g})" if k in worst.exact else "")
               for k, tol in report.tolerances.items() if worst.diffs[k] > tol]
        raise ExportError(f"{path}: {runtime} disagrees with PyTorch on {worst.input} ({'; '.join(bad)})"
                          f"{'; ' + hint if hint else ''}")
    return report
