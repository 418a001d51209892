"""ViT's ``forward`` runs the last block for the tokens the head reads only (class, distillation):
the logits and every gradient are those of the full pass (to rounding), whoever watches the last block (hooks,
recorded attention, FLOP counters) gets the full pass, and torch.fx graphs take the short path too,
with the full last block kept as the node feature extractors return."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.feature_extraction import create_feature_extractor

import vision_attn
from vision_attn.layers import Block, record_attention
from vision_attn.layers.mlp import SwiGLU

from tests.ops import ops_of

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=48, num_heads=2, num_classes=5)


def full(model, x):
    return model.forward_head(model.forward_features(x))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def spy(monkeypatch) -> list[int]:
    """Counts calls of Block.forward_queries (the short path)."""
    calls: list[int] = []
    original = Block.forward_queries

    def counted(self, x, queries, rope=None):
        calls.append(queries)
        return original(self, x, queries, rope=rope)

    monkeypatch.setattr(Block, "forward_queries", counted)
    return calls


@pytest.mark.parametrize("options,queries", [
    ({}, 1),
    (dict(distilled=True), 2),
    (dict(reg_tokens=2), 1),
    (dict(pos_embed="rope"), 1),
    (dict(init_values=0.1, qk_norm=True, drop_path_rate=0.2), 1),
    (dict(ffn_layer=SwiGLU), 1),
])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_logits_and_gradients_are_those_of_the_full_pass(monkeypatch, options, queries, train):
    calls = spy(monkeypatch)
    torch.manual_seed(0)
    model = vision_attn.create_model("vit_tiny_patch16_224", **SMALL, **options).train(train)
    with torch.no_grad():
        for p in model.parameters():  # tokens and biases start at zero: give them values
            p.add_(torch.randn_like(p), alpha=0.05)
    x = torch.randn(3, 3, 32, 32)
    results = []
    for run in (model, lambda x: full(model, x)):
        torch.manual_seed(1)  # the same drop-path draws: they are one per image, whatever the token count
        out = run(x)
        out = torch.stack(out) if isinstance(out, tuple) else out
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
        results.append((out, grads))
    assert calls == [queries]  # the first run took the short path, the second did not
    (out, grads), (ref, ref_grads) = results
    assert out.shape == ref.shape
    assert relative_error(out, ref) < 1e-5
    scale = max(float(r.abs().max()) for r in ref_grads)  # gradients that are zero but for rounding (k_norm's bias)
    for (name, _), g, r in zip(model.named_parameters(), grads, ref_grads):
        assert float((g - r).abs().max()) <= 1e-4 * float(r.abs().max()) + 1e-7 * scale, name


@pytest.mark.parametrize("options", [dict(global_pool="avg", class_token=False), dict(block="post"),
                                     dict(drop_rate=0.1)])
def test_models_whose_head_reads_all_tokens_or_that_draw_dropout_take_the_full_pass(monkeypatch, options):
    calls = spy(monkeypatch)
    model = vision_attn.create_model("vit_tiny_patch16_224", **SMALL, **options).train()
    model(torch.randn(2, 3, 32, 32))
    assert calls == []


def test_hooks_on_the_last_block_see_every_token(monkeypatch):
    calls = spy(monkeypatch)
    model = vision_attn.create_model("vit_tiny_patch16_224", **SMALL).eval()
    seen = []
    handle = model.blocks[-1].mlp.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    model(torch.randn(2, 3, 32, 32))
    handle.remove()
    assert seen == [torch.Size([2, 17, 48])] and calls == []
    model(torch.randn(2, 3, 32, 32))
    assert calls == [1]  # the hook removed: the short path again


def test_recorded_attention_and_feature_extractors_get_the_full_last_block():
    model = vision_attn.create_model("vit_tiny_patch16_224", **SMALL).eval()
    x = torch.randn(2, 3, 32, 32)
    with record_attention(model) as maps:
        model(x)
    assert [m.shape for m in maps] == [torch.Size([2, 2, 17, 17])] * 2
    extractor = create_feature_extractor(model, return_nodes={"blocks.1": "last", "head": "logits"})
    out = extractor(x)
    assert out["last"].shape == (2, 17, 48)
    torch.testing.assert_close(out["logits"], model(x), atol=1e-5, rtol=1e-5)


def test_flop_counters_count_the_architecture():
    model = vision_attn.create_model("vit_tiny_patch16_224", **SMALL).eval()
    x = torch.randn(2, 3, 32, 32)
    counts = []
    for run in (model, lambda x: full(model, x)):
        with FlopCounterMode(display=False) as counter:
            run(x)
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] > 0


def test_other_dispatch_modes_see_the_short_pass(monkeypatch):
    # a memory or op tracker measures what runs; only FLOP counters ask for the architecture
    calls = spy(monkeypatch)
    model = vision_attn.create_model("vit_tiny_patch16_224", **SMALL).eval()
    ops = ops_of(lambda: model(torch.randn(2, 3, 32, 32)))
    assert calls == [1] and ops
