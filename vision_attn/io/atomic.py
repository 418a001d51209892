"""Atomic writes: every file vision_attn writes goes to a temporary file in the target's own folder,
which is then renamed over the target with ``os.replace`` (one step on the same file system).

A reader sees the old file or the new one, never half of one; a failure (or a kill) leaves the old
file and no temporary file. The finished file gets the mode an ordinary ``open(path, "w")`` would
give it (``0o666`` less the umask; ``mkstemp`` makes private files). :func:`atomic_write` is the one
place this happens; the other functions say what is written. A write that fails (a full disk, a
folder removed or read-only) is a :class:`~vision_attn.errors.WriteError` naming the file and the free
space (:func:`write_failure`), the previous file kept.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from vision_attn.errors import CheckpointError, ConfigError, VisionAttnError, WriteError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["atomic_write", "PendingFile", "output_folder", "write_failure", "free_space", "format_bytes", "write_bytes", "write_text", "write_json", "write_yaml", "save_torch", "save_figure",
           "write_onnx", "atomic_folder"]

PathLike = str | os.PathLike


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def free_space(path: PathLike) -> tuple[Path, int]:
    """The nearest existing folder at or above ``path`` and the bytes free on its file system."""
    folder = Path(os.path.abspath(path))
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder, shutil.disk_usage(folder).free


def write_failure(path: PathLike, e: BaseException) -> str:
    """What a failed write of ``path`` says: the file, why, and the free space where it was written."""
    folder, free = free_space(Path(path).parent)
    if isinstance(e, OSError) and e.strerror:
        reason = e.strerror
        if e.filename and os.fspath(e.filename) != os.fspath(path) \
                and not os.path.basename(os.fspath(e.filename)).startswith(f".{Path(path).name}."):
            reason += f": {e.filename}"
    else:  # torch.save's C++ writer says only that its position is not where it should be
        reason = "No space left on device" if free < 2**20 else f"the writer stopped: {str(e).splitlines()[0]}"
    return f"{path}: writing failed ({reason}); {format_bytes(free)} free on the file system of {folder}"


def _is_write_failure(e: BaseException) -> bool:
    """An OSError, or torch.save's C++ writer failing (a RuntimeError from its zip container)."""
    text = str(e)
    return isinstance(e, OSError) or (isinstance(e, RuntimeError) and (
        "inline_container" in text or "PytorchStreamWriter" in text))


def output_folder(path: PathLike, *, label: str | None = None,
                  error: type[VisionAttnError] = ConfigError) -> Path:
    """The folder ``path`` is to be written in, which must exist: else ``error`` naming ``label``
    (default ``-o PATH``, the option that gave it) and the folder."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        label = f"-o {path}" if label is None else label
        raise error(f"{label}: the folder {folder} does not exist; create it first (nothing was written)")
    return folder


class PendingFile:
    """A temporary file beside ``path`` for a writer that writes over time (a video, a JSON Lines file):
    write to ``tmp``, then :meth:`commit` renames it to ``path`` or :meth:`abort` removes it (and the
    ``sidecars``). ``suffix``, ``mkdir``, ``error``: as in :func:`atomic_write`."""

    def __init__(self, path: PathLike, *, suffix: str = ".tmp", mkdir: bool = False,
                 error: type[VisionAttnError] = ConfigError, sidecars: Sequence[str] = ()) -> None:
        self.path = Path(path)
        folder = self.path.parent
        try:
            if mkdir:
                folder.mkdir(parents=True, exist_ok=True)
            else:
                output_folder(self.path, label=str(self.path), error=error)
            fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.", suffix=suffix)
        except OSError as e:
            raise WriteError(f"{write_failure(self.path, e)}; nothing was written") from None
        os.close(fd)
        self.sidecars = tuple(sidecars)
        self.kept = f"; {self.path.name} is as it was" if self.path.exists() else ""

    def failure(self, e: BaseException) -> BaseException:
        """What a failure while writing or committing raises: ``e`` itself unless it is a write failure,
        which becomes a WriteError naming the file and the free space."""
        if isinstance(e, VisionAttnError) or not _is_write_failure(e):
            return e
        return WriteError(f"{write_failure(self.path, e)}{self.kept}, no temporary file left")

    def commit(self) -> Path:
        """Give the file an ordinary file's mode and rename it over ``path``."""
        try:
            os.chmod(self.tmp, 0o666 & ~_umask())
            os.replace(self.tmp, self.path)
        except OSError as e:
            self.abort()
            raise self.failure(e) from None
        self.abort()  # the sidecars
        return self.path

    def abort(self) -> None:
        """Remove the temporary file and its sidecars (what is left of them)."""
        for leftover in (self.tmp, *(self.tmp + s for s in self.sidecars)):
            try:
                Path(leftover).unlink(missing_ok=True)
            except OSError:  # the folder itself is gone
                pass


