"""ultralytics 8.4.190's classification YAMLs (read from the installed test-only peer) built by our builder:
the same parameter count and state-dict names and shapes as ultralytics' ClassificationModel at every
scale, the same logits on its weights, the same FLOPs; and the Classify / ResNetLayer rows' rules."""
import contextlib
import io

import pytest
import torch
import yaml

from vision_attn.analysis import count_flops
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector
from vision_attn.models.yolo.classify import CLASSIFY_WIDTH, Classify
from vision_attn.models.yolo.resnet_rows import ResNetLayer

from .conftest import CONFIGS
from .peer_zoo import PEER_MODELS, import_ultralytics, peer_dict, peer_yaml, ultralytics_tasks

torch_utils = import_ultralytics("ultralytics.utils.torch_utils")
blocks = import_ultralytics("ultralytics.nn.modules.block")
heads = import_ultralytics("ultralytics.nn.modules.head")

CLS_YAMLS = ("v8/yolov8-cls.yaml", "v8/yolov8-cls-resnet50.yaml", "v8/yolov8-cls-resnet101.yaml", "11/yolo11-cls.yaml",
             "11/yolo11-cls-resnet18.yaml", "12/yolo12-cls.yaml", "26/yolo26-cls.yaml")
PAIRS = [(rel, s) for rel in CLS_YAMLS for s in yaml.safe_load(peer_yaml(rel).read_text()).get("scales") or [None]]
FIRST = [(rel, next(iter(yaml.safe_load(peer_yaml(rel).read_text()).get("scales") or [None]))) for rel in CLS_YAMLS]
"""Scale n of each YAML (the resnet ones: their first; yolo11-cls-resnet18 has none)."""
NC = 10


def test_the_peer_ships_these_cls_yamls():
    shipped = sorted(p.relative_to(PEER_MODELS).as_posix() for p in PEER_MODELS.rglob("*-cls*.yaml"))
    assert shipped == sorted(CLS_YAMLS)
    assert len(PAIRS) == 31 and [s for _, s in FIRST] == ["n"] * 4 + [None, "n", "n"]


def cls_peer_dict(rel: str, scale: str | None) -> dict:
    """The peer's YAML dict, its TorchVision row without weights (the peer would download torchvision's)."""
    data = peer_dict(rel, scale)
    for row in data["backbone"]:
        if row[2] == "TorchVision":
            row[3][2] = None
    return data


def peer_classifier(rel: str, scale: str | None) -> torch.nn.Module:
    """The peer's ClassificationModel (``NC`` classes), random weights and batch-norm statistics, eval mode."""
    with contextlib.redirect_stdout(io.StringIO()):
        peer = ultralytics_tasks.ClassificationModel(cls_peer_dict(rel, scale), nc=NC, verbose=False).eval()
    with torch.no_grad():
        for key, value in peer.state_dict().items():
            if value.is_floating_point():
                high = "running_var" in key or "bn.weight" in key
                value.copy_(torch.rand_like(value) * 0.2 + (0.9 if high else -0.1))
    return peer


@pytest.mark.parametrize("rel,scale", PAIRS, ids=[f"{r.split('/')[-1][:-5]}-{s}" for r, s in PAIRS])
def test_same_parameters_and_state_dict_as_ultralytics(rel, scale):
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        ours = build_detector(peer_yaml(rel), scale=scale, num_classes=NC)
        theirs = ultralytics_tasks.ClassificationModel(cls_peer_dict(rel, scale), nc=NC, verbose=False)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)  # shapes too (checked on meta)
    assert ours.task == "classify" and ours.stride == [] and isinstance(ours.model[-1], Classify)


