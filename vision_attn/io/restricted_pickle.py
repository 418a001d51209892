"""Reading a torch zip checkpoint (``torch.save`` since torch 1.6) without importing or calling
anything its pickle names.

``torch.load(weights_only=True)`` refuses a pickle at the first class it does not know, and a plain
``torch.load`` imports and calls whatever the pickle names. :class:`RestrictedUnpickler` resolves
every global the pickle names against a fixed table instead:

- allowed: tensors, parameters and storages, rebuilt lazily (a :class:`LazyTensor`: its bytes are
  read from its storage record, into memory of its own, only when :func:`materialise` is called, so
  the tensors nobody asks for are never read and a large file is never held in memory beside the
  tensors made from it); plain data, rebuilt as itself (dict, list, tuple, set, frozenset,
  OrderedDict, numbers, strings, bytes, bytearray, slices, dates and times, pure paths, numpy scalars
  and dtypes, torch dtypes, sizes and devices);
- kept as inert records: any ``torch.nn`` module class, ``argparse.Namespace``,
  ``types.SimpleNamespace`` and the classes a reader adds (:class:`RecordClasses`) become an
  :class:`ObjectRecord` holding the pickled attributes (a module's parameters, buffers and children
  among them); nothing of the class is imported or run;
- refused: every other global (``os.system``, ``builtins.exec``, ``subprocess.Popen``,
  ``torch.load``, ``functools.partial``, ...) raises a :class:`CheckpointRefused` (a
  :class:`~vision_attn.errors.CheckpointError`) naming it and the file, before anything is called; so
  do a tensor subclass, backward hooks, a tensor running past its storage, a storage record shorter
  than the pickle says, an unknown persistent reference, a damaged pickle, and a file that is not in
  torch's zip format (legacy checkpoints are not read).

Nothing returned to the pickle machinery is a real class or function of Python, numpy or torch: the
callables are wrappers whose state cannot be set, so a ``BUILD`` opcode cannot reach them either.
:func:`load_restricted` returns the object with every tensor read; :func:`open_restricted` leaves
them lazy while the file is open. Readers of particular checkpoint formats build on it with
their own :class:`RecordClasses`.
"""
from __future__ import annotations

import collections
import datetime
import io
import pathlib
import pickle
import struct
import sys
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING

import numpy as np
import torch
from torch import nn

from vision_attn.errors import CheckpointError

__all__ = ["CheckpointRefused", "LazyTensor", "NAMESPACES", "ObjectRecord", "RecordClasses", "RestrictedUnpickler",
           "load_restricted", "materialise", "open_archive", "open_restricted"]

_STORAGE_DTYPES = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool, "UntypedStorage": torch.uint8,
}
NAMESPACES = frozenset({"argparse.Namespace", "types.SimpleNamespace"})
"""The namespace classes whose pickled objects are records in every reader (plain attribute bags)."""


class CheckpointRefused(CheckpointError):
    """The pickle names a global that is neither plain data nor a class the reader keeps as a record."""


@dataclass(frozen=True)
class RecordClasses:
    """The classes whose pickled objects become inert :class:`ObjectRecord` s, besides ``torch.nn``'s
    module classes (always records): the dotted ``names`` (default :data:`NAMESPACES`), every class of
    the exact ``modules`` and of the modules whose name starts with one of ``prefixes``. ``described``
    names them in a refusal ("... nor a module class of {described}")."""

    names: frozenset[str] = NAMESPACES
    modules: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    described: str = "torch.nn"

    def __call__(self, module: str, name: str) -> bool:
        """Whether the global ``module.name`` is one of these classes (looked up by name, never imported)."""
        return (f"{module}.{name}" in self.names or module in self.modules or module.startswith(self.prefixes)
                or _torch_nn_module_class(module, name))


@dataclass(frozen=True, slots=True)
class _StorageType:
    """What a pickled ``torch.HalfStorage`` (etc.) stands for: the element type of a storage record."""

    dtype: torch.dtype


class _Storage:
    """One storage record of the file, not read yet: its key, element type and element count."""

    __slots__ = ("file", "key", "dtype", "numel")

    def __init__(self, file: _StorageFile, key: str, dtype: torch.dtype, numel: int) -> None:
        self.file, self.key, self.dtype, self.numel = file, key, dtype, numel

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle sets the state of a storage")


