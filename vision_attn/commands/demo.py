"""``vision-attn demo``: a tour of the model zoo: FLOPs, one forward pass on a photo at two sizes, the
class token's attention entropy per layer (printing only; see :mod:`vision_attn.analysis.demo`)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import vision_attn
from vision_attn.commands import size_text
from vision_attn.commands.models import models_table

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

DEMO_MODEL = "deit_tiny_distilled_patch16_224"


def _cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from vision_attn.analysis.demo import attention_forward, sample_photo  # scikit-learn loads here

    console.rule("1. FLOPs of the ViT/DeiT zoo")
    console.print("Counted on the meta device (no memory, no arithmetic): "
                  "[bold]vision_attn.analysis.count_model_flops(name)[/bold]")
    table, _ = models_table(vision_attn.list_models())
    console.print(table)

    console.rule(f"2. One forward pass of {DEMO_MODEL}")
    console.print("[bold]Random initialisation[/bold]: no checkpoint is loaded, so the logits mean nothing; "
                  "pass pretrained=PATH to create_model for real weights.")
    console.print("Input: scikit-learn's sample photo china.jpg, resized to cover the size, centre-cropped, "
                  "ImageNet-normalised (vision_attn.analysis.demo.sample_photo).")
    model = vision_attn.create_model(DEMO_MODEL).eval()
    runs = [attention_forward(model, sample_photo(size)) for size in ((224, 224), (224, 320))]
    pos = model.patch_embed.grid_size
    shapes = Table()
    for col in ("input", "patch grid", "tokens (B, N, D)", "logits", "ms / image"):
        shapes.add_column(col, justify="right")
    for run in runs:
        shapes.add_row(size_text(run.input_shape), size_text(run.grid), str(run.tokens_shape), str(run.logits_shape),
                       f"{1e3 * run.seconds_per_image:.1f}")
    console.print(shapes)
    console.print(f"N = 2 prefix tokens (class, distillation) + the patches. At 224x320 the learned "
                  f"{size_text(pos)} position table is resampled bicubically to the {size_text(runs[1].grid)} grid "
                  f"on the fly; nothing is retrained.")

    console.rule("3. Where the class token looks: attention entropy per layer")
    console.print("with vision_attn.layers.record_attention(model) as maps: model(x)  "
                  "# maps: one (B, heads, N, N) tensor per layer")
    console.print("Maximum (uniform attention): " + ", ".join(
        f"log {run.tokens_shape[1]} = {run.max_entropy:.2f} nats at {size_text(run.input_shape[-2:])}" for run in runs))
    ent = Table()
    ent.add_column("layer", justify="right")
    for run in runs:
        ent.add_column(f"{size_text(run.input_shape[-2:])} (nats)", justify="right")
        ent.add_column("of max", justify="right")
    for layer in range(len(runs[0].cls_entropy)):
        cells = []
        for run in runs:
            h = run.cls_entropy[layer]
            cells += [f"{h:.3f}", f"{100 * h / run.max_entropy:.1f}%"]
        ent.add_row(str(layer), *cells)
    console.print(ent)
    console.print("Entropy of the class token's attention over the N tokens, averaged over heads: log N means "
                  "uniform attention, 0 means one token. With random weights it stays near log N; a trained "
                  "ViT concentrates its attention on the object in its later layers.")
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``demo``."""
    p = sub.add_parser("demo", help="a tour: the FLOPs of the zoo, a forward pass on a photo, attention entropy",
                       description="FLOPs of the ViT/DeiT zoo, then one forward pass of a randomly initialised "
                       f"{DEMO_MODEL} on a photo at two sizes, with the class token's attention entropy per layer.")
    p.set_defaults(func=_cmd_demo)
