"""The pipelines from the file (data/file_transforms.py, data/decode.py): the crop drawn on the header's
size, a JPEG decoded at reduced size where the crop allows, the Compose's tensor bit for bit otherwise."""
import math
import random

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from vision_attn.data import ImageFolder, eval_transforms, load_image, train_transforms
from vision_attn.data.decode import jpeg_frame, read_image, reduction, scale_box
from vision_attn.data.file_transforms import EvalFileTransform, TrainFileTransform
from vision_attn.errors import ConfigError
from vision_attn.data.sampler import EpochItems
from vision_attn.errors import DataError


def _photo(scale: int = 1) -> np.ndarray:
    """scikit-learn's china.jpg (427x640), upscaled ``scale`` times (bicubic)."""
    from sklearn.datasets import load_sample_image

    img = load_sample_image("china.jpg")
    if scale > 1:
        img = cv2.resize(img, (img.shape[1] * scale, img.shape[0] * scale), interpolation=cv2.INTER_CUBIC)
    return img


def _save(path, array, **kw) -> str:
    Image.fromarray(array).save(path, **kw)
    return str(path)


def _reseed(t, seed: int) -> None:
    t.set_random_state(np.random.default_rng(seed), random.Random(seed))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 500x375 JPEG (q90), a 1280x960 JPEG (upscaled photo), grey and CMYK JPEGs, a PNG, a 16-bit
    PNG, a BMP and a WebP."""
    d = tmp_path_factory.mktemp("imgs")
    photo, big = _photo(), _photo(3)  # 427x640, 1281x1920
    out = {
        "jpeg": _save(d / "a.jpg", photo[20:395, 40:540], quality=90),
        "big": _save(d / "big.jpg", big[:960, :1280], quality=90),
        "smooth": _save(d / "smooth.jpg", cv2.GaussianBlur(big[:960, :1280], (0, 0), 4), quality=90),
        "grey": _save(d / "grey.jpg", cv2.cvtColor(big[:800, :1000], cv2.COLOR_RGB2GRAY), quality=90),
        "png": _save(d / "a.png", photo[:300, :400]),
        "png16": _save(d / "a16.png", photo[:100, :150, 0].astype(np.uint16) * 200),
        "bmp": _save(d / "a.bmp", photo[:120, :160]),
        "webp": _save(d / "a.webp", photo[:120, :160]),
    }
    Image.fromarray(big[:800, :1000]).convert("CMYK").save(d / "cmyk.jpg", quality=90)
    out["cmyk"] = str(d / "cmyk.jpg")
    return out


def test_reduction_rule_keeps_the_crop_at_least_the_output_size():
    assert reduction((448, 448), (224, 224)) == 2
    assert reduction((447, 1000), (224, 224)) == 1  # one side short of 2x: full size
    assert reduction((1800, 1792), (224, 224)) == 8
    assert reduction((1000, 1000), (224, 224)) == 4
    assert reduction((1800, 1800), (224, 224), max_factor=2) == 2
    assert reduction((375, 500), (256, 341.3)) == 1  # an ImageNet-sized image at eval: no reduction
    assert scale_box((10, 20, 810, 620), 4, 250, 188) == (2, 5, 202, 155)
    assert scale_box((3, 5, 7, 9), 1, 10, 10) == (3, 5, 7, 9)


def test_reduced_decode_is_within_one_grey_level_of_full_decode_and_area_resize(files):
    full = load_image(files["big"])  # 960x1280
    for f in (2, 4, 8):
        reduced, used = read_image(files["big"], lambda w, h: f)
        assert used == f and reduced.shape == (math.ceil(960 / f), math.ceil(1280 / f), 3)
        h, w = 960 // f, 1280 // f
        ref = cv2.resize(full[:h * f, :w * f], (w, h), interpolation=cv2.INTER_AREA)
        mae = np.abs(reduced[:h, :w].astype(np.int16) - ref).mean()
        assert mae < 1.0, (f, mae)
    # the real photo's texture (no upscaling) at 1/2
    full = load_image(files["jpeg"])
    reduced, _ = read_image(files["jpeg"], lambda w, h: 2)
    ref = cv2.resize(full[:374, :500], (250, 187), interpolation=cv2.INTER_AREA)
    assert np.abs(reduced[:187].astype(np.int16) - ref).mean() < 1.0


@pytest.mark.parametrize("kind", ["jpeg", "png", "grey", "cmyk", "png16", "bmp", "webp", "big"])
def test_full_size_decode_gives_the_compose_tensor_bit_for_bit(files, kind):
    """Same seed, same augmentation: the crop, flip, jitter, RandAugment and erasing draws are the
    Compose's; without a reduction the tensor is the old pipeline's exactly."""
    kw = dict(rand_augment=2, random_erasing=0.5, seed=0)
    old = train_transforms(64, **kw)
    # every JPEG decoded at full size (reduce=False); the other formats are, whatever reduce says
    new = TrainFileTransform(train_transforms(64, **kw), reduce=kind not in ("jpeg", "big", "grey", "cmyk"))
    for seed in range(4):
        _reseed(old, seed)
        _reseed(new, seed)
        want = old(image=load_image(files[kind]))["image"]
        got = new.read(files[kind])
        assert got.is_contiguous() and got.dtype == torch.float32
        assert torch.equal(got, want), (kind, seed)
    ev_old, ev_new = eval_transforms(64), EvalFileTransform(eval_transforms(64), reduce=new.reduce)
    assert torch.equal(ev_new.read(files[kind]), ev_old(image=load_image(files[kind]))["image"])


def test_normalisation_table_fallback_gives_the_same_tensor(files):
    """Where (x - mean) / std in float32 would not reproduce Normalize's table, the table is used."""
    old = train_transforms(48, rand_augment=1, seed=0)
    new = TrainFileTransform(train_transforms(48, rand_augment=1, seed=0), reduce=False)
    assert new.exact
    new.exact = False
    for seed in range(3):
        _reseed(old, seed)
        _reseed(new, seed)
        assert torch.equal(new.read(files["jpeg"]), old(image=load_image(files["jpeg"]))["image"])


