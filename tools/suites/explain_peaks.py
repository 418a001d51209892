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
- `--untrained`: the same maps of the run's network freshly initialised (the model-randomisation sanity
  check of Adebayo et al., 2018): a map that peaks on the object as often without training shows where
  the input's content is, not what the trained network uses.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.suites.harness import Param, Suite, log


def _data(run_folder: Path, given: str) -> str:
    import json

    if given:
        return given
    return json.loads((run_folder / "metrics.json").read_text())["data"]["source"]


def _classification(run, task, images, method, layers, explain_image) -> dict:
    from vision_attn.data import load_image

    hits = correct = 0
    chance = []
    for path in images:
        image = load_image(path)
        rows, found = explain_image([run], task, image, method, layers, top_k=1)
        x, y = found[0]["peaks"][0]
        picture = rows[0][0].image.astype(np.float32).mean(-1)
        on_digit = picture > 0.5 * picture.max()
        hits += bool(on_digit[y, x])
        chance.append(float(on_digit.mean()))
        correct += found[0]["label"].rsplit(" ", 1)[0] == path.parent.name
    return {"images": len(images), "peak_on_digit": hits, "correct": correct,
            "digit_pixel_share": float(np.mean(chance))}


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
    torch.manual_seed(0)
    trained = load_run(folder, weights=not p.untrained)
    method = chosen_method(trained, p.method or None)
    task = check_method(trained, method, p.layer or None)
    data = _data(folder, p.data)
    if trained.classes and (Path(data) / "val").is_dir() and trained.transform is not None:  # class folders
        images = sorted(image_paths([Path(data) / "val"]))
        images = images[:p.limit] if p.limit else images
        layers = [None if method == "rollout" else
                  target_layers(trained.model, task.to_input(trained, load_image(images[0])), p.layer or None)]
        result = _classification(trained, task, images, method, layers, explain_image)
        share = result["peak_on_digit"] / max(result["images"], 1)
        line = (f"peak on the digit: {result['peak_on_digit']}/{result['images']} ({100 * share:.1f}%; the digit "
                f"covers {100 * result['digit_pixel_share']:.1f}% of the pixels)")
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
    record.line(f"{folder}{' untrained' if p.untrained else ''} ({method}, layer {', '.join(names)}): {line}")


SUITE = Suite("explain_peaks", "share of val predictions whose class-activation map peaks on the object", run, (
    Param("run", "runs/demo_digits", "a trained run folder (classifier of digits, detector, segmenter)"),
    Param("data", "", "its data (default: the source its metrics.json records)"),
    Param("method", "", "map method (default: the task's, as `explain`)",
          choices=["", "gradcam", "gradcam++", "eigencam", "layercam", "rollout"]),
    Param("layer", "", "the module to read (default: the family's, as `explain`)"),
    Param("untrained", False, "the run's network freshly initialised instead of trained (sanity check)"),
    Param("limit", 0, "val images at most (0: all)", quick=20),
    Param("threads", 1, "torch threads"),
), group="check", doc=__doc__)
