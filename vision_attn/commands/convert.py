"""``vision-attn convert RUN --to timm|transformers -o OUT``: a trained classification run written for a
colleague's library, checked there (parsing and printing only; see vision_attn.models.convert)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from vision_attn.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console


def _cmd_convert(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.models.convert import to_timm, to_transformers
    from vision_attn.tasks import load_run

    if args.output is None:
        what = "OUT.safetensors" if args.to == "timm" else "FOLDER"
        raise ConfigError(f"convert --to {args.to}: say where to write it with -o {what}")
    run = load_run(args.run, task="cls")
    name = run.hparams["name"]
    inserted = run.hparams.get("attention") not in (None, "none")
    if args.to == "timm":
        result = to_timm(run.model, name, args.output, kwargs=run.hparams.get("model_kwargs") or {},
                         img_size=run.img_size, inserted=inserted)
    else:
        result = to_transformers(run.model, name, args.output, class_names=run.classes, img_size=run.img_size,
                                 inserted=inserted, unchecked=args.unchecked)
    checked = (f"checked in {result.peer}: largest difference from ours {result.max_diff:.2e}"
               if result.max_diff is not None else
               f"NOT checked: {result.peer} is not installed here; written because --unchecked was given")
    if args.json:
        print(json.dumps({"path": str(result.path), "peer": result.peer, "load": result.load,
                          "max_diff": result.max_diff, "checked": result.max_diff is not None}, indent=2))
        return 0
    console.print(f"{run.label}: wrote {result.path} for {result.peer} ({checked})", markup=False, soft_wrap=True)
    console.print(f"load it with: {result.load}", markup=False, soft_wrap=True)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``convert``."""
    p = sub.add_parser("convert", help="write a trained classifier for timm or transformers (checked there)",
                       description="Write a classification run's weights for another library: --to timm gives a "
                       "state dict under timm's keys (timm.create_model(..., pretrained_cfg_overlay=dict(file=OUT))), "
                       "--to transformers a folder for AutoModelForImageClassification.from_pretrained. The peer "
                       "loads what was written and must give our outputs before it is kept.")
    p.add_argument("run", metavar="RUN", help="a classification run folder (runs/NAME) or its best.ckpt")
    p.add_argument("--to", choices=("timm", "transformers"), required=True, help="the library to write for")
    p.add_argument("-o", "--output", help="timm: the .safetensors (or .pth) file; transformers: the folder")
    p.add_argument("--unchecked", action="store_true",
                   help="--to transformers without transformers installed: write the folder although it cannot be "
                   "checked (without this flag nothing is written)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_convert)
