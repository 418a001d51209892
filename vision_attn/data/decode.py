"""Image files decoded for what will be cut from them: the header read first, the JPEG decoded at reduced size.

A JPEG can be decoded at 1/2, 1/4 or 1/8 of its size for little more than the cost of reading its
entropy-coded data (libjpeg's DCT scaling; PIL's ``Image.draft``): the inverse DCT, the colour
conversion and the upsampling then run on a quarter, a sixteenth or a sixty-fourth of the pixels.
:func:`read_image` opens a file (PIL reads the header only), asks ``choose(width, height)`` for the
reduction (the caller knows the crop it will cut and the size it will resize it to:
:func:`reduction` is the rule, the largest factor that keeps the region at least the output size, so
no detail is lost that the resize would keep), decodes at that factor and says which factor it used.
Other formats (PNG, BMP, WebP, TIFF, ...) decode at full size through PIL, exactly as
:func:`vision_attn.data.folder.load_image` always has (it is :func:`read_image` with factor 1).
The JPEG decoder is a choice: PIL's, or OpenCV's (``decoder="opencv"``: the same libjpeg-turbo, the
same pixels, written straight into the array, the size read from the frame header by
:func:`jpeg_frame` without opening the file twice; a grey or CMYK JPEG, or one that does not end in
the end marker, goes through PIL).

A file that does not decode completely (truncated, corrupt, not an image, gone) raises the
:class:`DataError` naming it that ``load_image`` raises: a reduced decode still reads every byte of
the file, so a truncated JPEG is found as before.
"""
from __future__ import annotations

import io
import os
from typing import Callable, Sequence

import cv2
import numpy as np
from PIL import Image

from vision_attn.data.faults import DECODE_ERRORS, SKIP_HINT, image_reason
from vision_attn.errors import ConfigError, DataError

__all__ = ["FACTORS", "DECODERS", "reduction", "read_image", "scale_box", "jpeg_frame"]

FACTORS = (8, 4, 2, 1)  # what libjpeg's DCT scaling through PIL's draft offers (1/8, 1/4, 1/2, 1)
DECODERS = ("pil", "opencv")
# OpenCV's flags for a JPEG at 1/f (the REDUCED_GRAYSCALE flags are the scale bits alone), in colour,
# without applying an EXIF orientation (PIL does not); RGB straight from the decoder from OpenCV 4.10,
# BGR and a channel swap before
_CV2_FLAGS = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
              8: cv2.IMREAD_REDUCED_GRAYSCALE_8}
_CV2_RGB = getattr(cv2, "IMREAD_COLOR_RGB", None)
_HIGH_BIT = ("I;16", "I;16B", "I;16L", "I")


def reduction(region_hw: Sequence[float], output_hw: Sequence[int], max_factor: int = 8) -> int:
    """The largest decode factor in 8, 4, 2, 1 (at most ``max_factor``) at which a region of
    ``region_hw`` full-size pixels still has at least ``output_hw`` pixels (height, width)."""
    for f in FACTORS:
        if f <= max_factor and region_hw[0] >= f * output_hw[0] and region_hw[1] >= f * output_hw[1]:
            return f
    return 1


def scale_box(box: Sequence[int], factor: int, width: int, height: int) -> tuple[int, int, int, int]:
    """``(x1, y1, x2, y2)`` in full-size pixels -> the same box in an image decoded at 1/``factor``
    of ``width`` x ``height`` pixels (rounded to whole pixels, at least one pixel, inside the image)."""
    if factor == 1:
        return tuple(int(v) for v in box)  # type: ignore[return-value]
    x1, y1, x2, y2 = box
    x1, y1 = min(round(x1 / factor), width - 1), min(round(y1 / factor), height - 1)
    x2 = min(max(round(x2 / factor), x1 + 1), width)
    y2 = min(max(round(y2 / factor), y1 + 1), height)
    return x1, y1, x2, y2


def _fail(path: str | os.PathLike, e: BaseException) -> DataError:
    if isinstance(e, FileNotFoundError):
        return DataError(f"{path}: the image disappeared since the folder was scanned; scan again")
    return DataError(f"{path}: {image_reason(e)}: {SKIP_HINT}")


