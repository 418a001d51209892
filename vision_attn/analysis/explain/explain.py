"""``vision-attn explain``: class-activation maps of one run, or of two runs side by side on the same images
and the same targets (``--vs``), one figure per image.

The task's :class:`~vision_attn.tasks.task.Explain` record says how its run takes an image, what its
targets are (a classifier's top classes, a detector's or segmenter's detections) and which methods it
serves; :mod:`.layers` picks the layer per model family; :mod:`.methods` runs pytorch-grad-cam. A second
run gets the first run's targets (the same class; for a box, its own anchor that overlaps the box most).
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from vision_attn.analysis.attention_maps import vit_maps
from vision_attn.analysis.explain.figure import Panel, explain_figure
from vision_attn.analysis.explain.layers import TargetLayers, target_layers
from vision_attn.analysis.explain.methods import METHODS, cam_map, uses_targets
from vision_attn.data import load_image
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.atomic import atomic_folder, save_figure, write_json
from vision_attn.models.vit import VisionTransformer
from vision_attn.tasks import TASKS, load_run
from vision_attn.tasks.runs import Run
from vision_attn.tasks.task import Explain, ExplainTarget

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["explain", "explained_figures", "explain_image", "check_method", "chosen_method", "rollout_map"]


def chosen_method(run: Run, method: str | None) -> str:
    """``method``, or when it is None the default of the run's task (a classifier's ``gradcam``, a
    detector's and segmenter's ``layercam``)."""
    record = TASKS[run.task].explain
    return method if method is not None else record.default if record is not None else "gradcam"


def check_method(run: Run, method: str, layer: str | None) -> Explain:
    """The task's record, once the run's task serves ``method`` (a ConfigError naming what does)."""
    if method not in METHODS:
        raise ConfigError(f"--method {method}: not a method; choose one of {', '.join(METHODS)}")
    record = TASKS[run.task].explain
    if record is None or method not in record.methods:
        served = ", ".join(record.methods) if record else "none"
        raise ConfigError(f"--method {method}: not served for {run.task} runs ({run.path}); their methods: {served}")
    if method == "rollout" and not isinstance(run.model, VisionTransformer):
        raise ConfigError(f"--method rollout: reads the attention of a ViT/DeiT; {run.path} is a "
                          f"{type(run.model).__name__}; use gradcam, gradcam++, eigencam or layercam")
    if method == "rollout" and layer:
        raise ConfigError("--layer: rollout multiplies every layer's attention; leave --layer out")
    return record


def _display(run: Run, x: torch.Tensor) -> np.ndarray:
    """The network's input (1, 3, H, W) as the (H, W, 3) uint8 picture it is, the run's normalisation undone."""
    mean, std = torch.tensor(run.mean).view(3, 1, 1), torch.tensor(run.std).view(3, 1, 1)
    return ((x[0] * std + mean).clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()


def rollout_map(model: torch.nn.Module, x: torch.Tensor, head_fusion: str = "mean", discard: float = 0.0) -> np.ndarray:
    """Attention rollout of a ViT/DeiT on the input ``x`` (1, 3, H, W) (:func:`~vision_attn.analysis.attention_maps.vit_maps`
    with ``head_fusion`` and ``discard``) of the token its head reads (the class token, or the patch tokens'
    mean row when the head averages them), bilinear at input size and scaled to [0, 1] as the CAM methods'
    maps are."""
    grid = vit_maps(model, x, head_fusion, discard, head_query=True).maps["rollout"][None, None]
    heat = F.interpolate(grid, size=x.shape[-2:], mode="bilinear", align_corners=False)[0, 0].numpy()
    heat = heat - heat.min()
    return heat / (heat.max() + 1e-7)


def _unused(output: Any) -> Any:
    """The target of a method that reads none (EigenCAM: the activations' first principal component)."""
    return output.sum()


def _peak(heat: np.ndarray) -> list[int]:
    y, x = np.unravel_index(int(np.argmax(heat)), heat.shape)
    return [int(x), int(y)]


def explain_image(runs: Sequence[Run], record: Explain, image: np.ndarray, method: str,
                  layers: Sequence[TargetLayers | None], top_k: int) -> tuple[list[list[Panel]], list[dict[str, Any]]]:
    """The panels (a row per target, a column per run) of one (H, W, 3) uint8 image, and per target its
    label, box, each run's map peak (x, y) in input pixels and (gradient methods) the layers each run's
    map read (a detection's: its anchor's level)."""
    xs = [record.to_input(run, image) for run in runs]
    with torch.no_grad():
        outs = [record.output(run.model(x)) for run, x in zip(runs, xs)]
    targets = record.targets(runs[0], outs[0], top_k)
    pictures = [_display(run, x) for run, x in zip(runs, xs)]
    boxes = [t.box for t in targets if t.box is not None]
    if not uses_targets(method):  # one map per run, whatever the target; every box drawn
        heats = [rollout_map(run.model, x) if method == "rollout" else cam_map(method, run.model, x, lay, _unused, record.output)
                 for run, x, lay in zip(runs, xs, layers)]
        row = [Panel(p, h, boxes, f"{run.label}\n{', '.join(t.label for t in targets) or method}")
               for run, p, h in zip(runs, pictures, heats)]
        return [row], [{"label": t.label, "box": t.box, "peaks": [_peak(h) for h in heats]} for t in targets] or \
            [{"label": method, "box": None, "peaks": [_peak(h) for h in heats]}]
    rows, found = [], []
    for target in targets:
        per_run: list[ExplainTarget] = [target] + [record.align(run, target, out) for run, out in zip(runs[1:], outs[1:])]
        read = [lay.at_level(t.level) if lay is not None else lay for lay, t in zip(layers, per_run)]
        heats = [cam_map(method, run.model, x, lay, t, record.output) for run, x, lay, t in zip(runs, xs, read, per_run)]
        rows.append([Panel(p, h, [t.box] if t.box else [], f"{run.label}\n{t.label}")
                     for run, p, h, t in zip(runs, pictures, heats, per_run)])
        found.append({"label": target.label, "box": target.box, "peaks": [_peak(h) for h in heats],
                      "layers": [list(lay.names) for lay in read if lay is not None]})
    if not rows:  # nothing detected: the image alone
        rows = [[Panel(p, np.zeros(p.shape[:2]), [], f"{run.label}\nnothing detected")
                 for run, p in zip(runs, pictures)]]
    return rows, found


def _read(images: Sequence[str | os.PathLike]) -> list[tuple[Path, np.ndarray]]:
    """Every image decoded before anything is computed; the first that cannot be read is a DataError."""
    out = []
    for spec in images:
        path = Path(spec)
        if not path.is_file():
            raise DataError(f"image {path}: no such file; give image files")
        try:
            out.append((path, load_image(path)))
        except DataError as e:
            why = str(e).split(": ", 1)[-1].split(": replace", 1)[0].split("; ", 1)[0]
            raise DataError(f"image {path}: cannot be decoded ({why}); give a JPEG, PNG, BMP, WebP or TIFF "
                            "file") from None
    return out


def explained_figures(runs: Sequence[Run], images: Sequence[str | os.PathLike], *, method: str | None = None,
                      layer: str | None = None, top_k: int = 3
                      ) -> Iterator[tuple[Path, Figure, list[TargetLayers | None], list[dict[str, Any]]]]:
    """For each image (all read first: an unreadable one is a DataError before any map), its path, its
    figure (a column per run of ``runs``, one task, on the first run's targets), the layers read and per
    target its label, box and map peaks. The runs' task must serve ``method`` (None: the task's default,
    :func:`chosen_method`)."""
    method = chosen_method(runs[0], method)
    if len({r.task for r in runs}) > 1:
        raise ConfigError(f"--vs {runs[1].path}: a {runs[1].task} run beside a {runs[0].task} run; compare runs of "
                          "one task")
    record = check_method(runs[0], method, layer)
    for other in runs[1:]:
        check_method(other, method, layer)
    if not images:
        raise ConfigError("explain: give at least one image")
    read = _read(images)
    layers = [None if method == "rollout" else target_layers(r.model, record.to_input(r, read[0][1]), layer)
              for r in runs]
    for path, image in read:
        rows, found = explain_image(runs, record, image, method, layers, top_k)
        yield path, explain_figure(f"{method}: {path.name}", rows), layers, found


def explain(run: str | os.PathLike, images: Sequence[str | os.PathLike], output: str | os.PathLike, *,
            vs: str | os.PathLike | None = None, method: str | None = None, layer: str | None = None,
            top_k: int = 3) -> list[dict[str, Any]]:
    """Maps of ``run`` (and ``vs`` beside it) on ``images``: ``output/IMAGE.png`` per image and
    ``output/explain.json`` (``[{"image", "figure", "method", "runs", "layers", "targets": [{"label",
    "box", "peaks", "layers"}]}]``), written together or not at all; returns that list. ``method``: None
    for the task's default (:func:`chosen_method`). ``top_k``: a classifier's
    top classes, a detector's best detections (gradient methods); ``layer``: a module name (or several,
    comma-separated: their maps averaged), else the family's default."""
    runs = [load_run(run)] + ([load_run(vs)] if vs is not None else [])
    method = chosen_method(runs[0], method)
    figures = explained_figures(runs, images, method=method, layer=layer, top_k=top_k)
    first = next(figures)  # every check done, every image read: nothing is written before
    results: list[dict[str, Any]] = []

    def write(tmp: Path) -> None:
        used: set[str] = set()
        for path, fig, layers, found in itertools.chain([first], figures):
            name = path.stem if path.stem not in used else f"{path.stem}_{len(used)}"
            used.add(name)
            save_figure(fig, tmp / f"{name}.png", dpi=90)
            results.append({"image": str(path), "figure": str(Path(output) / f"{name}.png"), "method": method,
                            "runs": [str(r.path) for r in runs],
                            "layers": [list(lay.names) if lay else ["rollout"] for lay in layers], "targets": found})
        write_json(tmp / "explain.json", results)

    atomic_folder(output, write)
    return results
