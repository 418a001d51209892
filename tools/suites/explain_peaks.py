"""Whether class-activation maps point at the object: the share of a trained run's val predictions whose map
peak falls on it (`vision-attn explain`'s maps, the same layers and targets).

    python tools/bench.py explain_peaks --run runs/demo_digits --method gradcam

- The method and layer default to `explain`'s (the task's method, the family's layer).
- Detection and segmentation runs: every true-positive detection of the val set (score >= 0.25, IoU >= 0.5
  with an unmatched ground-truth box of its class, best score first) gets the map of its own target (its
  class probability at its anchor, read at its anchor's level); the peak counts when it lies inside a
  ground-truth box of that class (in the letterboxed input the network took). The chance level is the
  share of the input's pixels inside a ground-truth box of the class, averaged over the true positives.
- Classification runs (digits: bright strokes on black): the map of the predicted class of every val image
  (rollout: the class-agnostic attention rollout); the peak counts when the input pixel there is on the
  digit (brighter than half the image's brightest); the digit's share of the pixels is the chance level.
  Two ceilings for a map on the layer's grid (a ViT's 4x4 patches), upsampled as pytorch-grad-cam does
  (cv2 bilinear to the input): `reachable`, the images with a stroke pixel at one of the pixels where such
  a map can peak at all (a cell's map, alone or leaning to a neighbour); `oracle`, the images where the
  map that is each cell's share of stroke pixels peaks on a stroke.
- `--untrained`: the same maps of the run's network freshly initialised (`--seed`; the model-randomisation
  sanity check of Adebayo et al., 2018): a map that peaks on the object as often without training shows
  where the input's content is, not what the trained network uses.
- Variants of a classifier's maps: `--layer A,B` (several layers, their maps averaged), `--target true`
  (the image's own class instead of the predicted one) or `softmax` (the predicted class's probability
  instead of its logit), `--fusion max|min` and `--discard SHARE` (rollout's head fusion, and the share of
  each layer's weakest weights zeroed).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from tools.suites.harness import Param, Suite, log


def _data(run_folder: Path, given: str) -> str:
    import json

    if given:
        return given
    return json.loads((run_folder / "metrics.json").read_text())["data"]["source"]


def _grid(run, layers, x) -> tuple[int, int]:
    """The (h, w) grid of the maps: the layer's output as its reshape lays it out, or rollout's patch grid."""
    import torch

    if layers is None:
        ph, pw = run.model.patch_embed.patch_size
        return -(-x.shape[-2] // ph), -(-x.shape[-1] // pw)
    seen = []
    handle = layers.modules[0].register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        run.model(x)
    handle.remove()
    out = layers.reshape(seen[0]) if layers.reshape else seen[0]
    return tuple(out.shape[-2:])


def _peak_pixels(grid: tuple[int, int], size: tuple[int, int]) -> list[tuple[int, int]]:
    """Every (y, x) where a map on ``grid``, scaled and resized to ``size`` by pytorch-grad-cam, can peak: the
    map of one cell, alone and leaning to each neighbour (bilinear peaks lie near cell centres)."""
    from pytorch_grad_cam.utils.image import scale_cam_image

    gh, gw = grid
    peaks = set()
    for r, c, dr, dc in itertools.product(range(gh), range(gw), (-1, 0, 1), (-1, 0, 1)):
        cam = np.zeros((1, gh, gw), np.float32)
        cam[0, r, c] = 1.0
        if 0 <= r + dr < gh and 0 <= c + dc < gw and (dr or dc):
            cam[0, r + dr, c + dc] = 0.5
        heat = scale_cam_image(cam, (size[1], size[0]))[0]
        peaks.add(tuple(int(i) for i in np.unravel_index(int(np.argmax(heat)), heat.shape)))
    return sorted(peaks)


def _oracle_peak(on_digit: np.ndarray, grid: tuple[int, int]) -> tuple[int, int]:
    """The peak of the map that is each cell's share of stroke pixels, upsampled as pytorch-grad-cam does."""
    import cv2
    from pytorch_grad_cam.utils.image import scale_cam_image

    share = cv2.resize(on_digit.astype(np.float32), (grid[1], grid[0]), interpolation=cv2.INTER_AREA)
    heat = scale_cam_image(share[None], (on_digit.shape[1], on_digit.shape[0]))[0]
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(heat)), heat.shape))