def atomic_write(path: PathLike, write: Callable[[str], None], *, suffix: str = ".tmp", mkdir: bool = False,
                 error: type[VisionAttnError] = ConfigError, sidecars: Sequence[str] = ()) -> Path:
    """Call ``write(tmp)`` with a fresh temporary file beside ``path``, then rename it to ``path``.

    ``mkdir``: create the folder when missing (otherwise ``error`` names the missing folder and nothing
    is written); ``suffix``: the temporary file's ending (some writers choose the format by it);
    ``sidecars``: endings of extra files a writer may leave beside the temporary one (removed). A
    failing write is a WriteError (:func:`write_failure`); ``path`` is then as it was."""
    pending = PendingFile(path, suffix=suffix, mkdir=mkdir, error=error, sidecars=sidecars)
    try:
        write(pending.tmp)
    except (OSError, RuntimeError) as e:
        pending.abort()
        failure = pending.failure(e)
        if failure is e:
            raise
        raise failure from None
    except BaseException:
        pending.abort()
        raise
    return pending.commit()


def atomic_folder(path: PathLike, write: Callable[[Path], None], *,
                  error: type[VisionAttnError] = ConfigError) -> Path:
    """Call ``write(tmp)`` with a fresh empty folder beside ``path``, then put it in ``path``'s place
    (a folder of files that belong together, such as a transformers folder's config and weights: a
    reader never sees the new config beside the old weights). A previous ``path`` folder is replaced
    only once the new one is complete; a failure leaves it as it was and no temporary folder."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise error(f"-o {path}: is a file; give a folder to write (nothing was written)")
    output_folder(path, error=error)
    try:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    except OSError as e:
        raise WriteError(f"{write_failure(path, e)}; nothing was written") from None
    old = path.parent / f"{tmp.name}.old"
    try:
        write(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException as e:
        if old.exists() and not path.exists():
            os.replace(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and _is_write_failure(e):
            raise WriteError(f"{write_failure(path, e)}; {path.name} is as it was, no temporary folder left") from None
        raise
    shutil.rmtree(old, ignore_errors=True)
    return path


def write_bytes(path: PathLike, data: bytes, *, mkdir: bool = False) -> Path:
    """``data`` to ``path``, atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data), mkdir=mkdir)


def write_text(path: PathLike, text: str, *, mkdir: bool = False) -> Path:
    """``text`` to ``path`` as UTF-8, atomically; line endings are written as given."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)

    return atomic_write(path, write, mkdir=mkdir)


def write_json(path: PathLike, obj: Any, *, mkdir: bool = False) -> Path:
    """``obj`` as indented JSON (and a final newline), atomically."""
    return write_text(path, json.dumps(obj, indent=2) + "\n", mkdir=mkdir)


def write_yaml(path: PathLike, obj: Any, *, mkdir: bool = False) -> Path:
    """``obj`` as block-style YAML in its own key order, atomically."""
    import yaml

    return write_text(path, yaml.safe_dump(obj, sort_keys=False, default_flow_style=False), mkdir=mkdir)


def save_torch(obj: Any, path: PathLike, *, mkdir: bool = False) -> Path:
    """``torch.save(obj)`` to ``path`` atomically; a ``.safetensors`` path gets a safetensors file of the
    (tensor) mapping ``obj``. A missing folder is a :class:`CheckpointError`."""
    import torch

    def write(tmp: str) -> None:
        if Path(path).suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in obj.items()}, tmp)
        else:
            torch.save(obj, tmp)

    return atomic_write(path, write, mkdir=mkdir, error=CheckpointError)


def save_figure(fig: "Figure", path: PathLike, dpi: int = 110) -> Path:
    """Render the matplotlib ``fig`` with Agg to ``path`` as PNG, atomically; the folder must exist."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png"),
                        suffix=".tmp.png")


def write_onnx(path: PathLike, write: Callable[[str], None]) -> Path:
    """An ONNX file written by ``write(tmp)`` (an exporter or quantizer that takes a file name),
    atomically; a ``.data`` file the writer leaves beside the temporary one is removed."""
    return atomic_write(path, write, suffix=".tmp.onnx", sidecars=(".data",))
