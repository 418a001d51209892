"""One policy for bad files and labels, for every data source (class folders, YOLO txt, COCO json).

A *problem* is something that would stop training: an image that cannot be decoded, is truncated, is
not an image, is empty, a link that points nowhere or back to a folder already walked, a label line
that cannot be read or whose coordinates are not normalised. A *note* is something the checks change
and training goes on with: a box clipped to its image, a degenerate box dropped, a duplicate row
removed, a polygon turned into its box. Both name the file and, for labels, the line (or the JSON key
path).

:class:`Faults` carries the policy of one data set: ``"raise"`` (the default: the first problem is a
:class:`~vision_attn.errors.DataError` naming it), ``"skip"`` (``skip_bad_images``: the file is left
out and listed in :attr:`Faults.problems`) or ``"collect"`` (``vision-attn data check``: every problem
listed, nothing left out silently). :func:`walk_images` lists the images of a folder, following each
link once; :func:`decode_problem` and :func:`image_size` read an image through the same policy.
"""
from __future__ import annotations

import io
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Literal

from PIL import Image, UnidentifiedImageError

from vision_attn.errors import DataError

__all__ = ["IMAGE_EXTENSIONS", "SKIP_HINT", "Problem", "Faults", "FaultMode", "DECODE_ERRORS", "walk_images", "decode_problem",
           "image_reason", "image_size", "verify_images", "quick_problem", "screen_images", "MAX_LISTED"]

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".ppm", ".pgm"})
SKIP_HINT = "replace or delete it, or pass --data.skip_bad_images true to skip unreadable images"

FaultMode = Literal["raise", "skip", "collect"]
MAX_LISTED = 100  # problems named in one error message (`vision-attn data check` lists every one)
# how a complete file ends: a JPEG with its end-of-image marker, a PNG with its IEND chunk
_COMPLETE_TAIL = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82"}
# what PIL raises for a file it cannot decode (truncated, not an image, too large, corrupt, gone)
DECODE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError)


@dataclass(frozen=True)
class Problem:
    """A file (and where in it: ``"line 3"``, ``"annotations[12]"``) and what is wrong or was changed."""

    path: str
    reason: str
    where: str | None = None
    fix: str | None = field(default=None, compare=False)  # how to repair it (in an error, not in reports)

    def text(self) -> str:
        return f"{self.path}{', ' + self.where if self.where else ''}: {self.reason}"

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v is not None and k != "fix"}


