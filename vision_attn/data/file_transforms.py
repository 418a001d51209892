"""The classification pipelines of :mod:`~vision_attn.data.transforms` run from the file: path -> tensor.

:class:`TrainFileTransform` wraps the albumentations ``Compose`` that ``train_transforms`` builds and
runs the same transform objects on the same random generators, in the same order, with two changes
of *where* the work happens:

1. the random resized crop's box is drawn on the full-size coordinates read from the file's header,
   before a pixel is decoded (the draws are those the ``Compose`` makes: the same seed gives the same
   box); a JPEG is then decoded at the largest DCT reduction (1/2, 1/4, 1/8) at which the box still
   has at least the output's pixels (:func:`~vision_attn.data.decode.reduction`), the box is scaled to
   the reduced image, cut and resized as before;
2. the image stays uint8 through every augmentation; the last step writes the normalised float32
   values straight into a contiguous (3, H, W) tensor (the loader's collation then copies it without
   a transpose): ``(x - mean) * (1 / std)`` in float32 (:class:`~vision_attn.data.normalize.PixelNormalize`),
   checked once to give exactly the values of the ``Normalize`` transform's own look-up table for
   0..255 (else that table is used). With ``normalize_on="device"`` the last step is the contiguous
   (3, H, W) uint8 image itself, a quarter of the bytes through the loader, normalised by
   :attr:`FileTransform.pixels` where the batch is (the classification data module: on the training
   device), to the same values; where that normalisation is not exact (the table is used) or the
   pipeline does not end in a uint8 (H, W, 3) image, the float32 tensor as above.

A file that is decoded at full size (every PNG, BMP, WebP ...; a JPEG whose crop is less than twice
the output) gives exactly the tensor the ``Compose`` gives for :func:`~vision_attn.data.folder.load_image`'s
array, bit for bit. :class:`EvalFileTransform` does the same for ``eval_transforms`` (resize so that
the centre crop keeps ``crop_pct``, centre crop): the reduction is chosen from the resize's target.
``read(path, data)`` takes the file's bytes where they are read already (a tar shard's member): the
same decode, the same tensor. Both keep the ``Compose``'s interface: ``transform(image=array)`` runs the ``Compose`` itself, and
``set_random_state`` / ``set_random_seed`` (what :class:`~vision_attn.data.sampler.EpochItems` and
:func:`~vision_attn.data.loader.seed_worker` call) reseed it.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network check on import

import albumentations as A  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from albumentations.pytorch import ToTensorV2  # noqa: E402

from vision_attn.data.decode import DECODERS, read_image, reduction, scale_box  # noqa: E402
from vision_attn.data.normalize import NORMALIZE_ON, PixelNormalize  # noqa: E402
from vision_attn.errors import ConfigError  # noqa: E402

__all__ = ["FileTransform", "TrainFileTransform", "EvalFileTransform", "DEFAULT_DECODER"]

# OpenCV's libjpeg-turbo gives PIL's pixels (tests/data/test_fast_decode.py) straight into a NumPy
# array, without PIL's copy through tobytes: measured in docs/benchmarks.md, "Classification pipelines
# from the file"
DEFAULT_DECODER = "opencv"


class FileTransform(ABC):
    """An albumentations ``Compose`` ending in ``Normalize`` + ``ToTensorV2``, run from a file by
    :meth:`read` (``ImageFolder`` calls it); ``reduce=False``: always decode at full size;
    ``decoder``: the JPEG decoder (:func:`~vision_attn.data.decode.read_image`); ``normalize_on``:
    ``"loader"``: :meth:`read` returns the normalised float32 image, ``"device"``: the uint8 image
    where :attr:`pixels` normalises it exactly (see the module)."""

    def __init__(self, compose: A.Compose, *, reduce: bool = True, decoder: str = DEFAULT_DECODER,
                 normalize_on: str = "loader") -> None:
        if decoder not in DECODERS:
            raise ConfigError(f"decoder={decoder!r}: choose one of {', '.join(DECODERS)}")
        if normalize_on not in NORMALIZE_ON:
            raise ConfigError(f"normalize_on={normalize_on!r}: choose one of {', '.join(NORMALIZE_ON)}")
        self.decoder, self.normalize_on = decoder, normalize_on
        ops = list(compose.transforms)
        if len(ops) < 3 or not isinstance(ops[-1], ToTensorV2) or not isinstance(ops[-2], A.Normalize):
            raise ConfigError("a FileTransform wraps a pipeline of vision_attn.data.transforms "
                             "(first step, ..., Normalize, ToTensorV2)")
        self.compose, self.reduce = compose, bool(reduce)
        self.first, self.middle, self.normalize = ops[0], ops[1:-2], ops[-2]
        # the values Normalize maps 0..255 to, per channel, and the two float32 steps that give them
        probe = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)  # (1, 256, 3)
        table = torch.from_numpy(np.asarray(self.normalize.apply(probe), dtype=np.float32)[0].T.copy())  # (3, 256)
        self.table = table
        self.pixels = PixelNormalize.of(self.normalize)
        grey = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256)
        self.exact = bool(torch.equal(self.pixels(grey)[:, 0], table))  # else: the table itself
        self.factors: dict[int, int] = {}  # decodes by factor (what the benchmark reports)

    # -------------------------------------------------------- the Compose's interface
    def __call__(self, **data: Any) -> dict[str, Any]:
        return self.compose(**data)

    def set_random_state(self, random_generator: np.random.Generator, py_random: Any) -> None:
        self.compose.set_random_state(random_generator, py_random)

    def set_random_seed(self, seed: int | None) -> None:
        self.compose.set_random_seed(seed)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(reduce={self.reduce}, decoder={self.decoder!r}, "
                f"normalize_on={self.normalize_on!r}, {self.compose!r})")

    # -------------------------------------------------------- from the file
    @abstractmethod
    def read(self, path: str | os.PathLike, data: bytes | None = None) -> torch.Tensor:
        """The (3, H, W) float32 tensor of the image at ``path`` (uint8 under ``normalize_on="device"``,
        see the module); ``data``: the file's bytes, read already (a shard's member: ``path`` then
        names it in errors), decoded as the file would be."""

    def _start(self) -> None:
        # Compose.__call__ draws once for its own p before its first transform: so do we
        if not self.compose.py_random.random() < self.compose.p:
            raise ConfigError("a FileTransform needs a Compose that always applies (p=1)")

    def _finish(self, image: np.ndarray, factor: int) -> torch.Tensor:
        self.factors[factor] = self.factors.get(factor, 0) + 1
        data = {"image": image}
        for t in self.middle:
            data = t(**data)
        image = data["image"]
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:  # not what the tables map
            return torch.from_numpy(np.ascontiguousarray(self.normalize.apply(image).transpose(2, 0, 1)))
        if self.exact:
            # (H, W, 3) -> (3, H, W) by OpenCV's split into the planes of one tensor: a tenth of the
            # time of a strided copy (permute + contiguous)
            chw = torch.empty((3, image.shape[0], image.shape[1]), dtype=torch.uint8)
            planes = chw.numpy()
            cv2.split(np.ascontiguousarray(image), [planes[0], planes[1], planes[2]])
            if self.normalize_on == "device":  # normalised by self.pixels where the batch goes
                return chw
            # (x - mean) * (1 / std) in float32: the table's values, two passes of SIMD
            return self.pixels.apply_(chw.to(torch.float32))
        hwc = torch.from_numpy(image)  # the table's look-ups
        out = torch.empty((3, image.shape[0], image.shape[1]), dtype=torch.float32)
        for c in range(3):
            torch.index_select(self.table[c], 0, hwc[:, :, c].reshape(-1).long(), out=out[c].view(-1))
        return out


class TrainFileTransform(FileTransform):
    """``train_transforms``'s pipeline from the file: the crop drawn on the header's size, the JPEG
    decoded at the largest reduction that keeps the crop at least the output size (see the module)."""

    def __init__(self, compose: A.Compose, *, reduce: bool = True, decoder: str = DEFAULT_DECODER,
                 normalize_on: str = "loader") -> None:
        super().__init__(compose, reduce=reduce, decoder=decoder, normalize_on=normalize_on)
        if not isinstance(self.first, A.RandomResizedCrop) or self.first.p != 1:
            raise ConfigError("a TrainFileTransform wraps train_transforms' pipeline (RandomResizedCrop first)")

    def draw_box(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The crop ``(x1, y1, x2, y2)`` of a ``width`` x ``height`` image: the draws the Compose's
        ``RandomResizedCrop`` makes for an image of that size, from its generators."""
        params = self.first.get_params()
        params["shape"] = (height, width, 3)
        return tuple(self.first.get_params_dependent_on_data(params, {})["crop_coords"])  # type: ignore[return-value]

    def read(self, path: str | os.PathLike, data: bytes | None = None) -> torch.Tensor:
        self._start()
        box: list[tuple[int, int, int, int]] = []

        def choose(width: int, height: int) -> int:
            box.append(self.draw_box(width, height))
            x1, y1, x2, y2 = box[0]
            return reduction((y2 - y1, x2 - x1), self.first.size) if self.reduce else 1

        image, factor = read_image(path, choose, self.decoder, data=data)
        coords = scale_box(box[0], factor, image.shape[1], image.shape[0])
        return self._finish(self.first.apply(image, crop_coords=coords), factor)


