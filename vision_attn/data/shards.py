"""Classification data as tar shards: ``vision-attn data pack`` writes them, training reads them by index.

A folder of a million small files is slow on network storage (an open and a metadata round trip per
image) and slow to copy to each node. :func:`pack_shards` writes the class folders of a data root
(read by :func:`~vision_attn.data.splits.load_splits`: the classes, the split and the order that
training from the folder has) into tar files in webdataset's layout: each image as ``{key}.{ext}``
(the file's own bytes, not re-encoded) followed by ``{key}.cls`` (its label as decimal text), in
``train-000000.tar``, ``train-000001.tar``, ... and ``val-000000.tar``, ...; then ``index.json``,
written last: the classes, each shard's items and bytes, and each item's shard, the offsets of its
two members' tar headers, its size and label. The set is written in a temporary folder and renamed
into place (:func:`~vision_attn.io.atomic.atomic_folder`): a failed pack leaves no half of one.

webdataset's ``WebDataset`` and ``wids`` read these shards as any others. vision_attn reads them by
index (:class:`ShardDataset`): item ``i`` of a split is the ``i``-th image of the folder it was packed
from, fetched with one ranged read of its two members, whose tar headers and label are checked
against the index. So :class:`~vision_attn.data.sampler.EpochSampler`'s order by (seed, epoch), the
augmentation seeds by (seed, epoch, index), the loader position of an exact resume and the split
between DDP processes are the folder's, and the same transforms decode the bytes
(:mod:`~vision_attn.data.file_transforms`' ``read(name, data)``). A root with a URL scheme
(``s3://``, ``gs://``, ``https://``) is read through fsspec with the same index.

Faults follow :mod:`~vision_attn.data.faults`: a missing or cut-short shard, a member whose tar header
or label does not match the index, a member that is not an image are a :class:`DataError` naming the
shard and the member; with ``skip_bad_images`` every member is read and decoded once when the set is
opened, and the bad ones are left out, each listed by shard and member.
"""
from __future__ import annotations

import io
import json
import os
import re
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import fsspec
import numpy as np
import torch

from vision_attn.data.decode import read_image
from vision_attn.data.faults import Faults, Problem, decode_problem
from vision_attn.data.folder import Sample
from vision_attn.data.splits import load_splits
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.atomic import atomic_folder, format_bytes, write_text
from vision_attn.io.json import MAX_JSON_BYTES, read_json

__all__ = ["INDEX_NAME", "DEFAULT_MAX_BYTES", "PackResult", "pack_shards", "parse_bytes", "is_shard_set",
           "open_shards", "ShardItems", "ShardSplits", "ShardDataset"]

INDEX_NAME = "index.json"
FORMAT = "vision-attn-shards"
VERSION = 1
DEFAULT_MAX_BYTES = 256 * 2**20  # webdataset's advice: shards of 100 MB to 1 GB
SPLITS = ("train", "val")
BLOCK = tarfile.BLOCKSIZE  # a tar header, and the unit a member's data is padded to
RECORD = tarfile.RECORDSIZE  # a closed tar file is padded to a multiple of this
REPACK = "pack the folder again (vision-attn data pack FOLDER -o SHARDS)"
MAX_OPEN = 64  # shard files a process keeps open
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.I)

Progress = Callable[[str, int, int], None]  # (split, done, total)


def has_scheme(root: str | os.PathLike) -> bool:
    """Whether ``root`` is a URL (``s3://...``, ``https://...``): read through fsspec."""
    return bool(_SCHEME.match(os.fspath(root)))


def parse_bytes(value: int | str) -> int:
    """A size in bytes from ``500000``, ``"256M"``, ``"1.5GiB"`` (K, M, G, T: powers of 1024)."""
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.match(value)
        if m is None:
            raise ConfigError(f"--max-bytes {value!r}: give a number of bytes, e.g. 500000, 256M or 1G")
        n = int(float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper()))
    if n < 1:
        raise ConfigError(f"--max-bytes {value!r}: give a positive size")
    return n