# the start-of-frame markers of every JPEG coding (baseline, extended, progressive, lossless;
# Huffman or arithmetic): the frame header holds precision, height, width and components
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def jpeg_frame(data: np.ndarray | bytes) -> tuple[int, int, int] | None:
    """``(width, height, components)`` of an 8-bit JPEG from its frame header, read from the file's
    bytes (the markers before it skipped by their lengths), or None where the bytes are not such a
    JPEG or the header is not where the format puts it (then PIL reads the file)."""
    mv = memoryview(data)
    n = len(mv)
    if n < 4 or mv[0] != 0xFF or mv[1] != 0xD8:
        return None
    i = 2
    while i + 4 <= n:
        if mv[i] != 0xFF:
            return None
        marker = mv[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # the end, or a scan before any frame header
            return None
        length = (mv[i + 2] << 8) | mv[i + 3]
        if marker in _SOF:
            if length < 8 or i + 10 > n or mv[i + 4] != 8:
                return None
            height, width = (mv[i + 5] << 8) | mv[i + 6], (mv[i + 7] << 8) | mv[i + 8]
            return (width, height, mv[i + 9]) if width and height else None
        if length < 2:
            return None
        i += 2 + length
    return None


def _opencv_jpeg(data: np.ndarray, factor: int, width: int, height: int) -> np.ndarray | None:
    """A colour JPEG's bytes decoded by OpenCV's libjpeg-turbo at 1/``factor``, or None where PIL must
    decode it: a file that does not end in the JPEG end marker (truncated: OpenCV would fill the
    missing rows with grey and only warn, where PIL raises), or one OpenCV does not decode to the
    expected size."""
    if data.size < 4 or bytes(data[-2:]) != b"\xff\xd9":
        return None
    colour = cv2.IMREAD_COLOR if _CV2_RGB is None else _CV2_RGB
    arr = cv2.imdecode(data, _CV2_FLAGS[factor] | colour | cv2.IMREAD_IGNORE_ORIENTATION)
    if arr is not None and _CV2_RGB is None and arr.ndim == 3:
        arr = cv2.cvtColor(arr, cv2.COLOR_BGR2RGB)
    want = (-(-height // factor), -(-width // factor), 3)
    return arr if arr is not None and arr.shape == want else None


def _factor(choose: Callable[[int, int], int] | None, width: int, height: int) -> int:
    if choose is None:
        return 1
    wanted = int(choose(width, height))
    if wanted not in FACTORS:
        raise ConfigError(f"decode factor {wanted}: choose one of {FACTORS}")
    return wanted


def read_image(path: str | os.PathLike, choose: Callable[[int, int], int] | None = None,
               decoder: str = "pil", *, data: bytes | None = None) -> tuple[np.ndarray, int]:
    """Decode ``path`` to an (H, W, 3) uint8 RGB array, at 1/f of its size for a JPEG where
    ``choose(width, height)`` (called with the full size from the header, before any pixel is
    decoded) returns f in 1, 2, 4, 8; returns (array, the factor used: 1 for every other format).

    ``decoder``: ``"pil"`` (PIL's libjpeg-turbo) or ``"opencv"`` (OpenCV's, for colour JPEGs that end
    in the end marker; grey and CMYK JPEGs, files without it and every other format go through PIL).
    With PIL the array is that of :func:`~vision_attn.data.folder.load_image` at factor 1 (the same
    calls); it may be read-only (NumPy's view of PIL's bytes): transforms write into new arrays.

    ``data``: the file's bytes, read already (a member of a tar shard, :mod:`~vision_attn.data.shards`):
    they are decoded by the same calls as the file would be, and ``path`` only names them in errors."""
    if decoder not in DECODERS:
        raise ConfigError(f"decoder={decoder!r}: choose one of {', '.join(DECODERS)}")
    wanted: int | None = None  # ``choose`` draws the caller's crop: it is asked once
    raw: np.ndarray | None = None
    if decoder == "opencv":
        try:
            raw = np.fromfile(path, dtype=np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)
        except DECODE_ERRORS as e:
            raise _fail(path, e) from None
        frame = jpeg_frame(raw)
        if frame is not None and frame[2] == 3:  # a colour JPEG, sized from its frame header
            wanted = _factor(choose, frame[0], frame[1])
            arr = _opencv_jpeg(raw, wanted, frame[0], frame[1])
            if arr is not None:
                return arr, wanted
    try:
        img = Image.open(path if data is None else io.BytesIO(data))  # the header only
    except DECODE_ERRORS as e:
        raise _fail(path, e) from None
    try:
        factor = 1
        if wanted is None:
            wanted = _factor(choose, *img.size)
            if raw is not None and img.format == "JPEG" and img.mode == "RGB":  # a header jpeg_frame did not read
                arr = _opencv_jpeg(raw, wanted, *img.size)
                if arr is not None:
                    return arr, wanted
        if wanted > 1 and img.format == "JPEG":
            w, h = img.size
            result = img.draft(None, (max(1, w // wanted), max(1, h // wanted)))
            if result is not None:  # PIL picks the factor from the size asked: read it back
                factor = round(w / result[1][2])
        try:
            img.load()  # decode now: a truncated file fails here, not later
            if img.mode in _HIGH_BIT:
                arr = np.asarray(img, dtype=np.float64)
                img = Image.fromarray((arr * (255.0 / max(arr.max(), 1.0))).astype(np.uint8))
            rgb = img if img.mode == "RGB" else img.convert("RGB")
            return np.asarray(rgb), factor
        except DECODE_ERRORS as e:
            raise _fail(path, e) from None
    finally:
        img.close()