@dataclass
class Faults:
    """The policy of one data set, and what it met (see the module docstring).

    ``problems``: what stops training (skipped with ``"skip"``, reported with ``"collect"``);
    ``notes``: what the checks changed; ``counts``: notes by kind (``"clipped"``, ``"duplicates"``...).
    """

    mode: FaultMode = "raise"
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.mode not in ("raise", "skip", "collect"):
            raise ValueError(f"Faults mode {self.mode!r}: choose raise, skip or collect")

    def bad(self, path: str | os.PathLike, reason: str, where: str | None = None, *,
            fix: str = "replace or delete it") -> None:
        """A problem: raised as a DataError (``"raise"``), else recorded; ``fix`` says how to repair it."""
        problem = Problem(os.fspath(path), reason, where, fix)
        if self.mode == "raise":
            raise DataError(f"{problem.text()}; {fix}, or pass --data.skip_bad_images true to skip it")
        self.problems.append(problem)

    def note(self, path: str | os.PathLike, reason: str, where: str | None = None, *, kind: str) -> None:
        """A change the checks made (counted under ``kind``)."""
        self.notes.append(Problem(os.fspath(path), reason, where))
        self.counts[kind] += 1

    def raise_problems(self, what: str) -> None:
        """A DataError listing every problem met (the first :data:`MAX_LISTED`), if there is one; ``what``
        names the data set. Training gathers a set's problems with ``"collect"`` and stops with this."""
        if not self.problems:
            return
        if len(self.problems) == 1:  # the error the first problem raises under "raise"
            p = self.problems[0]
            raise DataError(f"{p.text()}; {p.fix or 'replace or delete it'}, or pass --data.skip_bad_images true "
                            f"to skip it")
        listed = "; ".join(p.text() for p in self.problems[:MAX_LISTED])
        more = (f"; ... and {len(self.problems) - MAX_LISTED} more (vision-attn data check lists them all)"
                if len(self.problems) > MAX_LISTED else "")
        raise DataError(f"{what}: {len(self.problems)} problem(s) that stop training: {listed}{more}; "
                        f"repair or delete them, or pass --data.skip_bad_images true to skip unreadable images")

    def report(self, max_notes: int = 200) -> dict:
        """What ``metrics.json`` records under ``data``: every skipped file, the counts, the first notes."""
        return {"skipped": [p.as_dict() for p in self.problems], "changed": dict(self.counts),
                "notes": [p.as_dict() for p in self.notes[:max_notes]]}

    def log_lines(self, max_notes: int = 10) -> list[str]:
        """Lines for a training log: every bad file by name, then the first ``max_notes`` notes."""
        verb = "skipped" if self.mode == "skip" else "bad"
        lines = [f"{verb}: {p.text()}" for p in self.problems]
        lines += [f"changed: {p.text()}" for p in self.notes[:max_notes]]
        if len(self.notes) > max_notes:
            lines.append(f"changed: ... and {len(self.notes) - max_notes} more (all counted, the first "
                         f"{min(len(self.notes), 200)} listed in metrics.json)")
        return lines

    def changes(self) -> str:
        """The notes counted by kind: ``'3 clipped, 1 duplicates removed'`` ('' when there are none)."""
        return ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))


def _link_problem(path: str) -> str | None:
    """Why the link ``path`` cannot be followed (None when it is not a link or resolves)."""
    if not os.path.islink(path):
        return None
    if os.path.exists(path):
        return None
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == 40:  # ELOOP
            return f"a link that loops back on itself ({os.readlink(path)})"
    return f"a broken link: it points to {os.readlink(path)}, which does not exist"


def walk_images(folder: str | os.PathLike, faults: Faults,
                seen: set[tuple[int, int]] | None = None) -> tuple[list[str], int]:
    """The image files below ``folder`` (a folder's files in name order, then its subfolders', depth
    first) and the number of other files (other extensions, hidden files) ignored.

    Links are followed once: a link to an ancestor (a loop) or to a folder already walked (``seen``:
    the folders walked so far, shared by the walks of one data set) is a problem and not walked; a link
    to nothing, an empty file, an unreadable folder are problems; a file or folder that disappears
    while it is listed is left out."""
    images: list[str] = []
    other = 0
    seen = set() if seen is None else seen
    stack = [os.fspath(folder)]
    while stack:
        current = stack.pop()
        try:
            st = os.stat(current)
        except FileNotFoundError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            faults.bad(current, f"a link to a folder walked already ({os.path.realpath(current)}): a second "
                                f"way into it; it is not walked again",
                       fix="remove the link or point it elsewhere")
            continue
        seen.add(key)
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        except PermissionError:
            faults.bad(current, "the folder cannot be read (permission denied)", fix="make it readable")
            continue
        subdirs = []
        for entry in entries:
            broken = _link_problem(entry.path) if entry.is_symlink() else None  # no extra stat for plain files
            try:
                is_dir = broken is None and entry.is_dir()
            except OSError:
                is_dir = False
            if entry.name.startswith("."):  # hidden: folders not walked, files counted as ignored
                other += not is_dir
                continue
            if is_dir:
                if entry.is_symlink():
                    target, here = os.path.realpath(entry.path), os.path.realpath(current)
                    if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
                        faults.bad(entry.path, f"a link to its own ancestor {target}: a loop; it is not walked",
                                   fix="remove the link or point it elsewhere")
                        continue
                subdirs.append(entry.path)
                continue
            if os.path.splitext(entry.name)[1].lower() not in IMAGE_EXTENSIONS:
                other += 1
                continue
            if broken is not None:
                faults.bad(entry.path, broken, fix="remove the link or restore its target")
                continue
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue  # gone since it was listed
            if size == 0:
                faults.bad(entry.path, "empty image file (0 bytes)")
                continue
            images.append(entry.path)
        stack.extend(reversed(subdirs))
    return images, other


