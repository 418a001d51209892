"""A model on the CPU fast paths (kernels.accelerate, under the tests' oneDNN plan), as the training
runner compiles it: while torch.compile captures, every fast path steps aside (kernels.capture), so
Inductor gets one graph of PyTorch's standard ops (no graph break, no custom kernel or autograd
Function it cannot trace) that computes what the plain model computes, in inference and in a training
step. Dynamo's capture only (a recording backend): tiny widths, real window layouts."""
from __future__ import annotations

import copy

import pytest
import torch

import vision_attn
from vision_attn.kernels import accelerate

MODELS = {
    "vit": ("vit_small_patch16_224", dict(depth=1, embed_dim=48, num_heads=3, img_size=32)),
    # one stage: a block of plain windows, then one of shifted windows with the region mask
    "swin": ("swin_tiny_patch4_window7_224", dict(depths=(2,), embed_dim=16, num_heads=(2,), window_size=4,
                                                  img_size=32, drop_path_rate=0.0)),
}


def _captured(model: torch.nn.Module, x: torch.Tensor, train: bool) -> tuple[list[str], torch.Tensor]:
    """The operations of the one graph Dynamo captures (fullgraph: a break raises), with their modules,
    and the output of the compiled model."""
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model.train(train), backend=record, fullgraph=True)
    if train:
        out = compiled(x)
        out.sum().backward()
    else:
        with torch.inference_mode():
            out = compiled(x)
    assert len(graphs) == 1
    return [f"{n.op} {getattr(n.target, '__module__', None) or ''}.{getattr(n.target, '__name__', n.target)}"
            for n in graphs[0].graph.nodes if n.op in ("call_function", "call_method")], out.detach()


STANDARD = ("call_method .", "call_function torch", "call_function _operator.", "call_function builtins.")


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_accelerated_model_compiles_to_standard_ops(kind, train):
    name, kwargs = MODELS[kind]
    plain = vision_attn.create_model(name, **kwargs)
    fast = accelerate(copy.deepcopy(plain))
    assert any(type(m).__module__.startswith("vision_attn.kernels") for m in fast.modules())  # on the fast paths
    x = torch.randn(2, 3, kwargs["img_size"], kwargs["img_size"])
    ops, got = _captured(fast, x, train)
    assert ops and not [op for op in ops if not op.startswith(STANDARD)]
    torch.testing.assert_close(got, plain.train(train)(x).detach(), atol=1e-5, rtol=1e-5)
