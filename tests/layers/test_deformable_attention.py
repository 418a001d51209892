"""Multi-scale deformable attention against ultralytics (the function and ``MSDeformAttn``): values and
gradients, its state dict and initialisation, bad input, torch.fx, and the ONNX export in onnxruntime."""
import io
import warnings

import numpy as np
import pytest
import torch

from tests.peers import import_ultralytics
from vision_attn.errors import ConfigError, DataError
from vision_attn.kernels import accelerate, deformable_sample
from vision_attn.layers import MultiScaleDeformableAttention, multi_scale_deformable_attn, sample_standard, sampling_locations

TOL = dict(atol=1e-4, rtol=1e-4)


def peer_function():
    return import_ultralytics("ultralytics.nn.modules.utils").multi_scale_deformable_attn_pytorch


def peer_module(*args: int):
    return import_ultralytics("ultralytics.nn.modules.transformer").MSDeformAttn(*args)


def sampling_inputs(levels, batch=2, queries=9, heads=4, dim=8, points=3, dtype=torch.float32):
    """value (B, S, heads, d), locations (B, Q, heads, L, P, 2) from -0.3 to 1.3 (outside reads zeros),
    attention weights (B, Q, heads, L, P) summing to 1 over levels x points."""
    tokens, n = sum(h * w for h, w in levels), len(levels)
    value = torch.randn(batch, tokens, heads, dim, dtype=dtype)
    loc = torch.rand(batch, queries, heads, n, points, 2, dtype=dtype) * 1.6 - 0.3
    attn = torch.randn(batch, queries, heads, n * points, dtype=dtype).softmax(-1).unflatten(-1, (n, points))
    return [t.requires_grad_() for t in (value, loc, attn)]


SAMPLERS = pytest.mark.parametrize("sample", [sample_standard, deformable_sample], ids=["plain", "fast"])


@SAMPLERS
@pytest.mark.parametrize("levels", [
    [(7, 5), (3, 4)],                   # non-square
    [(1, 1)],                           # one level of one pixel
    [(2, 9), (5, 1), (4, 4)],           # three levels, a one-column one
    [(8, 8), (4, 4), (2, 2), (1, 1)],   # RT-DETR-like, four levels
])
def test_function_matches_ultralytics(levels, sample):
    value, loc, attn = sampling_inputs(levels)
    ours = multi_scale_deformable_attn(value, levels, loc, attn, sample)
    peer = peer_function()(value, levels, loc.flatten(3, 4), attn.flatten(3))
    assert ours.shape == peer.shape == (2, 9, 4 * 8)
    torch.testing.assert_close(ours, peer, **TOL)
    grad = torch.randn_like(ours)
    for a, b, name in zip(torch.autograd.grad(ours, (value, loc, attn), grad),
                          torch.autograd.grad(peer, (value, loc, attn), grad), ("value", "locations", "weights")):
        assert b.abs().sum() > 0, name  # the check compares something
        torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"gradient of the {name}: {m}")
    # ultralytics' folded (levels * points) layout and an (L, 2) tensor of shapes give the same result
    folded = multi_scale_deformable_attn(value, torch.tensor(levels), loc.flatten(3, 4), attn.flatten(3), sample)
    torch.testing.assert_close(folded, ours, atol=0, rtol=0)


@SAMPLERS
def test_locations_far_outside_read_zeros_and_no_gradient(sample):
    levels = [(4, 6), (2, 3)]
    value, loc, attn = sampling_inputs(levels)
    far = (loc.detach() + torch.tensor([3.0, -2.0])).requires_grad_()  # every point beyond the maps
    out = multi_scale_deformable_attn(value, levels, far, attn, sample)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert torch.equal(far.grad, torch.zeros_like(far)) and torch.equal(value.grad, torch.zeros_like(value))


@SAMPLERS
def test_second_derivatives(sample):
    levels = [(3, 4), (2, 2)]
    inputs = sampling_inputs(levels, batch=1, queries=3, heads=2, dim=3, points=2, dtype=torch.float64)
    fn = lambda v, l, a: multi_scale_deformable_attn(v, levels, l, a, sample)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