def _target(kind: str, true_index: int, task):
    """The task's record with one target per image: the predicted class's logit (``kind`` ''), the true
    class's logit (``true``) or the predicted class's softmax probability (``softmax``)."""
    import dataclasses

    from vision_attn.tasks.task import ExplainTarget

    if not kind:
        return task

    def targets(run, logits, k):
        probs = logits.detach().float().softmax(-1)[0]
        i = true_index if kind == "true" else int(probs.argmax())
        score = (lambda out: out.softmax(-1)[i]) if kind == "softmax" else (lambda out: out[i])
        return [ExplainTarget(f"{run.classes[i]} {float(probs[i]):.2f}", i, score)]

    return dataclasses.replace(task, targets=targets)


def _classification(run, task, images, method, layers, explain_image, p) -> dict:
    import torch

    from vision_attn.analysis.explain import rollout_map
    from vision_attn.data import load_image

    hits = correct = reachable = oracle = 0
    chance = []
    first = task.to_input(run, load_image(images[0]))
    grid = _grid(run, layers[0], first)
    peaks = _peak_pixels(grid, tuple(first.shape[-2:]))
    for path in images:
        image = load_image(path)
        true_index = run.classes.index(path.parent.name)
        rows, found = explain_image([run], _target(p.target, true_index, task), image, method, layers, top_k=1)
        x, y = found[0]["peaks"][0]
        inputs = task.to_input(run, image)
        if method == "rollout":  # with the head fusion and discard asked (the defaults: explain's own map)
            heat = rollout_map(run.model, inputs, p.fusion, p.discard)
            y, x = np.unravel_index(int(np.argmax(heat)), heat.shape)
        picture = rows[0][0].image.astype(np.float32).mean(-1)
        on_digit = picture > 0.5 * picture.max()
        hits += bool(on_digit[y, x])
        chance.append(float(on_digit.mean()))
        reachable += any(on_digit[py, px] for py, px in peaks)
        oracle += bool(on_digit[_oracle_peak(on_digit, grid)])
        with torch.no_grad():
            correct += int(run.model(inputs).argmax()) == true_index
    return {"images": len(images), "peak_on_digit": hits, "correct": correct,
            "digit_pixel_share": float(np.mean(chance)), "grid": list(grid), "peak_pixels": len(peaks),
            "ceiling_reachable": reachable, "ceiling_oracle": oracle}


def _detection(run, task, dataset, method, layers, explain_image, limit) -> dict:
    import torch
    from torchvision.ops import box_iou

    from vision_attn.data.det_transforms import letterbox_params

    tp = hits = 0
    chance: list[float] = []
    read: dict[str, int] = {}
    n = len(dataset.records) if not limit else min(limit, len(dataset.records))
    for i in range(n):
        rec = dataset.records[i]
        image, boxes, labels = dataset.load(i)
        scale, _, (left, top) = letterbox_params(rec.height, rec.width, run.img_size[0])
        gt = torch.as_tensor(boxes, dtype=torch.float32) * scale + torch.tensor([left, top, left, top])
        _, found = explain_image([run], task, image, method, layers, top_k=100)
        used: set[int] = set()
        for det in found:  # best score first
            if det["box"] is None:  # nothing detected (EigenCAM's one map of the image)
                continue
            cls = run.classes.index(det["label"].rsplit(" ", 1)[0])
            same = [j for j in range(len(labels)) if int(labels[j]) == cls and j not in used]
            if not same:
                continue
            iou = box_iou(torch.tensor([det["box"]]), gt[same])[0]
            if float(iou.max()) < 0.5:
                continue
            used.add(same[int(iou.argmax())])
            tp += 1
            x, y = det["peaks"][0]
            of_class = gt[[j for j in range(len(labels)) if int(labels[j]) == cls]].tolist()
            hits += any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in of_class)
            inside = np.zeros((run.img_size[0], run.img_size[0]), bool)
            for x1, y1, x2, y2 in of_class:
                inside[max(int(np.ceil(y1)), 0):int(y2) + 1, max(int(np.ceil(x1)), 0):int(x2) + 1] = True
            chance.append(float(inside.mean()))
            for name in det.get("layers", [[]])[0] or ["one map per image"]:
                read[name] = read.get(name, 0) + 1
    return {"images": n, "true_positives": tp, "peak_in_box": hits, "box_pixel_share": float(np.mean(chance or [0])),
            "targets_per_layer": read}