class LazyTensor:
    """A tensor of the file, read only when :meth:`materialise` is called: the bytes of its storage
    record are read into memory of its own (no mapping of the whole file, nothing read twice), so the
    tensors nobody asks for (the optimizer state, the model that is not chosen) are never read."""

    __slots__ = ("storage", "offset", "size", "stride")

    def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle sets the state of a tensor")

    @property
    def dtype(self) -> torch.dtype:
        return self.storage.dtype

    def materialise(self, float32: bool = False) -> torch.Tensor:
        """The tensor (``float32``: floating tensors converted to float32, by numpy, not torch's threads)."""
        raw = self.storage.file.read(self.storage)
        t = raw.view(self.dtype).as_strided(self.size, self.stride, self.offset)
        if float32 and t.is_floating_point() and t.dtype != torch.float32:
            if t.dtype in (torch.float16, torch.float64):
                return torch.from_numpy(t.numpy().astype(np.float32))
            return t.float()
        if t.numel() != self.storage.numel:
            t = t.clone()  # a view on part of a storage: do not keep the rest alive
        return t

    def __repr__(self) -> str:
        return f"LazyTensor({self.dtype}, {tuple(self.size)})"


class _Callable:
    """An allowed callable as the pickle sees it: calls ``fn``; its state cannot be set by BUILD."""

    __slots__ = ("_fn", "_name")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_name", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets the state of the callable {self._name}")

    def __setattr__(self, key: str, value: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets attribute {key!r} of the callable {self._name}")

    def __repr__(self) -> str:
        return f"<allowed {self._name}>"


class ObjectRecord:
    """An inert stand-in for a pickled object of an allowed class (a module class of ``torch.nn`` or of
    the reader's :class:`RecordClasses`, a namespace): the class's dotted name, the constructor arguments the pickle gave
    (usually none) and the attributes it restored. Nothing of the original class is imported or run."""

    global_name: str = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> ObjectRecord:
        obj = object.__new__(cls)
        obj.__dict__.update(args=args, kwargs=kwargs, state={})
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Arguments are kept by ``__new__``; nothing else happens."""

    def __setstate__(self, state: Any) -> None:
        slots: Any = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        for part in (state, slots):
            if part is None:
                continue
            if not isinstance(part, dict) or not all(isinstance(k, str) for k in part):
                raise pickle.UnpicklingError(f"{self.global_name}: the pickled state is {type(part).__name__}, "
                                             "not a mapping of attribute names")
            self.state.update(part)

    @property
    def is_module(self) -> bool:
        """Whether the pickled object was an ``nn.Module`` (it has parameters, buffers and children)."""
        return isinstance(self.state.get("_modules"), dict) and isinstance(self.state.get("_parameters"), dict)

    @property
    def children(self) -> dict[str, ObjectRecord | None]:
        return dict(self.state.get("_modules") or {})

    @property
    def attributes(self) -> dict[str, Any]:
        """Public attributes (``yaml``, ``names``, ``stride``, ...), without the module machinery."""
        return {k: v for k, v in self.state.items() if not k.startswith("_") and k != "training"}

    def __repr__(self) -> str:
        return f"ObjectRecord({self.global_name})"


_record_classes: dict[str, type[ObjectRecord]] = {}


def _record_class(dotted: str) -> type[ObjectRecord]:
    if dotted not in _record_classes:
        name = dotted.rsplit(".", 1)[-1]
        _record_classes[dotted] = type(name, (ObjectRecord,), {"global_name": dotted, "__module__": __name__})
    return _record_classes[dotted]


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple, stride: tuple,
                    requires_grad: bool = False, hooks: Any = None, metadata: Any = None) -> LazyTensor:
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError(f"a tensor is rebuilt from {type(storage).__name__}, not a storage record")
    if hooks:
        raise pickle.UnpicklingError("a tensor carries backward hooks")
    ints = (offset, *size, *stride) if isinstance(size, tuple) and isinstance(stride, tuple) else (None,)
    if len(size) != len(stride) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        raise pickle.UnpicklingError("a tensor with a malformed offset, size or stride")
    last = offset + sum((n - 1) * st for n, st in zip(size, stride)) if all(size) else -1
    if last >= storage.numel:
        raise pickle.UnpicklingError(f"a tensor of size {tuple(size)} runs past its storage of {storage.numel} elements")
    return LazyTensor(storage, offset, torch.Size(size), tuple(stride))


def _rebuild_parameter(data: LazyTensor, requires_grad: bool, hooks: Any, state: Any = None) -> LazyTensor:
    if not isinstance(data, LazyTensor) or hooks:
        raise pickle.UnpicklingError("a parameter is rebuilt from something other than a plain tensor")
    return data  # a record keeps tensors; whether it was a Parameter does not matter to a state dict


def _rebuild_from_type(func: Any, new_type: Any, args: tuple, state: Any) -> LazyTensor:
    if func not in (_ALLOWED["torch._utils._rebuild_tensor_v2"], _ALLOWED["torch._utils._rebuild_parameter"]):
        raise pickle.UnpicklingError("a tensor subclass is rebuilt by a function other than torch's tensor rebuild")
    if new_type is not _TENSOR_TYPE:
        raise pickle.UnpicklingError("a tensor of a subclass other than torch.Tensor")
    return func(*args)


def _encode(text: str, encoding: str = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise pickle.UnpicklingError("_codecs.encode with other than (text, 'latin1')")
    return text.encode(encoding)


def _numpy_dtype(spec: Any, align: Any = False, copy: Any = True) -> _NumpyDtype:
    dtype = np.dtype(spec) if isinstance(spec, str) else None
    if dtype is None or dtype.hasobject:
        raise pickle.UnpicklingError(f"numpy dtype {spec!r} is not a plain numeric dtype")
    return _NumpyDtype(dtype)


class _NumpyDtype:
    """A numpy dtype as the pickle rebuilds it (``numpy.dtype(spec)`` then BUILD with its byte order)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
            self.dtype = self.dtype.newbyteorder(state[1]) if state[1] in "<>" else self.dtype


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    if not isinstance(dtype, _NumpyDtype) or not isinstance(data, bytes):
        raise pickle.UnpicklingError("numpy scalar without a plain dtype and bytes")
    if len(data) != dtype.dtype.itemsize:
        raise pickle.UnpicklingError("numpy scalar of the wrong size")
    return np.frombuffer(data, dtype=dtype.dtype)[0].item()


def _pure_path(flavour: type[pathlib.PurePath]) -> Callable[..., pathlib.PurePath]:
    def make(*parts: Any) -> pathlib.PurePath:
        if not all(isinstance(p, str) for p in parts):
            raise pickle.UnpicklingError("a path made of other than strings")
        return flavour(*parts)
    return make


def _plain_type(kind: type, checks: tuple[type, ...]) -> Callable[..., Any]:
    """``kind(*args)`` where every argument is one of ``checks`` (or a list/tuple of them for sets)."""
    def make(*args: Any) -> Any:
        for a in args:
            items = a if isinstance(a, (list, tuple)) else [a]
            if not all(isinstance(i, checks) for i in items):
                raise pickle.UnpicklingError(f"{kind.__name__} built from {type(a).__name__}")
        return kind(*args)
    return make


_TENSOR_TYPE = _Callable("torch.Tensor", torch.Tensor)
_SIMPLE = (str, bytes, int, float, bool, type(None), tuple, datetime.tzinfo, datetime.timedelta)
_ALLOWED: dict[str, Any] = {
    "torch._utils._rebuild_tensor_v2": _Callable("torch._utils._rebuild_tensor_v2", _rebuild_tensor),
    "torch._utils._rebuild_parameter": _Callable("torch._utils._rebuild_parameter", _rebuild_parameter),
    "torch._utils._rebuild_parameter_with_state": _Callable("torch._utils._rebuild_parameter_with_state",
                                                            _rebuild_parameter),
    "torch.Tensor": _TENSOR_TYPE,
    "torch._tensor.Tensor": _TENSOR_TYPE,
    "torch.Size": _Callable("torch.Size", _plain_type(torch.Size, (int,))),
    "torch.device": _Callable("torch.device", _plain_type(torch.device, (str, int))),
    "collections.OrderedDict": _Callable("collections.OrderedDict", collections.OrderedDict),
    "builtins.set": _Callable("builtins.set", _plain_type(set, _SIMPLE)),
    "builtins.frozenset": _Callable("builtins.frozenset", _plain_type(frozenset, _SIMPLE)),
    "builtins.bytearray": _Callable("builtins.bytearray", _plain_type(bytearray, (bytes, str, int))),
    "builtins.complex": _Callable("builtins.complex", _plain_type(complex, (int, float))),
    "builtins.slice": _Callable("builtins.slice", _plain_type(slice, (int, type(None)))),
    "_codecs.encode": _Callable("_codecs.encode", _encode),
    "datetime.datetime": _Callable("datetime.datetime", _plain_type(datetime.datetime, _SIMPLE)),
    "datetime.date": _Callable("datetime.date", _plain_type(datetime.date, _SIMPLE)),
    "datetime.time": _Callable("datetime.time", _plain_type(datetime.time, _SIMPLE)),
    "datetime.timedelta": _Callable("datetime.timedelta", _plain_type(datetime.timedelta, (int, float))),
    "datetime.timezone": _Callable("datetime.timezone", _plain_type(datetime.timezone, (datetime.timedelta, str))),
    "numpy.dtype": _Callable("numpy.dtype", _numpy_dtype),
    "numpy.core.multiarray.scalar": _Callable("numpy.core.multiarray.scalar", _numpy_scalar),
    "numpy._core.multiarray.scalar": _Callable("numpy._core.multiarray.scalar", _numpy_scalar),
}
_ALLOWED["torch._tensor._rebuild_from_type_v2"] = _Callable("torch._tensor._rebuild_from_type_v2", _rebuild_from_type)
for _module in ("pathlib", "pathlib._local"):
    for _cls, _flavour in (("Path", pathlib.PurePosixPath), ("PosixPath", pathlib.PurePosixPath),
                           ("PurePath", pathlib.PurePosixPath), ("PurePosixPath", pathlib.PurePosixPath),
                           ("WindowsPath", pathlib.PureWindowsPath), ("PureWindowsPath", pathlib.PureWindowsPath)):
        _ALLOWED[f"{_module}.{_cls}"] = _Callable(f"{_module}.{_cls}", _pure_path(_flavour))


def _torch_nn_module_class(module: str, name: str) -> bool:
    """Whether ``module.name`` is an ``nn.Module`` class of torch.nn (looked up, never imported)."""
    if not (module == "torch.nn" or module.startswith("torch.nn.modules.")):
        return False
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and issubclass(cls, nn.Module)


class _StorageFile:
    """The storage records of a torch zip file, read one at a time from an open file when asked for."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, prefix: str) -> None:
        self.path = path
        self.archive = archive
        self.prefix = prefix
        self.handle: io.BufferedReader | None = None
        self._storages: dict[str, _Storage] = {}
        names = set(archive.namelist())
        order = archive.read(f"{prefix}byteorder") if f"{prefix}byteorder" in names else b"little"
        if order not in (b"little", b"big"):
            raise CheckpointError(f"{path}: unknown byte order {order[:16]!r} in the checkpoint")
        self.swap = order.decode() != sys.byteorder

    def __enter__(self) -> _StorageFile:
        self.handle = self.path.open("rb")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def storage(self, key: Any, dtype: torch.dtype, numel: Any) -> _Storage:
        if not isinstance(key, str) or not key.isalnum() or not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError(f"a storage reference {key!r} that names no storage record")
        if key in self._storages:
            return self._storages[key]
        name = f"{self.prefix}data/{key}"
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise pickle.UnpicklingError(f"the storage record {name} is missing") from None
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if nbytes > info.file_size:
            raise pickle.UnpicklingError(f"the storage record {name} holds {info.file_size} bytes, "
                                         f"the pickle asks for {nbytes}")
        self._storages[key] = _Storage(self, key, dtype, numel)
        return self._storages[key]

    def read(self, storage: _Storage) -> torch.Tensor:
        """The bytes of ``storage``'s record, in a uint8 tensor of their own."""
        if self.handle is None:
            raise CheckpointError(f"{self.path}: a tensor is read after the file was closed")
        info = self.archive.getinfo(f"{self.prefix}data/{storage.key}")
        nbytes = storage.numel * torch.empty((), dtype=storage.dtype).element_size()
        buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8)[:nbytes]
        if info.compress_type == zipfile.ZIP_STORED:
            self.handle.seek(info.header_offset)
            header = self.handle.read(30)
            if len(header) < 30 or header[:4] != b"PK\x03\x04":
                raise CheckpointError(f"{self.path}: the zip entry {info.filename} is damaged; save the file again")
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            self.handle.seek(info.header_offset + 30 + name_len + extra_len)
            if self.handle.readinto(memoryview(buffer.numpy())) != nbytes:
                raise CheckpointError(f"{self.path}: the file ends inside {info.filename}; it is truncated")
        else:  # re-zipped with compression
            buffer.copy_(torch.frombuffer(bytearray(self.archive.read(info.filename)[:nbytes]), dtype=torch.uint8))
        if self.swap and storage.dtype.itemsize > 1:
            buffer = torch.from_numpy(buffer.numpy().view(f">u{storage.dtype.itemsize}").byteswap()
                                      .view(np.uint8).copy())
        return buffer


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles torch's ``data.pkl`` with the globals of the module docstring and nothing else; the
    classes of ``records`` become :class:`ObjectRecord` s."""

    def __init__(self, data: io.BytesIO, storages: _StorageFile, label: str,
                 records: RecordClasses = RecordClasses()) -> None:
        super().__init__(data)
        self.storages = storages
        self.label = label
        self.records = records

    def find_class(self, module: str, name: str) -> Any:
        # protocol 2 (torch.save's) writes Python 2 names: __builtin__.exec, commands.call (subprocess)
        module, name = NAME_MAPPING.get((module, name), (IMPORT_MAPPING.get(module, module), name))
        dotted = f"{module}.{name}"
        if not name.isidentifier():
            raise self._refuse(dotted)
        if dotted in _ALLOWED:
            return _ALLOWED[dotted]
        if module == "torch":
            if name in _STORAGE_DTYPES:
                return _StorageType(_STORAGE_DTYPES[name])
            if isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
        if self.records(module, name):
            return _record_class(dotted)
        raise self._refuse(dotted)

    def _refuse(self, dotted: str) -> CheckpointRefused:
        return CheckpointRefused(
            f"{self.label}: refused to load: the pickle names the Python global {dotted!r}, which is neither plain "
            f"data nor a module class of {self.records.described}, and calling it could run code; nothing from the "
            f"file was run. Use a checkpoint from a source you trust, or save only the weights "
            f"(torch.save(model.state_dict(), path) or .safetensors)")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] in ("storage", b"storage")):
            raise pickle.UnpicklingError(f"an unknown persistent reference {str(pid)[:80]}")
        _, kind, key, location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(location, (str, bytes)):
            raise pickle.UnpicklingError("a storage reference of an unknown storage type")
        return self.storages.storage(key, kind.dtype, numel)


def open_archive(path: Path) -> tuple[zipfile.ZipFile, str]:
    """The open zip archive of a torch checkpoint and the prefix of its records (``archive/``);
    :class:`CheckpointError` for a missing file, a file not in torch's zip format, or a zip without
    one ``<name>/data.pkl``."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file; check the path")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a checkpoint in torch's zip format (torch.save since torch 1.6); "
                              f"legacy and other formats are not read: re-save it with a current torch")
    archive = zipfile.ZipFile(path)
    pickles = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        archive.close()
        raise CheckpointError(f"{path}: a zip file without one <name>/data.pkl record; not a torch checkpoint")
    return archive, pickles[0][: -len("data.pkl")]