class EvalFileTransform(FileTransform):
    """``eval_transforms``'s pipeline from the file: a JPEG decoded at the largest reduction whose
    image is still at least the size the resize makes of it (see the module)."""

    def __init__(self, compose: A.Compose, *, reduce: bool = True, decoder: str = DEFAULT_DECODER,
                 normalize_on: str = "loader") -> None:
        super().__init__(compose, reduce=reduce, decoder=decoder, normalize_on=normalize_on)
        if not isinstance(self.first, (A.SmallestMaxSize, A.Resize)):
            raise ConfigError("an EvalFileTransform wraps eval_transforms' pipeline (a resize first)")

    def _target(self, width: int, height: int) -> tuple[float, float]:
        if isinstance(self.first, A.Resize):
            return self.first.height, self.first.width
        side = self.first.max_size
        side = max(side) if isinstance(side, (list, tuple)) else side
        scale = side / min(width, height)
        return height * scale, width * scale

    def read(self, path: str | os.PathLike, data: bytes | None = None) -> torch.Tensor:
        self._start()

        def choose(width: int, height: int) -> int:
            return reduction((height, width), self._target(width, height)) if self.reduce else 1

        image, factor = read_image(path, choose, self.decoder, data=data)
        image = self.first(image=image)["image"]
        return self._finish(image, factor)
