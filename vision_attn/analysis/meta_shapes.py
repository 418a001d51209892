"""Output shapes of the common operations on the ``meta`` device, without torch's compiler stack.

A model is counted (:mod:`vision_attn.analysis.flops`) and described (``yaml info``) on the ``meta``
device: tensors with a shape, strides and a dtype but no storage, so nothing is allocated or computed.
In torch 2.14 that imports torch's compiler stack (``torch._dynamo`` and sympy, about 2.5 s of CPU,
more than counting the largest model) on every ``vision-attn flops``, ``models`` and ``yaml info``, by
three paths: most meta kernels of the aten operations are written in Python (``torch._refs``,
``torch._decomp``, ``torch._meta_registrations``) and wrapped in ``torch._disable_dynamo``, which
imports ``torch._dynamo`` on its first call; ``torch._check``, which they call, imports sympy; and
torch wraps the ``__torch_dispatch__`` of every ``TorchDispatchMode``, ``FlopCounterMode``'s included,
in ``torch._disable_dynamo`` as well.

:class:`MetaShapes` is a ``TorchDispatchMode`` (opted out of that wrapping) that answers the
operations a vision model's construction and forward pass run on meta tensors (factories and
initialisers, elementwise arithmetic and activations, the rotary tables' powers, cosines and sines,
convolution, matrix products, normalisation, pooling (a global mean included), nearest upsampling, softmax, concatenation, the CPU's fused attention) from their shape
formulas: torch's shapes and dtypes, and its strides on every dimension longer than 1 (the stride of
a dimension of length 1 never changes what a later view does; tests/analysis/test_meta_shapes.py
compares them with torch's meta kernels). An operation without a rule, or a case outside a rule's
conditions (another memory format, a dtype promotion it does not model, arguments torch would
reject), goes to torch's own meta kernel: the result is always torch's, only the time differs.
Tensors on other devices pass through untouched.

``with torch.device("meta"), meta_shapes(): model = build(...)`` builds a model; ``with
count_on_meta(flop_counter()) as counter: model(x)`` counts its FLOPs with ``FlopCounterMode``'s
formulas and module attribution, dispatched through these rules instead of the counter's own mode.
"""
from __future__ import annotations

import contextlib
from numbers import Number
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["RULES", "MetaShapes", "count_on_meta", "meta_shapes"]

aten = torch.ops.aten
META = torch.device("meta")

Shape = tuple[int, ...]
Rule = Callable[..., Any]


# ------------------------------------------------------------------------------------------------
# Helpers: shapes and strides as torch's meta kernels compute them, on plain ints.
def _contiguous_strides(shape: Sequence[int]) -> Shape:
    """Row-major strides (a dimension of length 0 counts as 1, as ``make_contiguous_strides_for``)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _empty(shape: Sequence[int], dtype: torch.dtype, strides: Sequence[int] | None = None) -> torch.Tensor:
    """A meta tensor (``empty_strided`` has a C++ meta kernel)."""
    shape = tuple(int(n) for n in shape)
    return torch.empty_strided(shape, tuple(strides) if strides is not None else _contiguous_strides(shape),
                               dtype=dtype, device=META)


def _broadcast(*shapes: Sequence[int]) -> Shape | None:
    """The broadcast shape of ``shapes``, or None where they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            if n != 1:
                if out[i] not in (1, n):
                    return None
                out[i] = n
    return tuple(out)


def _computation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype torch's meta kernels compute statistics in: float32 for the 16-bit floats."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _is_meta(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "meta"