def _unpickle(path: Path, storages: _StorageFile, data: bytes, records: RecordClasses) -> Any:
    unpickler = RestrictedUnpickler(io.BytesIO(data), storages, str(path), records)
    try:
        return unpickler.load()
    except CheckpointError:
        raise
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, IndexError, KeyError,
            struct.error, RecursionError) as e:
        raise CheckpointError(f"{path}: refused to load: the pickle is damaged or builds something other than "
                              f"plain data, tensors and module records ({type(e).__name__}: "
                              f"{str(e)[:200]}); nothing from the file was run") from None


def materialise(value: Any, float32: bool = False) -> Any:
    """``value`` with every :class:`LazyTensor` read (in containers and records too)."""
    if isinstance(value, LazyTensor):
        return value.materialise(float32)
    if isinstance(value, ObjectRecord):
        value.state.update({k: materialise(v, float32) for k, v in value.state.items()})
        return value
    if isinstance(value, dict):
        out = type(value)() if isinstance(value, collections.OrderedDict) else {}
        out.update((k, materialise(v, float32)) for k, v in value.items())
        return out
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(materialise(v, float32) for v in value)
    return value


@contextmanager
def open_restricted(path: str | Path, records: RecordClasses = RecordClasses()) -> Iterator[Any]:
    """The object a torch zip checkpoint holds, rebuilt by :class:`RestrictedUnpickler` with the
    classes of ``records`` as :class:`ObjectRecord` s and its tensors as :class:`LazyTensor` s, which
    can be read (:func:`materialise`) until the ``with`` block ends and the file is closed. Raises
    :class:`CheckpointError`."""
    path = Path(path)
    archive, prefix = open_archive(path)
    storages, data = _StorageFile(path, archive, prefix), archive.read(f"{prefix}data.pkl")
    with storages.archive, storages:
        yield _unpickle(path, storages, data, records)


def load_restricted(path: str | Path, records: RecordClasses = RecordClasses()) -> Any:
    """The object a torch zip checkpoint holds, rebuilt by :class:`RestrictedUnpickler`: tensors read
    into memory of their own, the classes of ``records`` as :class:`ObjectRecord`. Raises :class:`CheckpointError`."""
    with open_restricted(path, records) as top:
        return materialise(top)