def modules(d_model=32, n_levels=3, n_heads=4, n_points=2):
    peer = peer_module(d_model, n_levels, n_heads, n_points)
    ours = MultiScaleDeformableAttention(d_model, n_levels, n_heads, n_points)
    ours.load_state_dict(peer.state_dict())
    return ours, peer


def test_state_dict_and_initialisation_equal_ultralytics():
    torch.manual_seed(3)
    peer = peer_module(64, 3, 8, 4)
    torch.manual_seed(3)
    ours = MultiScaleDeformableAttention(64, 3, 8, 4)
    theirs, mine = peer.state_dict(), ours.state_dict()
    assert list(mine) == list(theirs) == [f"{m}.{p}" for m in ("sampling_offsets", "attention_weights",
                                                             "value_proj", "output_proj") for p in ("weight", "bias")]
    for key, tensor in theirs.items():  # the same random draws in the same order, the same offset grid
        assert torch.equal(mine[key], tensor), key
    grid = mine["sampling_offsets.bias"].view(8, 3, 4, 2)
    assert torch.equal(grid[0, :, :, 0], torch.tensor([1.0, 2.0, 3.0, 4.0]).expand(3, 4))  # head 0 along +x
    assert MultiScaleDeformableAttention().state_dict()["sampling_offsets.weight"].shape == (256, 256)


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "accelerated"])
@pytest.mark.parametrize("coords, masked", [(2, False), (4, False), (2, True), (4, True)])
def test_module_matches_ultralytics(coords, masked, fast):
    levels = [(6, 5), (3, 4), (2, 1)]
    ours, peer = modules()
    if fast:
        accelerate(ours)
    for m in (ours, peer):  # random weights everywhere, offsets of a few pixels
        torch.manual_seed(1)
        for p in m.parameters():
            torch.nn.init.normal_(p, std=0.3)
    batch, queries, tokens = 2, 7, sum(h * w for h, w in levels)
    query = torch.randn(batch, queries, 32, requires_grad=True)
    value = torch.randn(batch, tokens, 32, requires_grad=True)
    refer = torch.rand(batch, queries, 1, coords, requires_grad=True)
    mask = torch.rand(batch, tokens) < 0.3 if masked else None
    out, expected = ours(query, refer, value, levels, mask), peer(query, refer, value, levels, mask)
    assert out.shape == (batch, queries, 32)
    torch.testing.assert_close(out, expected, **TOL)
    grad = torch.randn_like(out)
    inputs = (query, refer, value)
    g_ours = torch.autograd.grad(out, (*inputs, *ours.parameters()), grad)
    g_peer = torch.autograd.grad(expected, (*inputs, *peer.parameters()), grad)
    names = ["query", "refer_bbox", "value", *(n for n, _ in ours.named_parameters())]
    for a, b, name in zip(g_ours, g_peer, names):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"gradient of {name}: {m}")
    if masked:  # masked values are never read
        changed = value.detach().clone()
        changed[mask] = 100.0
        torch.testing.assert_close(ours(query, refer, changed, levels, mask), out, **TOL)


def test_bf16_autocast_as_ultralytics():
    """Under bf16 autocast (Lightning's bf16-mixed) the value arrives in bfloat16 and the weights in
    float32: the sampling runs in float32, as autocast runs ultralytics' grid_sample."""
    levels = [(6, 5), (3, 4), (2, 1)]
    ours, peer = modules()
    args = (torch.randn(2, 7, 32), torch.rand(2, 7, 1, 4), torch.randn(2, 44, 32), levels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = ours(*args), peer(*args)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected.float(), atol=2e-2, rtol=2e-2)