def test_jpeg_is_decoded_reduced_where_the_crop_allows_and_stays_close(files):
    kw = dict(hflip=0.0, color_jitter=0.0, seed=0)
    full = TrainFileTransform(train_transforms(96, **kw), reduce=False)
    fast = TrainFileTransform(train_transforms(96, **kw))
    grey = []  # mean absolute differences in grey levels (std 0.226 of 255)
    for seed in range(12):
        _reseed(full, seed)
        _reseed(fast, seed)
        # a picture with little detail finer than the output's pixels: the same box, nearly the same
        # picture (the old path's bicubic downscale of up to 10x aliases what detail there is, the
        # reduced decode averages it: on a detailed photo they differ by what aliasing adds)
        a, b = full.read(files["smooth"]), fast.read(files["smooth"])
        assert a.shape == b.shape == (3, 96, 96)
        grey.append(float((a - b).abs().mean()) * 0.226 * 255)
    assert max(grey) < 5 and np.mean(grey) < 3, grey
    assert set(fast.factors) - {1}, fast.factors  # crops of 192+ px of a 1280x960 image: 1/2 and more
    assert set(full.factors) == {1}
    # the 500x375 JPEG at 224 px: no crop is 448 px high, so nothing is reduced
    small = TrainFileTransform(train_transforms(224, seed=0))
    for seed in range(20):
        _reseed(small, seed)
        small.read(files["jpeg"])
    assert small.factors == {1: 20}
    # eval: 1280x960 -> 1/2 for a 224 crop of a 256 px resize (960 >= 2 x 256); the grey and CMYK JPEGs too
    ev = EvalFileTransform(eval_transforms(224))
    for kind in ("big", "grey", "cmyk"):
        assert ev.read(files[kind]).shape == (3, 224, 224)
    assert ev.factors == {2: 3}, ev.factors
    ref = eval_transforms(224)(image=load_image(files["smooth"]))["image"]
    assert (ev.read(files["smooth"]) - ref).abs().mean() * 0.226 * 255 < 1


