"""layers.tables: constant tables outside the state dict, built on every call by a plain layer; on the
fast path (kernels.accelerate) built once per key, usable by a training pass after an inference-mode
one, and built in the graph when traced."""
import pytest
import torch
from torch import nn

import vision_attn
from vision_attn.kernels import accelerate
from vision_attn.layers.tables import Tables


def kept() -> Tables:
    holder = nn.Module()
    holder.tables = Tables()
    return accelerate(holder).tables


def test_plain_tables_are_built_on_every_call():
    tables, calls = Tables(), []
    tables.get("a", lambda: calls.append(1))
    tables.get("a", lambda: calls.append(1))
    assert len(calls) == 2


def test_built_once_per_key_as_normal_tensors_even_under_inference_mode():
    tables, calls = kept(), []

    def build():
        calls.append(1)
        return torch.arange(3.0)

    with torch.inference_mode():
        first = tables.get("a", build)
    assert not first.is_inference()  # a later pass that records gradients may save it
    assert tables.get("a", build) is first and len(calls) == 1 and len(tables) == 1
    tables.get("b", build)
    assert len(calls) == 2 and len(tables) == 2
    tables.clear()
    assert len(tables) == 0


def test_built_in_the_graph_while_traced():
    tables = kept()

    def f(x):
        return x + tables.get("t", lambda: torch.ones(3), x)

    gm = torch.fx.symbolic_trace(f)  # x a proxy: built for the graph, not kept
    assert len(tables) == 0
    traced = torch.jit.trace(f, torch.zeros(3), check_trace=False)  # (the check reruns f eagerly)
    assert len(tables) == 0
    for fn in (gm, traced):
        torch.testing.assert_close(fn(torch.zeros(3)), torch.ones(3))
    f(torch.zeros(3))  # eager: kept
    assert len(tables) == 1


@pytest.mark.parametrize("pos_embed", ["rope", "sincos2d"])
def test_position_tables_from_an_inference_pass_serve_a_training_pass(pos_embed):
    # a validation pass under torch.inference_mode (Lightning's default) before training: rope's tables
    # were inference tensors, and the training pass failed ("Inference tensors cannot be saved for backward")
    torch.manual_seed(0)
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32, pos_embed=pos_embed, num_classes=3)
    accelerate(model)
    x = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        first = model(x)
    out = model(x)
    out.sum().backward()
    torch.testing.assert_close(out.detach(), first)
    assert all(p.grad is not None for p in model.parameters())
    tables = model.rope._tables if pos_embed == "rope" else model._sincos
    assert len(tables) == 1  # built once, by the first pass, for both
    fresh = vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32, pos_embed=pos_embed, num_classes=3)
    assert model.state_dict().keys() == fresh.state_dict().keys()  # the tables are not in the state dict