def run(p, record) -> None:
    import torch

    from vision_attn.analysis.explain import check_method, chosen_method, explain_image, target_layers
    from vision_attn.data import image_paths, load_image, open_detection
    from vision_attn.tasks import load_run

    torch.set_num_threads(p.threads)
    folder = Path(p.run)
    torch.manual_seed(p.seed)
    trained = load_run(folder, weights=not p.untrained)
    method = chosen_method(trained, p.method or None)
    task = check_method(trained, method, p.layer or None)
    data = _data(folder, p.data)
    if trained.classes and (Path(data) / "val").is_dir() and trained.transform is not None:  # class folders
        images = sorted(image_paths([Path(data) / "val"]))
        images = images[:p.limit] if p.limit else images
        layers = [None if method == "rollout" else
                  target_layers(trained.model, task.to_input(trained, load_image(images[0])), p.layer or None)]
        result = _classification(trained, task, images, method, layers, explain_image, p)
        share = result["peak_on_digit"] / max(result["images"], 1)
        n = result["images"]
        line = (f"peak on the digit: {result['peak_on_digit']}/{n} ({100 * share:.1f}%; the digit "
                f"covers {100 * result['digit_pixel_share']:.1f}% of the pixels; a {result['grid'][0]}x"
                f"{result['grid'][1]} map can peak at {result['peak_pixels']} pixels, one on the digit in "
                f"{result['ceiling_reachable']}/{n} images; each cell's share of the digit as the map: "
                f"{result['ceiling_oracle']}/{n})")
    else:
        dataset = open_detection(data, "val")
        image, _, _ = dataset.load(0)
        layers = [target_layers(trained.model, task.to_input(trained, image), p.layer or None)]
        result = _detection(trained, task, dataset, method, layers, explain_image, p.limit)
        share = result["peak_in_box"] / max(result["true_positives"], 1)
        per_layer = ", ".join(f"{k}: {v}" for k, v in result["targets_per_layer"].items())
        line = (f"peak inside a ground-truth box of the class: {result['peak_in_box']}/{result['true_positives']} "
                f"true positives ({100 * share:.1f}%; the boxes of the class cover {100 * result['box_pixel_share']:.1f}% "
                f"of the pixels) on {result['images']} val images; maps read per layer: {per_layer}")
    names = list(layers[0].names) if layers[0] else ["every layer's attention"]
    result.update(run=str(folder), method=method, layers=names, share=share, untrained=p.untrained)
    record.results.update(result)
    log(line)
    variant = "".join(f", {k} {v}" for k, v in (("target", p.target), ("fusion", p.fusion if p.fusion != "mean" else ""),
                                                 ("discard", p.discard or "")) if v)
    record.line(f"{folder}{f' untrained (seed {p.seed})' if p.untrained else ''} ({method}, layer {', '.join(names)}"
                f"{variant}): {line}")


SUITE = Suite("explain_peaks", "share of val predictions whose class-activation map peaks on the object", run, (
    Param("run", "runs/demo_digits", "a trained run folder (classifier of digits, detector, segmenter)"),
    Param("data", "", "its data (default: the source its metrics.json records)"),
    Param("method", "", "map method (default: the task's, as `explain`)",
          choices=["", "gradcam", "gradcam++", "eigencam", "layercam", "rollout"]),
    Param("layer", "", "the module to read, or several comma-separated (default: the family's, as `explain`)"),
    Param("untrained", False, "the run's network freshly initialised instead of trained (sanity check)"),
    Param("seed", 0, "the seed of the --untrained initialisation"),
    Param("target", "", "a classifier's target: the predicted class's logit (default, as `explain`), the "
          "image's true class's logit, or the predicted class's softmax probability", choices=["", "true", "softmax"]),
    Param("fusion", "mean", "rollout: how each layer's heads are fused", choices=["mean", "max", "min"]),
    Param("discard", 0.0, "rollout: the share of each layer's weakest attention weights zeroed"),
    Param("limit", 0, "val images at most (0: all)", quick=20),
    Param("threads", 1, "torch threads"),
), group="check", doc=__doc__)
