"""ultralytics 8.4.190's detection YAMLs, read from the installed test-only peer (never copied here),
and the ways to compare a model of ours with the peer's on the same YAML."""
from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path

import torch
import yaml

from tests.peers import import_ultralytics

ultralytics_tasks = import_ultralytics()
PEER_MODELS = Path(ultralytics_tasks.__file__).resolve().parents[1] / "cfg" / "models"
HEADS = ("Detect", "v10Detect")
SEGMENT_HEADS = ("Segment", "Segment26")
POSE_HEADS = ("Pose", "Pose26")
OBB_HEADS = ("OBB", "OBB26")


def peer_yaml(rel: str) -> Path:
    """A YAML of the peer by its path under cfg/models, e.g. ``26/yolo26.yaml``."""
    return PEER_MODELS / rel


def detection_pairs(heads: tuple[str, ...] = HEADS) -> list[tuple[str, str | None]]:
    """(path under cfg/models, scale) for every YAML whose last row is one of ``heads`` (default: a Detect
    or v10Detect head; :data:`SEGMENT_HEADS` for the -seg YAMLs, :data:`POSE_HEADS` and :data:`OBB_HEADS`
    for the -pose and -obb ones) and every scale it defines (None for a
    file without ``scales``)."""
    pairs = []
    for f in sorted(PEER_MODELS.rglob("*.yaml")):
        data = yaml.safe_load(f.read_text())
        rows = data.get("head") or []
        if rows and rows[-1][2] in heads:
            pairs += [(f.relative_to(PEER_MODELS).as_posix(), s) for s in (data.get("scales") or [None])]
    return pairs


def peer_dict(rel: str, scale: str | None) -> dict:
    data = yaml.safe_load(peer_yaml(rel).read_text())
    if scale:
        data["scale"] = scale
    return data


def peer_layers(rel: str, scale: str | None) -> torch.nn.Module:
    """The peer's rows as built by its own parser (no probe forward, so it works on the meta device)."""
    with contextlib.redirect_stdout(io.StringIO()):
        layers, _ = ultralytics_tasks.parse_model(copy.deepcopy(peer_dict(rel, scale)), ch=3, verbose=False)
    return torch.nn.ModuleDict({"model": layers})


def peer_model(rel: str, scale: str | None, model_class: str = "DetectionModel") -> torch.nn.Module:
    """The peer's DetectionModel (or ``model_class``, e.g. SegmentationModel) in eval mode, with random
    weights and batch-norm statistics (so every tensor matters when the outputs are compared)."""
    peer = getattr(ultralytics_tasks, model_class)(peer_dict(rel, scale), verbose=False).eval()
    with torch.no_grad():
        for key, value in peer.state_dict().items():
            if value.is_floating_point() and "dfl" not in key:
                high = "running_var" in key or "bn.weight" in key or "gamma" in key
                value.copy_(torch.rand_like(value) * 0.2 + (0.9 if high else -0.1))
    return peer


def peer_decoded(peer: torch.nn.Module, x: torch.Tensor, branch: str | None = None) -> torch.Tensor:
    """The peer's decoded (B, 4 + nc, A) output, boxes cx, cy, w, h; ``branch`` one2many / one2one for
    an end-to-end head (decoded by the head's own ``_inference``). A head without DFL (reg_max 1, YOLO26)
    is decoded from its distances clamped at zero, as ours decodes them (ultralytics lets a negative
    distance make an inverted box)."""
    with torch.no_grad():
        decoded, raw = peer(x)
    if branch is None:
        return decoded
    head, maps = peer.model[-1], raw[branch]
    if head.reg_max == 1:
        maps = dict(maps, boxes=maps["boxes"].clamp(min=0))
    return head._inference(maps)