def _padded(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def _closed_size(content: int) -> int:
    """The bytes of a tar file whose members take ``content`` bytes, once closed (two zero blocks, then
    padding to a record)."""
    return -(-(content + 2 * BLOCK) // RECORD) * RECORD


# ---------------------------------------------------------------- packing
@dataclass
class PackResult:
    """What :func:`pack_shards` wrote: the folder, the classes, items and shard files per split, bytes."""

    root: Path
    classes: list[str]
    items: dict[str, int]
    shards: dict[str, list[str]]
    bytes: int
    skipped: list[Problem] = field(default_factory=list)
    ignored: int = 0

    def summary(self) -> str:
        parts = ", ".join(f"{self.items[s]} {s} images in {len(self.shards[s])} shard(s)" for s in self.items)
        s = f"{self.root}: {parts}, {len(self.classes)} classes, {format_bytes(self.bytes)}"
        if self.ignored:
            s += f"; {self.ignored} non-image file(s) ignored"
        if self.skipped:
            s += f"; {len(self.skipped)} unreadable image(s) skipped"
        return s


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)  # mtime 0, mode 0o644, no owner: the same folder packs to the same bytes
    info.size = size
    return info


def _source_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: the image disappeared since the folder was scanned; pack again") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}); make it readable and pack again") from None


def _pack_split(folder: Path, split: str, samples: list[Sample], root: Path, shard_size: int | None,
                max_bytes: int | None, progress: Progress | None) -> dict[str, Any]:
    """Write ``samples`` as ``{split}-NNNNNN.tar`` files in ``folder``; their index entry."""
    shards: list[dict[str, Any]] = []
    cols: dict[str, list[Any]] = {k: [] for k in ("shard", "offset", "cls_offset", "size", "label", "member", "source")}
    tar: tarfile.TarFile | None = None
    count = 0

    def close() -> None:
        if tar is not None:
            tar.close()
            shards[-1]["bytes"] = (folder / shards[-1]["name"]).stat().st_size

    try:
        for i, (path, label) in enumerate(samples):
            data = _source_bytes(path)
            key = f"{i:08d}"
            member = f"{key}.{Path(path).suffix.lower().lstrip('.')}"
            text = str(int(label)).encode()
            adds = BLOCK + _padded(len(data)) + BLOCK + _padded(len(text))
            full = tar is not None and (count >= shard_size if shard_size is not None else
                                        _closed_size(tar.offset + adds) > max_bytes)  # type: ignore[operator]
            if tar is None or full:
                close()
                name = f"{split}-{len(shards):06d}.tar"
                shards.append({"name": name, "items": 0, "bytes": 0})
                tar = tarfile.open(folder / name, "w", format=tarfile.USTAR_FORMAT)
                count = 0
            offset = tar.offset
            tar.addfile(_tar_info(member, len(data)), io.BytesIO(data))
            cls_offset = tar.offset
            tar.addfile(_tar_info(f"{key}.cls", len(text)), io.BytesIO(text))
            count += 1
            shards[-1]["items"] += 1
            for k, v in (("shard", len(shards) - 1), ("offset", offset), ("cls_offset", cls_offset), ("size", len(data)),
                         ("label", int(label)), ("member", member), ("source", os.path.relpath(path, root))):
                cols[k].append(v)
            if progress is not None and ((i + 1) % 64 == 0 or i + 1 == len(samples)):
                progress(split, i + 1, len(samples))
    finally:
        close()
    return {"shards": shards, "items": cols}


def _check_output(out: Path, folder: Path) -> None:
    if out.is_dir() and any(out.iterdir()) and not (out / INDEX_NAME).is_file():
        raise ConfigError(f"-o {out}: the folder exists and is not a shard set (no {INDEX_NAME}); give a new folder "
                          f"(a shard set is replaced as a whole; nothing was written)")
    here, there = os.path.realpath(out), os.path.realpath(folder)
    if here == there or here.startswith(there.rstrip(os.sep) + os.sep):
        raise ConfigError(f"-o {out}: inside the folder being packed ({folder}), where it would be read as a class "
                          f"folder; write the shards beside it (nothing was written)")