def image_reason(e: BaseException) -> str:
    """What a decoding exception means for the user, in a few words."""
    if isinstance(e, FileNotFoundError):
        return "the file disappeared since the data was listed"
    if isinstance(e, Image.DecompressionBombError):
        return f"too large to decode safely ({e})"
    if isinstance(e, UnidentifiedImageError):
        return "not an image (no image format recognises its content)"
    detail = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "truncated" in detail.lower():
        return f"a truncated image ({detail}): the file was cut short"
    return f"cannot decode the image ({detail}); the file is corrupt"


def decode_problem(path: str | os.PathLike, data: bytes | None = None) -> tuple[str | None, tuple[int, int] | None]:
    """Decode ``path`` completely; (None, (width, height)) when it decodes, else (the reason, None).
    ``data``: the file's bytes, read already (a shard's member, named by ``path``)."""
    broken = _link_problem(os.fspath(path)) if data is None else None
    if broken is not None:
        return broken, None
    try:
        with Image.open(path if data is None else io.BytesIO(data)) as img:
            img.load()  # a truncated file fails here
            return None, img.size
    except DECODE_ERRORS as e:
        return image_reason(e), None


def image_size(path: str | os.PathLike, faults: Faults) -> tuple[int, int] | None:
    """(width, height) from the image's header, or None after ``faults.bad`` (not an image, a broken link,
    gone)."""
    broken = _link_problem(os.fspath(path))
    if broken is not None:
        faults.bad(path, broken, fix="remove the link or restore its target")
        return None
    try:
        with Image.open(path) as pil:  # reads the header only
            return pil.size
    except DECODE_ERRORS as e:
        faults.bad(path, image_reason(e))
        return None


def quick_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` would not decode, found cheaply: a broken or looping link, a header no format
    recognises (not an image, empty), a JPEG or PNG that does not end as a complete one does (then
    decoded in full to be sure: some writers add bytes after the end). None for a file that passes."""
    broken = _link_problem(os.fspath(path))
    if broken is not None:
        return broken
    try:
        with Image.open(path) as img:  # the header only
            tail_marker = _COMPLETE_TAIL.get(img.format or "")
        if tail_marker is None:
            return None
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64))
            tail = f.read()
    except DECODE_ERRORS as e:
        return image_reason(e)
    if tail.rstrip(b"\0\r\n ").endswith(tail_marker):
        return None
    return decode_problem(path)[0]


def screen_images(paths: Iterable[str | os.PathLike], faults: Faults, threads: int = 4) -> None:
    """:func:`quick_problem` of every image (``threads`` at a time); each problem goes to ``faults.bad``."""
    paths = [os.fspath(p) for p in paths]
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for path, reason in zip(paths, pool.map(quick_problem, paths, chunksize=64)):
            if reason is not None:
                faults.bad(path, reason)


def verify_images(paths: Iterable[str | os.PathLike], faults: Faults, threads: int = 4,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, tuple[int, int]]:
    """Decode every image once (``threads`` at a time: PIL releases the GIL while it decodes); each one
    that fails goes to ``faults.bad``. Returns the sizes of those that decode; ``progress(done, total)``
    is called as images finish."""
    paths = [os.fspath(p) for p in paths]
    sizes: dict[str, tuple[int, int]] = {}
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for done, (path, (reason, size)) in enumerate(zip(paths, pool.map(decode_problem, paths, chunksize=32)), 1):
            if reason is None:
                sizes[path] = size
            else:
                faults.bad(path, reason)
            if progress is not None and (done % 64 == 0 or done == len(paths)):
                progress(done, len(paths))
    return sizes
