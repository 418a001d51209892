"""``vision-attn explain RUN IMAGES... [--vs RUN2] [--method M] [--layer NAME] -o DIR``: class-activation maps
of a trained run, or two runs side by side on the same images and targets (parsing and printing only;
see vision_attn.analysis.explain)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def _cmd_explain(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.analysis.explain import explain

    results = explain(args.run, args.images, args.output, vs=args.vs, method=args.method, layer=args.layer,
                      top_k=args.top_k)
    for r in results:
        targets = ", ".join(t["label"] for t in r["targets"]) or "nothing detected"
        console.print(f"{r['image']}: {targets} -> {r['figure']}", markup=False, highlight=False)
    read = sorted({n for r in results for t in r["targets"] for n in (t.get("layers") or [[]])[0]})  # a detection's level
    console.print(f"{len(results)} figure(s) ({results[0]['method']}, layer {', '.join(read or results[0]['layers'][0])}) and "
                  f"explain.json in {args.output}", markup=False, highlight=False)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("explain", help="class-activation maps of a run (or two side by side) on images",
                       description="Where a trained run looks: one figure per image, a row per target (a "
                       "classifier's top classes, a detector's or segmenter's detections), a column per run, every "
                       "map on one colour scale. Methods (pytorch-grad-cam's): gradcam, gradcam++, eigencam "
                       "(one map per image, no target), layercam; rollout (attention rollout, ViT/DeiT classifiers).")
    p.add_argument("run", metavar="RUN", help="a run folder (runs/NAME) or its checkpoint")
    p.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    p.add_argument("--vs", default=None, metavar="RUN2", help="a second run of the same task beside the first, "
                   "on the first run's targets")
    p.add_argument("--method", default=None, metavar="METHOD",
                   help="gradcam, gradcam++, eigencam, layercam or rollout (default: gradcam for classifiers, "
                   "layercam for detectors and segmenters)")
    p.add_argument("--layer", default=None, metavar="NAME", help="the module to read (a name of "
                   "model.named_modules(); NAME,NAME,...: several, their maps averaged); default: the model family's (ViT: the last block's norm1 with a class-token "
                   "head, the last block with average pooling; Swin: the last stage; YOLO: the rows the head reads, a "
                   "detection's own level for gradient methods; CNN: the last feature level)")
    p.add_argument("--top-k", type=int, default=3, help="targets per image: top classes or best detections (3)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for IMAGE.png and explain.json")
    p.set_defaults(func=_cmd_explain)