def _is_cpu_scalar(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 0


def _plain(t: torch.Tensor) -> bool:
    """A real (floating) meta tensor in the standard layout: what every formula here assumes."""
    return _is_meta(t) and t.layout == torch.strided and t.is_floating_point()


def _non_overlapping_and_dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether the elements fill a block of memory exactly once (TensorImpl's definition)."""
    if len(shape) == 1:
        return shape[0] < 2 or strides[0] == 1
    expected = 1
    for i in sorted((i for i in range(len(shape)) if shape[i] >= 2), key=lambda i: strides[i]):
        if strides[i] != expected:
            return False
        expected *= shape[i]
    return True


def _permuted_strides(shape: Shape, operands: Sequence[torch.Tensor]) -> Shape:
    """Dense strides in the operands' dimension order (``torch._prims_common``'s
    ``compute_elementwise_output_logical_to_physical_perm``, and ``empty_like`` on meta): contiguous
    or channels-last when every operand is, else the dimensions sorted by the operands' strides."""
    ndim = len(shape)
    if ndim < 2:
        return _contiguous_strides(shape)
    contiguous = all(t.is_contiguous() for t in operands)
    channels_last = all(t.is_contiguous(memory_format=torch.channels_last) for t in operands)
    if contiguous and not channels_last:
        return _contiguous_strides(shape)
    if channels_last and not contiguous:
        perm = [0, *range(2, ndim), 1]
    else:  # sort the dimensions by the operands' strides, innermost last
        strides = [t.stride() for t in operands]

        def ge(a: int, b: int) -> bool:
            return True if b == 0 else False if a == 0 else a >= b or a % b == 0

        def should_swap(a: int, b: int) -> int:
            for s in strides:
                sa, sb = s[a], s[b]
                if sa == 0 or sb == 0:  # broadcast in either dimension: the next operand decides
                    continue
                if sa == sb:
                    if ge(shape[b], shape[a]):
                        continue
                    return 1
                if ge(sb, sa):
                    return -1
                if ge(sa, sb):
                    return 1
            return 0

        perm = list(reversed(range(ndim)))  # an insertion sort back to front, as torch's
        for i in range(1, ndim):
            dim1 = i
            for dim0 in reversed(range(i)):
                order = should_swap(perm[dim0], perm[dim1])
                if order > 0:
                    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                    dim1 = dim0
                elif order < 0:
                    break
        perm.reverse()
    physical = _contiguous_strides([shape[p] for p in perm])
    out = [0] * ndim
    for i, p in enumerate(perm):
        out[p] = physical[i]
    return tuple(out)


def _elementwise_strides(shape: Shape, operands: Sequence[torch.Tensor]) -> Shape:
    """Strides of an elementwise result (``torch._prims_common.compute_elementwise_output_strides``):
    a lone dense operand's own strides, else :func:`_permuted_strides`. ``operands`` are already
    expanded to ``shape``."""
    if not operands or len(shape) == 0:
        return ()
    if len(shape) == 1:
        return (1,)
    if len(operands) == 1 and _non_overlapping_and_dense(shape, operands[0].stride()):
        return tuple(operands[0].stride())
    return _permuted_strides(shape, operands)


def _elementwise(dtype: torch.dtype, *args: Any) -> torch.Tensor | None:
    """The result of an elementwise operation on ``args`` (tensors and numbers), or None where a
    shape does not broadcast."""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and not _is_cpu_scalar(a)]
    shape = _broadcast(*(t.shape for t in tensors))
    if shape is None:
        return None
    operands = [t if tuple(t.shape) == shape else t.expand(shape) for t in tensors]
    return _empty(shape, dtype, _elementwise_strides(shape, operands))


# ------------------------------------------------------------------------------------------------
# Rules: each takes the operation's arguments and returns its result, or NotImplemented for a case
# it does not cover (torch's meta kernel then runs).
def _factory(fill_dtype: Callable[..., torch.dtype | None]) -> Rule:
    """``zeros``/``ones``/``full``(size, ..., dtype=, layout=, device=): a contiguous tensor."""
    def rule(size: Sequence[int], *args: Any, dtype: torch.dtype | None = None, layout: Any = None,
             device: Any = None, pin_memory: Any = None) -> Any:
        if torch.device(device or "cpu") != META or layout not in (None, torch.strided) or any(n < 0 for n in size):
            return NotImplemented
        resolved = dtype or fill_dtype(*args)
        return NotImplemented if resolved is None else _empty(size, resolved)
    return rule


def _full_dtype(fill_value: Any) -> torch.dtype | None:
    """``full``'s dtype from its fill value: bool, int64 or the default float dtype."""
    if isinstance(fill_value, bool):
        return torch.bool
    if isinstance(fill_value, int):
        return torch.int64
    return torch.get_default_dtype() if isinstance(fill_value, float) else None


def _arange(func: Any) -> Rule:
    """``arange``: the length and dtype are those of the same call on the CPU (a few numbers)."""
    def rule(*args: Any, **kwargs: Any) -> Any:
        if torch.device(kwargs.get("device") or "cpu") != META or kwargs.get("layout") not in (None, torch.strided):
            return NotImplemented
        if not all(isinstance(a, Number) for a in args):
            return NotImplemented
        cpu = func(*args, **{**kwargs, "device": "cpu", "pin_memory": None})
        return _empty(cpu.shape, cpu.dtype)
    return rule


def _in_place(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``fill_``, ``zero_``, ``uniform_``, ``normal_``: a meta tensor holds no values to change."""
    value = args[0] if args else None
    if not _is_meta(self) or (isinstance(value, torch.Tensor) and value.dim() != 0):
        return NotImplemented
    return self


def _binary(true_divide: bool = False) -> Rule:
    """``add``, ``sub``, ``mul``, ``div`` (tensor or number ``other``): torch's type promotion."""
    def rule(self: torch.Tensor, other: Any, *, alpha: Any = None, rounding_mode: Any = None) -> Any:
        if not _is_meta(self) or self.layout != torch.strided or rounding_mode is not None:
            return NotImplemented
        if isinstance(other, torch.Tensor) and not (_is_meta(other) or _is_cpu_scalar(other)):
            return NotImplemented
        if not isinstance(other, (torch.Tensor, int, float, bool)) or not isinstance(alpha, (type(None), int, float)):
            return NotImplemented
        dtype = torch.result_type(self, other)
        if isinstance(alpha, float) and not dtype.is_floating_point:  # torch rejects it
            return NotImplemented
        if true_divide and not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.get_default_dtype()
        if dtype == torch.bool or dtype.is_complex:
            return NotImplemented
        out = _elementwise(dtype, self, other)
        return NotImplemented if out is None else out
    return rule


def _unary(self: torch.Tensor, *, approximate: str = "none") -> Any:
    """Activations and elementwise functions of a floating tensor: its dtype, its dimension order."""
    if not _plain(self):
        return NotImplemented
    return _elementwise(self.dtype, self)


def _convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                 output_padding: Sequence[int], groups: int) -> Any:
    """(N, C, *spatial) by (C_out, C/groups, *kernel), or transposed; the result is contiguous."""
    nd = weight.dim() - 2
    if not (_plain(input) and _plain(weight) and input.dtype == weight.dtype and input.dim() == weight.dim()
            and nd >= 1 and len(stride) == len(padding) == len(dilation) == nd and groups >= 1):
        return NotImplemented
    channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if bias is not None and not (_plain(bias) and bias.dtype == input.dtype and tuple(bias.shape) == (channels,)):
        return NotImplemented
    if any(s < 1 for s in stride) or any(p < 0 for p in padding) or any(d < 1 for d in dilation):
        return NotImplemented
    kernel = weight.shape[2:]
    if transposed:
        if (len(output_padding) != nd or input.shape[1] != weight.shape[0] or weight.shape[0] % groups
                or any(not 0 <= op < max(s, d) for op, s, d in zip(output_padding, stride, dilation))):
            return NotImplemented
        spatial = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, k, s, p, d, op in
                   zip(input.shape[2:], kernel, stride, padding, dilation, output_padding)]
    else:
        if input.shape[1] != weight.shape[1] * groups or weight.shape[0] % groups:
            return NotImplemented
        spatial = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, p, d in
                   zip(input.shape[2:], kernel, stride, padding, dilation)]
    if any(n < 1 for n in spatial) or input.shape[0] == 0:
        return NotImplemented
    return _empty((input.shape[0], channels, *spatial), input.dtype)