def test_crop_distribution_matches_torchvision(files):
    """Scale (area fraction) and aspect ratio of 10,000 boxes against torchvision's RandomResizedCrop:
    two-sample Kolmogorov-Smirnov tests."""
    from scipy.stats import ks_2samp
    from torchvision.transforms import RandomResizedCrop

    h, w = 375, 500
    t = TrainFileTransform(train_transforms(224, seed=0))
    _reseed(t, 7)
    ours = np.array([t.draw_box(w, h) for _ in range(10_000)], dtype=np.float64)
    ow, oh = ours[:, 2] - ours[:, 0], ours[:, 3] - ours[:, 1]
    torch.manual_seed(7)
    img = torch.empty(3, h, w)
    theirs = np.array([RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(10_000)],
                      dtype=np.float64)  # (top, left, h, w)
    th, tw = theirs[:, 2], theirs[:, 3]
    assert ((ours[:, :2] >= 0) & (ours[:, 2:] <= (w, h))).all()
    assert ks_2samp(ow * oh / (w * h), tw * th / (w * h)).pvalue > 1e-3
    assert ks_2samp(np.log(ow / oh), np.log(tw / th)).pvalue > 1e-3
    assert ks_2samp(ours[:, 0] / (w - ow + 1), theirs[:, 1] / (w - tw + 1)).pvalue > 1e-3  # where the box lies
    # the test can tell another distribution apart
    narrow = TrainFileTransform(train_transforms(224, scale=(0.2, 1.0), seed=0))
    nb = np.array([narrow.draw_box(w, h) for _ in range(10_000)], dtype=np.float64)
    assert ks_2samp((nb[:, 2] - nb[:, 0]) * (nb[:, 3] - nb[:, 1]) / (w * h), tw * th / (w * h)).pvalue < 1e-6


def test_truncated_jpeg_is_named_as_before(files, tmp_path):
    data = open(files["big"], "rb").read()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as old:
        load_image(cut)
    for reduce, decoder in ((True, "opencv"), (False, "opencv"), (True, "pil"), (False, "pil")):
        with pytest.raises(DataError) as new:
            TrainFileTransform(train_transforms(64, seed=0), reduce=reduce, decoder=decoder).read(cut)
        assert str(new.value) == str(old.value) and "truncated" in str(new.value) and str(cut) in str(new.value)
    text = tmp_path / "text.jpg"
    text.write_text("not a jpeg")
    with pytest.raises(DataError, match="not an image"):
        EvalFileTransform(eval_transforms(64)).read(text)


def test_items_repeat_by_seed_through_image_folder(files):
    ds = ImageFolder([(files["big"], 0), (files["jpeg"], 1)], ["a", "b"],
                     TrainFileTransform(train_transforms(64, rand_augment=2, seed=0)))
    items = EpochItems(ds, seed=5)
    a, b, c = items[(0, 0)][0], items[(0, 0)][0], items[(0, 1)][0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert ds.transform(image=load_image(files["png"]))["image"].shape == (3, 64, 64)  # the Compose's interface


def test_demo_first_batches_are_those_of_the_old_pipeline():
    """demo:digits (PNG): the data module's first training and validation batches, normalised where
    the training device gets them (data.normalize: device), equal those that ImageFolder + the Compose
    on load_image's arrays give (so `make demo` trains on the same inputs)."""
    from vision_attn.data.loader import make_loader
    from vision_attn.tasks.classify.data import ClassificationDataModule

    dm = ClassificationDataModule(root="demo:digits", img_size=16, batch_size=32, scale=(0.6, 1.0),
                                  ratio=(0.8, 1.25), hflip=0.0, color_jitter=0.0, crop_pct=1.0, num_workers=0,
                                  seed=0)
    dm.setup("fit")
    assert isinstance(dm.train_set.transform, TrainFileTransform)
    splits = dm.scan()
    old_train = ImageFolder(splits.train, splits.classes,
                            train_transforms(16, scale=(0.6, 1.0), ratio=(0.8, 1.25), hflip=0.0, color_jitter=0.0,
                                             seed=0))
    old_val = ImageFolder(splits.val, splits.classes, eval_transforms(16, crop_pct=1.0))
    for new_set, old_set, train in ((dm.train_set, old_train, True), (dm.val_set, old_val, False)):
        batches = []
        for ds in (new_set, old_set):
            loader = make_loader(ds, 32, train=train, num_workers=0, persistent_workers=False, pin_memory=False,
                                 drop_last=True, seed=0)
            x, y = next(iter(loader))
            batches.append(dm.on_after_batch_transfer((x, y), 0))  # the new set's uint8, the old one's float32
        assert batches[0][0].dtype == batches[1][0].dtype == torch.float32
        assert torch.equal(batches[0][0], batches[1][0]) and torch.equal(batches[0][1], batches[1][1])


@pytest.mark.parametrize("kind", ["jpeg", "big", "grey", "cmyk", "png"])
def test_opencv_decoder_gives_pils_pixels(files, kind, tmp_path):
    """The OpenCV decoder (the same libjpeg-turbo) gives PIL's arrays at every factor; what it does
    not decode (grey, CMYK, other formats, a file with bytes after its end marker) goes through PIL."""
    for f in (1, 2, 4, 8):
        a, fa = read_image(files[kind], lambda w, h: f)
        b, fb = read_image(files[kind], lambda w, h: f, "opencv")
        assert fa == fb and np.array_equal(a, b), (kind, f)
    padded = tmp_path / "padded.jpg"
    padded.write_bytes(open(files[kind], "rb").read() + b"trailing bytes")
    assert np.array_equal(read_image(padded, decoder="opencv")[0], load_image(files[kind]))
    with pytest.raises(ConfigError, match="decoder"):
        read_image(files[kind], decoder="turbo")


def test_opencv_decoder_names_a_truncated_jpeg_as_pil_does(files, tmp_path):
    data = open(files["big"], "rb").read()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) * 3 // 4])  # OpenCV alone would return grey rows and a warning
    with pytest.raises(DataError) as old:
        load_image(cut)
    with pytest.raises(DataError) as new:
        TrainFileTransform(train_transforms(64, seed=0), decoder="opencv").read(cut)
    assert str(new.value) == str(old.value) and "truncated" in str(new.value)