def pack_shards(folder: str | os.PathLike, out: str | os.PathLike, *, shard_size: int | None = None,
                max_bytes: int | str | None = None, split: Literal["train", "val", "all"] = "all",
                val_fraction: float = 0.2, split_seed: int = 0, skip_bad_images: bool = False, threads: int = 4,
                progress: Progress | None = None) -> PackResult:
    """Write the class folders of ``folder`` (a data root as training reads it, or ``demo:NAME``) as tar
    shards in ``out`` (see the module docstring); return what was written.

    ``shard_size``: images per shard; else ``max_bytes`` (an int or ``"256M"``; default 256 MiB): a
    shard is closed before it would pass that size (a single larger image gets a shard of its own).
    ``split``: the splits to write. ``val_fraction``, ``split_seed``: the split of a folder without
    ``val/``, as ``data.val_fraction`` and ``data.split_seed`` make it. ``skip_bad_images``: decode every
    image first and leave out those that fail (listed in the result); otherwise they are packed as
    they are, and named when training reads them. An existing shard set at ``out`` is replaced once the
    new one is complete; any other existing folder is refused.
    """
    if shard_size is not None and max_bytes is not None:
        raise ConfigError("--shard-size and --max-bytes: give one of them (images per shard, or bytes per shard)")
    if shard_size is not None and shard_size < 1:
        raise ConfigError(f"--shard-size {shard_size}: give a positive number of images per shard")
    limit = None if shard_size is not None else parse_bytes(DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
    if split not in ("train", "val", "all"):
        raise ConfigError(f"--split {split!r}: choose train, val or all")
    out = Path(out)
    splits = load_splits(folder, val_fraction=val_fraction, split_seed=split_seed, skip_bad_images=skip_bad_images,
                         threads=threads, screen=False)  # packed as they are unless skipping: bytes copied, not read
    _check_output(out, splits.root)
    chosen = SPLITS if split == "all" else (split,)
    index: dict[str, Any] = {"format": FORMAT, "version": VERSION, "classes": splits.classes,
                             "source": str(splits.root), "layout": splits.layout, "splits": {}}
    result = PackResult(out, splits.classes, {}, {}, 0, list(splits.faults.problems), splits.ignored)

    def write(tmp: Path) -> None:
        for name in chosen:
            entry = _pack_split(tmp, name, getattr(splits, name), splits.root, shard_size, limit, progress)
            index["splits"][name] = entry
            result.items[name] = len(entry["items"]["label"])
            result.shards[name] = [s["name"] for s in entry["shards"]]
            result.bytes += sum(s["bytes"] for s in entry["shards"])
        write_text(tmp / INDEX_NAME, json.dumps(index, separators=(",", ":")) + "\n")  # last: the set is complete

    atomic_folder(out, write)
    return result


# ---------------------------------------------------------------- reading
class ShardStore:
    """The files of a shard set: a local folder (read with ``os.pread``, shard files kept open per
    process) or a URL (fsspec's file system for it: ranged reads)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") if has_scheme(root) else root
        self.remote = has_scheme(root)
        self._fs: Any = None
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()  # the threads of skip_bad_images' check share the descriptors
        self._pid: int | None = os.getpid()

    def __getstate__(self) -> dict[str, Any]:  # a worker process opens its own files
        return {**self.__dict__, "_fs": None, "_fds": {}, "_lock": None, "_pid": None}

    def __del__(self) -> None:
        try:
            if self._pid == os.getpid():
                for fd in self._fds.values():
                    os.close(fd)
        except Exception:  # at interpreter exit, or a descriptor closed already
            pass

    def path(self, name: str) -> str:
        return f"{self.root}/{name}" if self.remote else os.path.join(self.root, name)

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs, _ = fsspec.core.url_to_fs(self.root)
        return self._fs

    def read_index(self, name: str) -> Any:
        if not self.remote:
            return read_json(self.path(name), what="shard index")
        path = self.path(name)
        try:
            size = self.fs.size(path)
            if size is not None and size > MAX_JSON_BYTES:
                raise DataError(f"shard index {path}: {size:,} bytes is over the limit of {MAX_JSON_BYTES:,} bytes")
            return json.loads(self.fs.cat_file(path))
        except FileNotFoundError:
            raise DataError(f"shard index {path}: no such file; give the folder `vision-attn data pack` wrote, "
                            f"or its {INDEX_NAME}") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not valid JSON: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}"
                            ) from None

    def sizes(self, names: list[str]) -> dict[str, int]:
        """The sizes of the files ``names`` that exist (one listing of the folder where it can)."""
        if not self.remote:
            found = {e.name: e.stat().st_size for e in os.scandir(self.root) if e.is_file()}
            return {n: found[n] for n in names if n in found}
        try:
            found = {os.path.basename(e["name"].rstrip("/")): int(e["size"])
                     for e in self.fs.ls(self.root, detail=True)}
        except Exception:  # a file system that cannot list (plain HTTP): one request per shard
            found = {}
            for n in names:
                try:
                    found[n] = int(self.fs.size(self.path(n)))
                except (FileNotFoundError, TypeError):
                    pass
        return {n: found[n] for n in names if n in found}

    def read(self, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes of the file ``name`` from ``offset`` (fewer where the file ends first);
        FileNotFoundError when it is missing."""
        if self._pid != os.getpid():  # a worker process: its own descriptors and file system
            self._fds, self._lock, self._fs, self._pid = {}, threading.Lock(), None, os.getpid()
        if self.remote:
            return bytes(self.fs.cat_file(self.path(name), start=offset, end=offset + length))
        with self._lock:
            fd = self._fds.pop(name, None)
            if fd is None:
                fd = os.open(self.path(name), os.O_RDONLY)
                if len(self._fds) >= MAX_OPEN:
                    os.close(self._fds.pop(next(iter(self._fds))))
            self._fds[name] = fd  # the most recent last
            return os.pread(fd, length, offset)


class _Fault(Exception):
    """A member that cannot be read as the index says: ``reason`` and how to ``fix`` it."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


def _header(buf: bytes, at: int, want: str, size: int) -> None:
    try:
        info = tarfile.TarInfo.frombuf(buf, tarfile.ENCODING, "surrogateescape")
    except tarfile.HeaderError as e:
        raise _Fault(f"no tar header of {want} at byte {at:,} where the index places it ({e}): the index does not "
                     f"match the shard", REPACK) from None
    if info.name != want or info.size != size:
        raise _Fault(f"the tar header at byte {at:,} is {info.name!r} ({info.size} bytes) where the index says "
                     f"{want!r} ({size} bytes): the index does not match the shard", REPACK)


@dataclass
class ShardItems:
    """One split of a shard set, item by item (columns of the index): ``read(i)`` gives item ``i``'s
    image bytes and label, checked against the tar headers and the ``.cls`` member."""

    store: ShardStore
    split: str
    shards: list[str]  # file names
    shard: np.ndarray  # (N,) index into shards
    offset: np.ndarray  # the image member's tar header
    cls_offset: np.ndarray  # the .cls member's tar header
    size: np.ndarray  # the image's bytes
    label: np.ndarray
    member: list[str]  # "00000003.png"

    def __len__(self) -> int:
        return len(self.label)

    def shard_path(self, i: int) -> str:
        return self.store.path(self.shards[int(self.shard[i])])

    def name(self, i: int) -> str:
        """``'SHARDS/train-000000.tar, member 00000003.png'``: how messages name item ``i``."""
        return f"{self.shard_path(i)}, member {self.member[i]}"

    def _read(self, i: int) -> tuple[bytes, int]:
        offset, cls_offset, size = int(self.offset[i]), int(self.cls_offset[i]), int(self.size[i])
        label, member = int(self.label[i]), self.member[i]
        text = str(label).encode()
        end = cls_offset + BLOCK + len(text)
        shard = self.shards[int(self.shard[i])]
        try:
            buf = self.store.read(shard, offset, end - offset)
        except FileNotFoundError:
            raise _Fault("no such shard (the index lists it)", f"copy it beside the index or {REPACK}") from None
        except OSError as e:
            raise _Fault(f"the shard cannot be read ({e.strerror or e})", "make it readable") from None
        if len(buf) < end - offset:
            raise _Fault(f"the shard is cut short: it ends at byte {offset + len(buf):,}, before this member's end at "
                         f"byte {end:,}", f"copy the shard again or {REPACK}")
        _header(buf[:BLOCK], offset, member, size)
        cls_at = cls_offset - offset
        key = member.split(".", 1)[0]
        _header(buf[cls_at:cls_at + BLOCK], cls_offset, f"{key}.cls", len(text))
        if buf[cls_at + BLOCK:] != text:
            raise _Fault(f"its label {buf[cls_at + BLOCK:]!r} in {key}.cls is not the index's {label}: the index does "
                         f"not match the shard", REPACK)
        return buf[BLOCK:BLOCK + size], label

    def read(self, i: int) -> tuple[bytes, int]:
        """Item ``i``: (the image file's bytes, the label); a DataError naming the shard and member when
        the shard is missing or cut short, or does not match the index."""
        try:
            return self._read(i)
        except _Fault as f:
            fault = f
        Faults("raise").bad(self.shard_path(i), fault.reason, f"member {self.member[i]}", fix=fault.fix)  # raises
        raise AssertionError("Faults('raise').bad returned")

    def problem(self, i: int, decode: bool) -> tuple[str, str] | None:
        """(reason, fix) when item ``i`` cannot be read (or, with ``decode``, decoded); else None."""
        try:
            data, _ = self._read(i)
        except _Fault as f:
            return f.reason, f.fix
        if decode:
            reason, _ = decode_problem(self.name(i), data)
            if reason is not None:
                return reason, f"replace the image in the folder and {REPACK}"
        return None

    def select(self, keep: np.ndarray) -> ShardItems:
        """The items where ``keep`` is True, in order."""
        idx = np.flatnonzero(keep)
        return ShardItems(self.store, self.split, self.shards, self.shard[idx], self.offset[idx], self.cls_offset[idx],
                          self.size[idx], self.label[idx], [self.member[i] for i in idx])


@dataclass
class ShardSplits:
    """A shard set opened for training: what :class:`~vision_attn.data.splits.ClassificationSplits` is
    for folders (``root``, ``classes``, ``train``, ``val``, ``faults``, :meth:`summary`)."""

    root: str
    classes: list[str]
    train: ShardItems
    val: ShardItems
    layout: str
    ignored: int = 0
    faults: Faults = field(default_factory=Faults)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def bad(self) -> list[str]:
        """The members left out (``skip_bad_images``), each as ``'SHARD, member NAME'``."""
        return [p.text() for p in self.faults.problems]

    def summary(self) -> str:
        s = (f"{self.root}: {len(self.train)} train / {len(self.val)} val images, {len(self.classes)} classes "
             f"({self.layout})")
        if self.bad:
            s += f"; {len(self.bad)} unreadable image(s) {'skipped' if self.faults.mode == 'skip' else 'found'}"
        return s


def is_shard_set(root: str | os.PathLike) -> bool:
    """Whether the data root ``root`` is a shard set: a URL, a folder holding ``index.json``, or a
    ``.json`` file (its index)."""
    if has_scheme(root):
        return True
    path = Path(root)
    return (path.is_file() and path.suffix == ".json") or (path.is_dir() and (path / INDEX_NAME).is_file())


def _locate(root: str | os.PathLike) -> tuple[ShardStore, str]:
    text = os.fspath(root)
    if has_scheme(text):
        folder, _, name = text.rstrip("/").rpartition("/")
        return (ShardStore(folder), name) if name.endswith(".json") else (ShardStore(text), INDEX_NAME)
    path = Path(text)
    if path.is_dir():
        return ShardStore(str(path)), INDEX_NAME
    return ShardStore(str(path.parent)), path.name


def _items(store: ShardStore, split: str, entry: dict[str, Any], n_classes: int, where: str) -> ShardItems:
    cols = entry["items"]
    shards = [str(s["name"]) for s in entry["shards"]]
    items = ShardItems(store, split, shards, np.asarray(cols["shard"], dtype=np.int64),
                       np.asarray(cols["offset"], dtype=np.int64), np.asarray(cols["cls_offset"], dtype=np.int64),
                       np.asarray(cols["size"], dtype=np.int64), np.asarray(cols["label"], dtype=np.int64),
                       [str(m) for m in cols["member"]])
    n = len(items)
    if any(len(c) != n for c in (items.shard, items.offset, items.cls_offset, items.size, items.member)) or \
            sum(int(s["items"]) for s in entry["shards"]) != n:
        raise DataError(f"shard index {where}: the {split} columns and shard counts disagree; {REPACK}")
    if n and (items.label.min() < 0 or items.label.max() >= n_classes or items.shard.min() < 0
              or items.shard.max() >= len(shards)):
        raise DataError(f"shard index {where}: a {split} label or shard number out of range; {REPACK}")
    return items


def _check_shards(items: ShardItems, entry: dict[str, Any], faults: Faults, threads: int) -> np.ndarray:
    """Items to keep. Each shard is checked against the index by its size and its first item (headers
    and label: one small read); every member of a shard that fails either is read, and the first that
    fails is a DataError naming it, or each that fails is left out (``faults``)."""
    keep = np.ones(len(items), dtype=bool)
    names = items.shards
    found = items.store.sizes(names)
    shard_ids, first = np.unique(items.shard, return_index=True)
    firsts = dict(zip(shard_ids.tolist(), first.tolist()))

    def suspect(k: int) -> bool:
        if found.get(names[k]) != int(entry["shards"][k]["bytes"]):
            return True
        return k in firsts and items.problem(firsts[k], decode=False) is not None

    with ThreadPoolExecutor(max(1, threads)) as pool:
        flags = list(pool.map(suspect, range(len(names))))
    for k in [k for k, flag in enumerate(flags) if flag]:
        for i in np.flatnonzero(items.shard == k):
            problem = items.problem(int(i), decode=False)
            if problem is not None:
                faults.bad(items.shard_path(int(i)), problem[0], f"member {items.member[i]}", fix=problem[1])
                keep[i] = False
    return keep


def _verify(items: ShardItems, keep: np.ndarray, faults: Faults, threads: int, progress: Progress | None) -> np.ndarray:
    """Read and decode every kept item once (``threads`` at a time); those that fail go to ``faults``."""
    todo = [int(i) for i in np.flatnonzero(keep)]
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for done, (i, problem) in enumerate(zip(todo, pool.map(lambda j: items.problem(j, True), todo)), 1):
            if problem is not None:
                faults.bad(items.shard_path(i), problem[0], f"member {items.member[i]}", fix=problem[1])
                keep[i] = False
            if progress is not None and (done % 64 == 0 or done == len(todo)):
                progress(items.split, done, len(todo))
    return keep


def open_shards(root: str | os.PathLike, *, skip_bad_images: bool = False, threads: int = 4,
                faults: Faults | None = None, progress: Progress | None = None) -> ShardSplits:
    """Open the shard set ``root`` (its folder, its ``index.json``, or a URL of either) for training.

    The index is checked against each shard's size and first item; a shard that is missing or fails
    has all its members read (a DataError naming the first that fails, see :class:`ShardItems`); every
    item read later is checked against its tar headers and ``.cls`` label as well.
    ``skip_bad_images``: read and decode every member now and leave out those that fail (listed in
    ``faults``); otherwise a member that does not decode raises a DataError naming it when it is read.
    """
    faults = faults if faults is not None else Faults("skip" if skip_bad_images else "raise")
    store, index_name = _locate(root)
    where = store.path(index_name)
    index = store.read_index(index_name)
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"{where}: not a vision-attn shard index (no \"format\": \"{FORMAT}\"); give the folder "
                        f"`vision-attn data pack` wrote, or its {INDEX_NAME}")
    if int(index.get("version", 0)) > VERSION:
        raise DataError(f"{where}: shard index version {index['version']}, newer than this vision-attn reads "
                        f"({VERSION}); upgrade vision-attn or {REPACK}")
    try:
        classes = [str(c) for c in index["classes"]]
        entries = index["splits"]
        found = {s: _items(store, s, entries[s], len(classes), where) for s in SPLITS if s in entries}
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"shard index {where}: malformed ({type(e).__name__}: {e}); {REPACK}") from None
    if "train" not in found:
        raise DataError(f"{where}: the shard set has no train split (packed with --split val); pack it with "
                        f"--split all to train from it")
    for split, items in found.items():
        keep = _check_shards(items, entries[split], faults, threads)
        if faults.mode != "raise":
            keep = _verify(items, keep, faults, threads, progress)
        found[split] = items.select(keep) if not keep.all() else items
    empty = found["train"].select(np.zeros(0, dtype=bool))
    layout = f"shards packed from {index.get('source', '?')}"
    return ShardSplits(os.fspath(root), classes, found["train"], found.get("val", empty), layout, faults=faults)


class ShardDataset(torch.utils.data.Dataset):
    """A split of a shard set as :class:`~vision_attn.data.folder.ImageFolder` reads a folder: item ``i``
    -> (transformed image, label), the image's bytes decoded by the transform's ``read(name, data)``
    (:mod:`~vision_attn.data.file_transforms`) or :func:`~vision_attn.data.decode.read_image`."""

    def __init__(self, items: ShardItems, classes: list[str],
                 transform: Callable[..., dict[str, Any]] | None = None) -> None:
        self.items, self.classes, self.transform = items, list(classes), transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        data, label = self.items.read(index)
        name = self.items.name(index)
        read = getattr(self.transform, "read", None)
        if read is not None:
            return read(name, data), label
        image = read_image(name, data=data)[0]
        if self.transform is not None:
            image = self.transform(image=image)["image"]
        return image, label