@pytest.mark.parametrize("rel,scale", FIRST, ids=[r.split("/")[-1][:-5] for r in CLS_YAMLS])
def test_same_logits_on_ultralytics_weights(rel, scale):
    peer = peer_classifier(rel, scale)
    with torch.device("meta"):
        ours = build_detector(peer_yaml(rel), scale=scale, num_classes=NC)
    ours.to_empty(device="cpu").load_state_dict(peer.state_dict(), strict=True)
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        probs, logits = peer(x)  # ultralytics' eval output; ours is the logits alone
        mine = ours.eval()(x)
        assert mine.shape == (2, NC)
        torch.testing.assert_close(mine, logits, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(mine.softmax(1), probs, rtol=1e-5, atol=1e-5)
        ours.train(), peer.train()
        torch.testing.assert_close(ours(x), peer(x), rtol=1e-5, atol=1e-4)  # logits in training too


@pytest.mark.parametrize("rel,scale", FIRST, ids=[r.split("/")[-1][:-5] for r in CLS_YAMLS])
def test_flops_equal_ultralytics_fused_figure(rel, scale):
    peer = peer_classifier(rel, scale)
    params = sum(p.numel() for p in peer.parameters())
    with contextlib.redirect_stdout(io.StringIO()):
        fused = torch_utils.get_flops(peer.fuse(verbose=False), 224)
    with torch.device("meta"):
        ours = count_flops(build_detector(peer_yaml(rel), scale=scale, num_classes=NC), 224)
    # thop also counts the head's global average pooling (its additions and division: 49 + 1 per channel at
    # 224 px, 7 x 7 at stride 32), which torch's counter (ours) leaves out as it does every pooling, and the
    # batch norms ultralytics' fuse() leaves (a TorchVision row's: 4 per element, thop's rule), which ours,
    # unfused, leaves out as well
    pool_macs = CLASSIFY_WIDTH * (7 * 7 + 1)
    assert ours.flops + 2 * (pool_macs + 4 * _norm_elements(peer, 224)) == pytest.approx(fused * 1e9, rel=1e-12)
    assert ours.params == params


def _norm_elements(model: torch.nn.Module, size: int) -> int:
    """Output elements of the batch norms left in ``model`` on one (1, 3, size, size) image."""
    counts: list[int] = []
    hooks = [m.register_forward_hook(lambda m, i, o: counts.append(o.numel()))
             for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    for h in hooks:
        h.remove()
    return sum(counts)


def test_shipped_yolov8_cls_equals_the_peers():
    with torch.device("meta"):
        ours = build_detector(CONFIGS / "yolov8-cls.yaml", scale="n")
        peer = build_detector(peer_yaml("v8/yolov8-cls.yaml"), scale="n")
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters()) == 2_719_288


def test_blocks_equal_ultralytics():
    torch.manual_seed(0)
    x = torch.rand(2, 16, 16, 16)
    cases = [(ResNetLayer(16, 8, 2, False, 2), blocks.ResNetLayer(16, 8, 2, False, 2)),
             (ResNetLayer(16, 32, 1, False, 1), blocks.ResNetLayer(16, 32, 1, False, 1)),  # shortcut conv, stride 1
             (ResNetLayer(16, 8, 1, True), blocks.ResNetLayer(16, 8, 1, True)),
             (ResNetLayer(16, 8, 2, False, 2, e=2), blocks.ResNetLayer(16, 8, 2, False, 2, e=2)),
             (Classify(16, 5, 3, 2), heads.Classify(16, 5, 3, 2))]
    for ours, theirs in cases:
        assert list(ours.state_dict()) == list(theirs.state_dict())
        ours.load_state_dict(theirs.state_dict(), strict=True)
        for m in ours.modules():  # ultralytics' Conv keeps torch's batch-norm eps (as a classifier of ours does)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.eps = 1e-5
        ours.eval(), theirs.eval()
        with torch.no_grad():
            out = theirs(x)
            torch.testing.assert_close(ours(x), out[1] if isinstance(out, tuple) else out)
    assert ResNetLayer(16, 8, 1, False, 1, e=2).out_channels == 16 and ResNetLayer(3, 8, 1, True).out_channels == 8


def test_torchvision_row_checks_its_arguments():
    row = "  - [-1, 1, TorchVision, [{c}, {model}, DEFAULT, True, 2]]\nhead:\n  - [-1, 1, Classify, [nc]]\n"
    with torch.device("meta"):
        assert build_detector(f"nc: 3\nbackbone:\n{row.format(c=2048, model='resnet50')}").task == "classify"
        for c, model, message in [(256, "resnet18", "resnet18 gives 512 channels, not 256"),
                                  (512, "vgg16", "'vgg16' is not one of resnet18")]:
            with pytest.raises(ConfigError, match="row 0") as e:
                build_detector(f"nc: 3\nbackbone:\n{row.format(c=c, model=model)}")
            assert message in str(e.value)


def _text(rows: str) -> str:
    return f"nc: 4\nbackbone:\n  - [-1, 1, Conv, [16, 3, 2]]\n{rows}"


@pytest.mark.parametrize("rows,message", [
    ("  - [-1, 1, Classify, [nc]]\n  - [-1, 1, Conv, [16, 3, 2]]\nhead: []\n", "must be the last row"),
    ("head:\n  - [-1, 1, Classify, [nc, 1, 1, null, 1, 7]]\n", "takes [nc]"),
    ("head:\n  - [-1, 2, Classify, [nc]]\n", "built once"),
    ("  - [-1, 1, ResNetLayer, [8, 4, 1, False, 1]]\nhead:\n  - [-1, 1, Classify, [nc]]\n", "has 16 channels, not 8"),
    ("  - [-1, 1, ResNetLayer, [16, 4, 1, 0, 1]]\nhead:\n  - [-1, 1, Classify, [nc]]\n", "ResNetLayer takes"),
])
def test_bad_rows_are_named(rows, message):
    with pytest.raises(ConfigError, match="row") as e:
        build_detector(_text(rows))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_classifier_with_cbam_and_resnet_rows_builds_and_gives_logits():
    text = _text("  - [-1, 1, CBAM, []]\n  - [-1, 1, ResNetLayer, [16, 4, 2, False, 2]]\nhead:\n"
                 "  - [-1, 1, Classify, [nc]]\n")
    model = build_detector(text)
    assert model.info[2]["channels"] == 16 and model.task == "classify"
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 4) and model.eval()(torch.rand(1, 3, 32, 32)).shape == (1, 4)


def test_detector_task_is_detect():
    with torch.device("meta"):
        assert build_detector(CONFIGS / "yolov8.yaml", scale="n").task == "detect"