def _mm(self: torch.Tensor, mat2: torch.Tensor) -> Any:
    """(n, k) @ (k, m): contiguous (n, m)."""
    if not (_plain(self) and _plain(mat2) and self.dtype == mat2.dtype and self.dim() == mat2.dim() == 2
            and self.shape[1] == mat2.shape[0]):
        return NotImplemented
    return _empty((self.shape[0], mat2.shape[1]), self.dtype)


def _addmm(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> Any:
    """bias + mat1 @ mat2, the bias broadcast to the product's shape."""
    out = _mm(mat1, mat2)
    if out is NotImplemented or not (_plain(bias) and bias.dtype == mat1.dtype and bias.dim() <= 2
                                     and _broadcast(bias.shape, out.shape) == tuple(out.shape)):
        return NotImplemented
    return out


def _bmm(self: torch.Tensor, mat2: torch.Tensor) -> Any:
    """(b, n, k) @ (b, k, m): contiguous (b, n, m)."""
    if not (_plain(self) and _plain(mat2) and self.dtype == mat2.dtype and self.dim() == mat2.dim() == 3
            and self.shape[0] == mat2.shape[0] and self.shape[2] == mat2.shape[1]):
        return NotImplemented
    return _empty((self.shape[0], self.shape[1], mat2.shape[2]), self.dtype)


def _sdpa_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
              is_causal: bool = False, *, attn_mask: torch.Tensor | None = None, scale: float | None = None) -> Any:
    """The CPU's fused attention: the output as ``empty_like(query)``, the log-sum-exp (B, H, L)."""
    if not all(_plain(t) and t.dim() == 4 for t in (query, key, value)):
        return NotImplemented
    b, h, lq, _ = query.shape
    if key.shape[:2] != (b, h) or value.shape[:3] != key.shape[:3] or query.shape[3] != key.shape[3]:
        return NotImplemented
    logsumexp = _empty((b, lq, h), _computation_dtype(query.dtype)).transpose(1, 2)
    return _empty(query.shape, query.dtype, _permuted_strides(tuple(query.shape), [query])), logsumexp


