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
agree within 2e-6. A segmenter's mask coefficients and prototypes (or, after NMS, its mask
logits) are held to 1e-4 like its scores, with the same float64 allowance; a keypoint model's points
(pixels) to 1e-3 like boxes, an oriented-box model's angles (radians) to 1e-4.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from vision_attn.errors import ExportError
from vision_attn.export.onnx import onnx_session, run_onnx
from vision_attn.export.outputs import CHANNELS
from vision_attn.export.sample import classifier_input, letterbox_input
from vision_attn.export.source import Deployable
from vision_attn.export.nms import SegmenterWithNMS
from vision_attn.export.topk import DetectorWithTopK

__all__ = ["ParityCheck", "ParityReport", "verify_onnx", "verify_outputs", "TOLERANCE", "BOX_TOLERANCE"]

TOLERANCE = 1e-4
BOX_TOLERANCE = 1e-3
PIXELS = ("boxes", "keypoints")
"""The quantities in input pixels (held to ``BOX_TOLERANCE``); the rest (probabilities, angles) to ``TOLERANCE``."""


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


def _parts(kind: str, outs: Sequence[torch.Tensor], rows: bool, nc: int | None = None) -> dict[str, torch.Tensor]:
    """The quantities of a graph's outputs compared one by one: a classifier's logits; a detector's boxes
    and scores (rows (..., N, 6) after NMS or top-k, or (B, 4 + nc, A)); a segmenter's also its mask
    coefficients and prototypes (or, after NMS, its (N, Hp, Wp) masks); a kind of :data:`CHANNELS` the
    quantities it names (``nc``: the class count)."""
    first = outs[0]
    if kind == "classifier":
        return {"logits": first}
    if kind in CHANNELS and not rows and first.ndim == 3:
        parts, start = {}, 0
        for name, count in CHANNELS[kind]:
            stop = first.shape[1] if count is None else start + (nc if count == -1 else count)  # type: ignore[operator]
            parts[name], start = first[:, start:stop], stop
        return parts
    if first.ndim == 2 or rows:  # (..., N, 6) x1 y1 x2 y2 score class
        parts = {"boxes": first[..., :4], "scores": first[..., 4:]}
        return {**parts, "masks": outs[1]} if kind == "segmenter" else parts
    if kind == "segmenter":  # (B, 4 + nc + nm, A) and (B, nm, Hp, Wp)
        nm = outs[1].shape[1]
        return {"boxes": first[:, :4], "scores": first[:, 4:-nm], "coeffs": first[:, -nm:], "protos": outs[1]}
    return {"boxes": first[:, :4], "scores": first[:, 4:]}


def _tuple(out: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def _diffs(kind: str, ours: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], rows: bool = False,
           nc: int | None = None) -> dict[str, float]:
    """The largest absolute difference of each quantity (:func:`_parts`) between two runs' outputs."""
    if len(ours) != len(ref):
        raise ExportError(f"the exported model returned {len(ours)} outputs where PyTorch gives {len(ref)}")
    for o, r in zip(ours, ref):
        if o.shape != r.shape:
            raise ExportError(f"the exported model returned shape {tuple(o.shape)} where PyTorch gives "
                              f"{tuple(r.shape)}{' (a different number of detections)' if o.ndim == 2 and kind != 'classifier' else ''}")
    a, b = _parts(kind, ours, rows, nc), _parts(kind, ref, rows, nc)
    if not all(torch.isfinite(o).all() for o in ours):
        return {k: float("inf") for k in a}
    return {k: float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a}


def verify_onnx(path: str | os.PathLike, deployable: Deployable, *, batches: tuple[int, ...] = (1,),
                seed: int = 0, model: torch.nn.Module | None = None) -> ParityReport:
    """Run ``path`` in onnxruntime and ``deployable.model`` in PyTorch (see :func:`verify_outputs`)."""
    session = onnx_session(path)
    return verify_outputs(lambda x: run_onnx(session, x), path, "onnxruntime", deployable, batches=batches,
                          seed=seed, model=model, hint="try the other exporter (--exporter) or another --opset")


def verify_outputs(run: Callable[[torch.Tensor], torch.Tensor | Sequence[torch.Tensor]], path: str | os.PathLike, runtime: str,
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
    kind = deployable.kind
    h, w = deployable.input_size
    gen = torch.Generator().manual_seed(seed)
    inputs: list[tuple[str, torch.Tensor]] = []
    for b in batches:
        x = torch.randn(b, 3, h, w, generator=gen)
        if deployable.boxes:
            x = torch.rand(b, 3, h, w, generator=gen)  # detectors take [0, 1] pixels
        inputs.append((f"random batch {b}", x))
    photo = (letterbox_input((h, w)) if deployable.boxes
             else classifier_input((h, w), deployable.mean, deployable.std))
    inputs.append(("china.jpg", photo))
    tolerances = {"logits": TOLERANCE * scale}
    nc = getattr(deployable.model.model[-1], "nc", None) if deployable.boxes else None
    if deployable.boxes:
        masks = (("masks",) if isinstance(model, SegmenterWithNMS) else ("coeffs", "protos")) if kind == "segmenter" else ()
        names = tuple(n for n, _ in CHANNELS[kind]) if kind in CHANNELS and not rows else ("boxes", "scores", *masks)
        tolerances = {k: (BOX_TOLERANCE if k in PIXELS else TOLERANCE) * scale for k in names}
    report = ParityReport(tolerances=tolerances, factor=factor)
    model64 = copy.deepcopy(model).double() if deployable.boxes else None
    for name, x in inputs:
        with torch.no_grad():
            ref = _tuple(model(x))
            exact = _tuple(model64(x.double())) if model64 is not None else None
        try:
            ours = _tuple(run(x))
        except Exception as e:  # noqa: BLE001 - runtimes raise one type per cause
            raise ExportError(f"{path}: {runtime} failed on {name} {tuple(x.shape)}: "
                              f"{str(e).strip().splitlines()[0][:300]}") from None
        check = ParityCheck(name, tuple(x.shape), _diffs(kind, ours, ref, rows=rows, nc=nc))
        if exact is not None and [e.shape for e in exact] == [r.shape for r in ref]:
            check.exact = _diffs(kind, ours, exact, rows=rows, nc=nc)
            check.own = _diffs(kind, ref, exact, rows=rows, nc=nc)
        elif exact is not None:  # NMS kept another count in float64: PyTorch's own error before the NMS
            with torch.no_grad():
                check.own = _diffs(kind, _tuple(deployable.model(x)),
                                   _tuple(getattr(model64, "detector", model64)(x.double())), nc=nc)
        report.checks.append(check)
    if not report.ok:
        worst = next(c for c in report.checks if not c.passes(report.tolerances, report.factor))
        bad = [f"{k} {worst.diffs[k]:.3g} > {tol:g}" + (f" (PyTorch float32 itself is {worst.own[k]:.3g} from float64, "
                                                          f"{runtime} {worst.exact[k]:.3g})" if k in worst.exact else "")
               for k, tol in report.tolerances.items() if worst.diffs[k] > tol]
        raise ExportError(f"{path}: {runtime} disagrees with PyTorch on {worst.input} ({'; '.join(bad)})"
                          f"{'; ' + hint if hint else ''}")
    return report