def test_opencv_before_4_10_decodes_bgr_and_swaps(files, monkeypatch):
    import vision_attn.data.decode as decode

    monkeypatch.setattr(decode, "_CV2_RGB", None)  # no IMREAD_COLOR_RGB: BGR, then a channel swap
    for f in (1, 2):
        assert np.array_equal(read_image(files["big"], lambda w, h: f, "opencv")[0],
                              read_image(files["big"], lambda w, h: f, "pil")[0])


def test_jpeg_frame_reads_the_size_pil_reads(files, tmp_path):
    """The OpenCV path sizes a JPEG from its frame header without PIL: the size and components PIL
    reads for baseline, progressive, EXIF-tagged, grey and CMYK files, and for one whose markers are
    preceded by fill bytes; None for what is not a JPEG it can read (PIL then opens it)."""
    photo = _photo()[:300, :400]
    exif = Image.Exif()
    exif[0x0112] = 6  # an orientation tag: an APP1 segment before the frame header (not applied)
    extra = {"progressive": _save(tmp_path / "p.jpg", photo, quality=80, progressive=True),
             "exif": _save(tmp_path / "e.jpg", photo, quality=80, exif=exif.tobytes())}
    data = open(files["jpeg"], "rb").read()
    (tmp_path / "fill.jpg").write_bytes(data[:2] + b"\xff\xff" + data[2:])  # fill bytes before a marker
    extra["fill"] = str(tmp_path / "fill.jpg")
    for kind, path in {**{k: files[k] for k in ("jpeg", "big", "grey", "cmyk")}, **extra}.items():
        with Image.open(path) as img:
            want = (*img.size, len(img.getbands()))
        assert jpeg_frame(open(path, "rb").read()) == want, kind
    assert np.array_equal(read_image(extra["fill"], decoder="opencv")[0], load_image(files["jpeg"]))
    for path in (files["png"], files["webp"]):
        assert jpeg_frame(open(path, "rb").read()) is None
    assert jpeg_frame(data[:40]) is None and jpeg_frame(b"\xff\xd8") is None  # cut before the frame header


def test_the_crop_is_drawn_once_when_pil_decodes_after_all(files, tmp_path):
    """A colour JPEG that OpenCV does not decode (no end marker) goes to PIL with the factor already
    chosen: ``choose`` (the caller's crop draw) is asked once."""
    data = open(files["big"], "rb").read()
    padded = tmp_path / "padded.jpg"
    padded.write_bytes(data + b"trailing bytes")
    calls = []

    def choose(w, h):
        calls.append((w, h))
        return 2

    arr, factor = read_image(padded, choose, "opencv")
    assert calls == [(1280, 960)] and factor == 2 and arr.shape == (480, 640, 3)
    assert np.array_equal(arr, read_image(files["big"], lambda w, h: 2, "pil")[0])