def _layer_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                bias: torch.Tensor | None, eps: float) -> Any:
    """A contiguous result; the mean and 1/std keep the normalised dimensions as 1."""
    n = len(normalized_shape)
    if not (_plain(input) and 1 <= n <= input.dim()
            and tuple(input.shape[input.dim() - n:]) == tuple(normalized_shape)):
        return NotImplemented
    for t in (weight, bias):
        if t is not None and not (_plain(t) and tuple(t.shape) == tuple(normalized_shape)):
            return NotImplemented
    stats = (*input.shape[:input.dim() - n], *[1] * n)
    dtype = _computation_dtype(input.dtype)
    return _empty(input.shape, input.dtype), _empty(stats, dtype), _empty(stats, dtype)


def _batch_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                running_mean: torch.Tensor | None, running_var: torch.Tensor | None, *args: Any) -> Any:
    """A contiguous (N, C, ...) input (float32/64): the same layout, and (C,) saved statistics."""
    if not (_plain(input) and input.dtype in (torch.float32, torch.float64) and input.dim() >= 2
            and input.is_contiguous()):
        return NotImplemented
    channels = input.shape[1]
    for t in (weight, bias, running_mean, running_var):
        if t is not None and not (_plain(t) and tuple(t.shape) == (channels,)):
            return NotImplemented
    return _empty(input.shape, input.dtype), _empty((channels,), input.dtype), _empty((channels,), input.dtype)


def _softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    """A contiguous result of the input's shape and dtype."""
    if not _plain(self) or half_to_float or not -max(self.dim(), 1) <= dim < max(self.dim(), 1):
        return NotImplemented
    return _empty(self.shape, self.dtype)


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int] | None:
    v = list(v) if isinstance(v, Sequence) else [v]
    if not v and default is not None:
        v = list(default)
    return v * 2 if len(v) == 1 else (v if len(v) == 2 else None)


