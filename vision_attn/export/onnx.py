"""ONNX export of a network, written atomically, and its check in onnxruntime against PyTorch.

Exporters: ``"dynamo"`` (torch.export, the default: not deprecated, about half the nodes of the
TorchScript graph, no external weight file for models under 2 GB; it needs ``onnxscript``) and
``"torchscript"`` (the legacy tracer, deprecated since torch 2.9 but 5-7x faster to export).
The CPU fast paths of :mod:`vision_attn.kernels` are off during export, so the graph holds
standard ONNX operators only (MatMul/Gemm, LayerNormalization, Softmax, ...).

The file is written to a temporary name beside the target and renamed when complete and readable, so a
failed export leaves nothing behind. An opset the model cannot be written in is an error naming the
operator and the opset it needs (the dynamo exporter otherwise silently keeps opset 18).
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.io.atomic import output_folder, write_onnx

__all__ = ["OnnxExport", "export_onnx", "onnx_session", "run_onnx", "graph_ops", "DEFAULT_OPSET"]

DEFAULT_OPSET = 18
Exporter = Literal["dynamo", "torchscript"]
# operators our graphs use that ONNX added late, with the first opset that defines them
_LATE_OPS = {"LayerNormalization": 17, "Gelu": 20, "GroupNormalization": 18}


@dataclass
class OnnxExport:
    """What was written: the file, its opset and exporter, export seconds, node count and operator types."""

    path: Path
    opset: int
    exporter: str
    seconds: float
    nodes: int
    ops: list[str]
    input_name: str
    output_names: list[str]
    dynamic_batch: bool


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[io.StringIO]:
    """Silence the exporters' warnings and log chatter (deprecation, constant folding, opset
    conversion); the text is kept for an error message."""
    buf = io.StringIO()
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "torch.export", "torch._export",
                                              "torch.fx.experimental.symbolic_shapes")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    sink = tempfile.TemporaryFile()
    # the TorchScript exporter logs its whole graph from C++ on any failure (torch 2.14 turns its ONNX
    # log on by mistake): catch the process's own stdout/stderr, not only Python's
    os.dup2(sink.fileno(), 1)
    os.dup2(sink.fileno(), 2)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            yield buf
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        sink.close()
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def graph_ops(path: str | os.PathLike) -> tuple[int, list[str], int, list[str], list[str]]:
    """(opset of the default domain, sorted operator types, node count, input names, output names)."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    ops = sorted({f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                  for n in proto.graph.node})
    inputs = [i.name for i in proto.graph.input]
    return opset, ops, len(proto.graph.node), inputs, [o.name for o in proto.graph.output]


def _opset_error(opset: int, detail: str, ops: Sequence[str] = ()) -> ConfigError:
    late = sorted(((op, v) for op, v in _LATE_OPS.items() if op in ops and v > opset), key=lambda t: -t[1])
    if late:
        need = f"the graph uses {late[0][0]}, which ONNX defines from opset {late[0][1]}; use --opset {late[0][1]} or higher"
    else:
        need = detail
    return ConfigError(f"--opset {opset}: this model cannot be written in opset {opset}: {need}")


def _export(model: nn.Module, example: torch.Tensor, tmp: str, opset: int, exporter: Exporter,
            dynamic_batch: bool, input_name: str, output_names: list[str]) -> None:
    if exporter == "dynamo":
        shapes = ({0: torch.export.Dim("batch", min=1, max=4096)},) if dynamic_batch else None
        torch.onnx.export(model, (example,), tmp, dynamo=True, external_data=False, opset_version=opset,
                          input_names=[input_name], output_names=output_names, dynamic_shapes=shapes,
                          verbose=False)
    elif exporter == "torchscript":
        axes = {n: {0: "batch"} for n in [input_name, *output_names]} if dynamic_batch else None
        torch.onnx.export(model, (example,), tmp, dynamo=False, opset_version=opset, input_names=[input_name],
                          output_names=output_names, dynamic_axes=axes, verbose=False)
    else:
        raise ConfigError(f"exporter {exporter!r}: choose 'dynamo' or 'torchscript'")