def test_reference_per_level():
    """refer_bbox may hold one reference per level (B, Q, L, 2): as sampling each level with its own."""
    levels = [(5, 4), (2, 3)]
    ours, _ = modules(n_levels=2)
    query, value = torch.randn(1, 6, 32), torch.randn(1, 26, 32)
    refer = torch.rand(1, 6, 2, 2)
    offsets = ours.sampling_offsets(query).unflatten(-1, (4, 2, 2, 2))
    per_level = sampling_locations(refer, offsets, levels)
    for level in range(2):
        alone = sampling_locations(refer[:, :, level:level + 1], offsets, levels)
        torch.testing.assert_close(per_level[:, :, :, level], alone[:, :, :, level], atol=0, rtol=0)
    assert ours(query, refer, value, levels).shape == (1, 6, 32)


def test_bad_input_names_what_to_fix():
    levels = [(4, 4), (2, 2)]
    ours, _ = modules(n_levels=2)
    query, value = torch.randn(1, 3, 32), torch.randn(1, 20, 32)
    with pytest.raises(DataError, match="value_shapes .* hold 20 tokens but the value has 19"):
        ours(query, torch.rand(1, 3, 1, 4), value[:, :19], levels)
    with pytest.raises(DataError, match="refer_bbox of shape .* must be"):
        ours(query, torch.rand(1, 3, 1, 3), value, levels)
    with pytest.raises(DataError, match=r"sampling_locations of shape .* must be \(B, Q, heads, 3, points, 2\)"):
        ours(query, torch.rand(1, 3, 1, 4), value, [(4, 4), (1, 2), (1, 2)])
    with pytest.raises(ConfigError, match="d_model 30 is not divisible by n_heads 8"):
        MultiScaleDeformableAttention(30)


class _Fixed(torch.nn.Module):
    """The layer with its level shapes fixed: tensors in, a tensor out (for export and tracing)."""

    def __init__(self, layer: torch.nn.Module, levels: list[tuple[int, int]]) -> None:
        super().__init__()
        self.layer, self.levels = layer, levels

    def forward(self, query: torch.Tensor, refer: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return self.layer(query, refer, value, self.levels)


def test_fx_trace_equals_eager():
    levels = [(4, 3), (2, 2)]
    ours, _ = modules(n_levels=2)
    model = _Fixed(ours, levels).eval()
    graph = torch.fx.symbolic_trace(model)
    args = (torch.randn(2, 5, 32), torch.rand(2, 5, 1, 4), torch.randn(2, 16, 32))
    assert any(n.target is multi_scale_deformable_attn for n in graph.graph.nodes)  # a leaf call
    torch.testing.assert_close(graph(*args), model(*args), atol=0, rtol=0)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])  # export/onnx.py: the legacy exporter and torch.export
def test_onnx_export_opset_18_runs_in_onnxruntime(exporter):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    levels = [(8, 6), (4, 3), (2, 2)]
    ours, peer = modules()
    model = _Fixed(ours, levels).eval()
    args = (torch.randn(2, 10, 32), torch.rand(2, 10, 1, 4), torch.randn(2, 64, 32))
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the legacy exporter's deprecation warning
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buffer, dynamo=exporter == "dynamo", opset_version=18,
                          input_names=["query", "refer_bbox", "value"], output_names=["out"],
                          dynamic_axes={"query": {0: "batch"}, "refer_bbox": {0: "batch"}, "value": {0: "batch"}})
    proto = onnx.load_from_string(buffer.getvalue())
    assert next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 18
    assert {"Gather", "GatherND"} & {n.op_type for n in proto.graph.node}  # the standard ops, no embedding_bag
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    for batch in (2, 3):  # the batch stays dynamic
        inputs = (torch.randn(batch, 10, 32), torch.rand(batch, 10, 1, 4), torch.randn(batch, 64, 32))
        (out,) = session.run(None, {k: v.numpy() for k, v in zip(("query", "refer_bbox", "value"), inputs)})
        with torch.no_grad():
            expected = peer(*inputs, levels)
            np.testing.assert_allclose(out, model(*inputs).numpy(), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(out, expected.numpy(), atol=1e-4, rtol=1e-4)