def _pool_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """``pooling_output_shape``: floor or ceil, and a last window that starts in the padding dropped."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _max_pool2d(self: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (),
                padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Any:
    """A contiguous (N, C, H, W) input: contiguous values and int64 indices."""
    k, p, d = _pair(kernel_size), _pair(padding), _pair(dilation)
    s = _pair(stride, default=k or ())
    if not (_plain(self) and self.dim() == 4 and self.is_contiguous() and k and s and p and d):
        return NotImplemented
    if any(v < 1 for v in (*k, *s, *d)) or any(pv < 0 or pv > kv // 2 for pv, kv in zip(p, k)):
        return NotImplemented
    h, w = (_pool_size(n, *a, ceil_mode) for n, a in zip(self.shape[2:], zip(k, s, p, d)))
    if h < 1 or w < 1:
        return NotImplemented
    shape = (*self.shape[:2], h, w)
    return _empty(shape, self.dtype), _empty(shape, torch.int64)


def _upsample_nearest2d(self: torch.Tensor, output_size: Sequence[int], scales_h: float | None = None,
                        scales_w: float | None = None) -> Any:
    """A contiguous (N, C, H, W) input to (N, C, *output_size)."""
    if not (_plain(self) and self.dim() == 4 and self.is_contiguous() and len(output_size) == 2
            and all(n >= 1 for n in output_size)):
        return NotImplemented
    return _empty((*self.shape[:2], *output_size), self.dtype)


def _unsafe_index(self: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> Any:
    """``self[..., i, j]`` with the leading dimensions kept (``None``) and the trailing ones indexed by
    integer tensors that broadcast together (nearest upsampling's decomposition): contiguous."""
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    index = list(indices[lead:])
    if not (_plain(self) and self.is_contiguous() and index and lead + len(index) == self.dim()
            and all(_is_meta(i) and i.dtype == torch.int64 for i in index)):
        return NotImplemented
    shape = _broadcast(*(i.shape for i in index))
    if shape is None:
        return NotImplemented
    return _empty((*self.shape[:lead], *shape), self.dtype)


def _channels_last_like(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether 4-D (5-D) strides suggest channels-last (channels-last-3d): c10's
    ``is_channels_last_strides_2d`` (``_3d``), strides rising in the order C, W, H, N (C, W, H, D, N),
    the ambiguous cases the standard order."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(len(shape))
    if order is None or strides[1] == 0:
        return False
    low = 0
    for d in order:
        if shape[d] == 0 or strides[d] < low or (d == 0 and low == strides[1]):
            return False
        low = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def _joined_layout(t: torch.Tensor, dim: int, new_dim: bool) -> tuple[Sequence[int], Sequence[int]]:
    """(shape, strides) of ``t`` as ``cat`` sees it: ``stack`` concatenates the inputs unsqueezed at ``dim``."""
    if not new_dim:
        return t.shape, t.stride()
    stride = t.stride(dim) * t.shape[dim] if dim < t.dim() else 1
    return (*t.shape[:dim], 1, *t.shape[dim:]), (*t.stride()[:dim], stride, *t.stride()[dim:])


def _join(tensors: Sequence[torch.Tensor], dim: int, new_dim: bool) -> Any:
    """``cat`` (``new_dim`` False) or ``stack`` of tensors of one dtype and rank: contiguous, which is
    torch's choice below 4 dimensions; from 4, when the inputs are contiguous and not also
    channels-last, or (4-D and 5-D results) when any input's strides do not suggest channels-last
    (a rotary embedding's halves and pairs: torch's ``cat_compute_output_memory_format``, ``stack``
    being ``cat`` of the inputs unsqueezed); otherwise torch may choose channels-last, and its kernel
    runs."""
    if not tensors or not all(_plain(t) for t in tensors):
        return NotImplemented
    first = tensors[0]
    if any(t.dtype != first.dtype or t.dim() != first.dim() for t in tensors) or first.dim() == 0:
        return NotImplemented
    ndim = first.dim() + (1 if new_dim else 0)
    standard = ndim in (4, 5) and -ndim <= dim < ndim and any(
        not _channels_last_like(*_joined_layout(t, dim % ndim, new_dim)) for t in tensors)
    if ndim >= 4 and not standard and not all(
            t.is_contiguous() and not t.is_contiguous(memory_format=torch.channels_last)
            and not t.is_contiguous(memory_format=torch.channels_last_3d) for t in tensors):
        return NotImplemented
    if not -ndim <= dim < ndim:
        return NotImplemented
    dim %= ndim
    if new_dim:
        if any(t.shape != first.shape for t in tensors):
            return NotImplemented
        return _empty((*first.shape[:dim], len(tensors), *first.shape[dim:]), first.dtype)
    if any(t.shape[:dim] != first.shape[:dim] or t.shape[dim + 1:] != first.shape[dim + 1:] for t in tensors):
        return NotImplemented
    return _empty((*first.shape[:dim], sum(t.shape[dim] for t in tensors), *first.shape[dim + 1:]), first.dtype)


_UNARY = ("gelu", "silu", "sigmoid", "tanh", "relu", "hardswish", "hardsigmoid", "exp", "sqrt", "rsqrt", "neg",
          "erf", "cos", "sin", "reciprocal")


def _scalar_pow(self: Any, exponent: torch.Tensor) -> Any:
    """A real number to the power of a floating tensor (rotary periods): the tensor's dtype and order."""
    if isinstance(self, bool) or not isinstance(self, (int, float)) or not _plain(exponent):
        return NotImplemented
    return _elementwise(exponent.dtype, exponent)


def _mean(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    """The mean over ``dim`` of a contiguous floating tensor (a global average pool): contiguous."""
    if not (_plain(self) and self.is_contiguous() and dtype is None and dim and self.dim() > 0):
        return NotImplemented
    dims = {d % self.dim() for d in dim}
    if len(dims) != len(dim) or not all(-self.dim() <= d < self.dim() for d in dim):
        return NotImplemented
    shape = [1 if i in dims else n for i, n in enumerate(self.shape) if keepdim or i not in dims]
    return _empty(shape, self.dtype)

RULES: dict[Any, Rule] = {
    aten.zeros.default: _factory(lambda: torch.get_default_dtype()),
    aten.ones.default: _factory(lambda: torch.get_default_dtype()),
    aten.full.default: _factory(_full_dtype),
    aten.arange.default: _arange(aten.arange.default),
    aten.arange.start: _arange(aten.arange.start),
    aten.arange.start_step: _arange(aten.arange.start_step),
    aten.fill_.Scalar: _in_place,
    aten.fill_.Tensor: _in_place,
    aten.zero_.default: _in_place,
    aten.uniform_.default: _in_place,
    aten.normal_.default: _in_place,
    aten.add.Tensor: _binary(),
    aten.add.Scalar: _binary(),
    aten.sub.Tensor: _binary(),
    aten.sub.Scalar: _binary(),
    aten.mul.Tensor: _binary(),
    aten.mul.Scalar: _binary(),
    aten.div.Tensor: _binary(true_divide=True),
    aten.div.Scalar: _binary(true_divide=True),
    **{getattr(aten, name).default: _unary for name in _UNARY},
    aten.convolution.default: _convolution,
    aten.mm.default: _mm,
    aten.addmm.default: _addmm,
    aten.bmm.default: _bmm,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_cpu,
    aten.native_layer_norm.default: _layer_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm,
    aten.native_batch_norm.default: _batch_norm,
    aten._softmax.default: _softmax,
    aten.max_pool2d_with_indices.default: _max_pool2d,
    aten.upsample_nearest2d.default: _upsample_nearest2d,
    aten._unsafe_index.Tensor: _unsafe_index,
    aten.pow.Scalar: _scalar_pow,
    aten.mean.dim: _mean,
    aten.cat.default: lambda tensors, dim=0: _join(tensors, dim, new_dim=False),
    aten.stack.default: lambda tensors, dim=0: _join(tensors, dim, new_dim=True),
}
"""The operations :class:`MetaShapes` answers, by op overload."""


class MetaShapes(TorchDispatchMode):
    """Answer the operations in :data:`RULES` on meta tensors from their shape formulas; every other
    operation, and every case a formula does not cover, runs as it would without the mode."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps each mode's __torch_dispatch__ in torch._disable_dynamo (so that torch.compile
        # does not trace into it), which imports torch._dynamo on the first operation: the cost this
        # mode exists to avoid. It never runs under torch.compile; this is TorchDispatchMode's opt-out.
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = self.answer(func, args, kwargs)
        return func(*args, **kwargs) if out is NotImplemented else out

    @staticmethod
    def answer(func: Any, args: tuple, kwargs: dict) -> Any:
        """``func(*args, **kwargs)`` from its rule, or NotImplemented where no rule covers the call."""
        rule = RULES.get(func)
        return NotImplemented if rule is None else rule(*args, **kwargs)


def meta_shapes() -> MetaShapes:
    """A :class:`MetaShapes` mode to enter with ``with`` around work on meta tensors."""
    return MetaShapes()


class _CountingMode(MetaShapes):
    """What ``torch.utils.flop_counter``'s own dispatch mode does (an operation without a formula is
    decomposed when it can be; every other one runs and its formula, if any, is applied to it), with
    each operation a rule covers answered by it first. Two of those have Python decompositions
    (``native_batch_norm``, ``upsample_nearest2d``) that torch's counter would run; they hold only
    operations without FLOP formulas, so answering them whole counts the same (the tests compare
    the two counters)."""

    def __init__(self, counter: FlopCounterMode) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return NotImplemented
        out = self.answer(func, args, kwargs)
        if out is NotImplemented:
            if func not in self.counter.flop_registry and func is not torch.ops.prim.device.default:
                with self:
                    decomposed = func.decompose(*args, **kwargs)
                    if decomposed is not NotImplemented:
                        return decomposed
            out = func(*args, **kwargs)
        return self.counter._count_flops(func._overloadpacket, out, args, kwargs)


@contextlib.contextmanager
def count_on_meta(counter: FlopCounterMode) -> Iterator[FlopCounterMode]:
    """Count with ``counter`` (a ``FlopCounterMode``: its formulas, custom mapping and module
    attribution) through :class:`MetaShapes` instead of the counter's own dispatch mode, whose
    ``__torch_dispatch__`` torch wraps in ``torch._disable_dynamo`` (importing ``torch._dynamo`` on the
    first operation counted). What ``FlopCounterMode.__enter__``/``__exit__`` do, with our mode in
    place of theirs; read the counts from ``counter`` afterwards.

    ``with count_on_meta(flop_counter()) as counter: model(x_on_meta)``
    """
    counter.flop_counts.clear()
    counter.mod_tracker.__enter__()
    try:
        with _CountingMode(counter):
            yield counter
    finally:
        counter.mod_tracker.__exit__()