def export_onnx(model: nn.Module, path: str | os.PathLike, input_size: tuple[int, int], *,
                dynamic_batch: bool = False, opset: int = DEFAULT_OPSET, exporter: Exporter = "dynamo",
                input_name: str = "images", output_names: Sequence[str] = ("output",),
                in_chans: int = 3) -> OnnxExport:
    """Export ``model`` (eval mode, CPU) for (B, in_chans, H, W) inputs to ``path``.

    ``dynamic_batch``: the batch dimension is symbolic (any B), otherwise fixed at 1. The weights are
    inside the one file. Raises :class:`ConfigError` for a missing folder, an opset that is too old or
    an exporter failure; nothing is left at ``path`` (or beside it) then."""
    path = Path(path)
    output_folder(path)
    import onnx

    if not 7 <= opset <= onnx.defs.onnx_opset_version():
        raise ConfigError(f"--opset {opset}: give an ONNX opset between 7 and {onnx.defs.onnx_opset_version()} "
                          f"(attention needs 14 or more, LayerNormalization 17; default {DEFAULT_OPSET})")
    model = model.eval()
    example = torch.randn(2 if dynamic_batch else 1, in_chans, *input_size)
    start = time.perf_counter()
    found: dict[str, Any] = {}

    def write(tmp: str) -> None:
        with _quiet_exporters() as log, torch.no_grad():
            try:
                _export(model, example, tmp, opset, exporter, dynamic_batch, input_name, list(output_names))
            except torch.onnx.errors.UnsupportedOperatorError as e:
                m = re.search(r"operator '([^']+)'.*?added in version (\d+)", str(e), re.S)
                never = re.search(r"operator '([^']+)' to ONNX opset version \d+ is not supported", str(e))
                if m is None and never and exporter == "torchscript":  # no opset helps: e.g. antialiased resizing
                    raise ConfigError(f"ONNX export (torchscript) of {type(model).__name__} at {input_size[0]}x"
                                      f"{input_size[1]}: the TorchScript exporter cannot write the operator '{never.group(1)}' at "
                                      "any opset; use --exporter dynamo (the default), which writes it") from None
                detail = (f"the graph uses {m.group(1)}, which this exporter writes from opset {m.group(2)}; use "
                          f"--opset {m.group(2)} or higher" if m else str(e).splitlines()[0])
                raise _opset_error(opset, detail) from None
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - exporters raise many types; report one line
                text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # torch.export colours its messages
                detail = text.splitlines()[0] if text else type(e).__name__
                if "opset" in detail.lower():
                    raise _opset_error(opset, detail) from None
                raise ConfigError(f"ONNX export ({exporter}) of {type(model).__name__} at "
                                  f"{input_size[0]}x{input_size[1]} failed: {type(e).__name__}: {detail[:300]}"
                                  f"{'; try --exporter torchscript' if exporter == 'dynamo' else ''}") from None
            del log
        written, ops, nodes, inputs, outputs = graph_ops(tmp)
        if not inputs:
            raise ConfigError(f"ONNX export ({exporter}) of {type(model).__name__} failed: the graph has no input "
                              "(the forward pass leaves torch, e.g. through .numpy() or .item(), so the tracer "
                              "recorded constants); keep the computation in torch operations")
        if written != opset:
            raise _opset_error(opset, f"the exporter wrote opset {written} instead", ops)
        found.update(written=written, ops=ops, nodes=nodes, inputs=inputs, outputs=outputs)

    write_onnx(path, write)
    return OnnxExport(path, found["written"], exporter, time.perf_counter() - start, found["nodes"], found["ops"],
                      found["inputs"][0], found["outputs"], dynamic_batch)


def onnx_session(path: str | os.PathLike, threads: int | None = None):
    """An onnxruntime CPU session for ``path`` (``threads``: intra-op threads, default torch's)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.log_severity_level = 3  # errors only
    # no busy-waiting of idle pool threads after a call: they would take the cores from whatever runs next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnx(session, x: torch.Tensor) -> list[torch.Tensor]:
    """The session's outputs for a float32 input tensor, as tensors."""
    feed = {session.get_inputs()[0].name: x.detach().to(torch.float32).contiguous().numpy()}
    return [torch.from_numpy(o) for o in session.run(None, feed)]
