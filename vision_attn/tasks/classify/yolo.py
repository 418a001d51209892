"""A YOLO classifier as the network of a classification run: ``train cls --model.yaml yolov8-cls.yaml``.

The network is built from a YAML in the ultralytics schema whose last row is a ``Classify`` head
(ultralytics' -cls YAMLs, or one of ours with attention rows inserted by ``vision-attn yaml insert``),
by :func:`vision_attn.models.yolo.build_from_spec`, with the data's class count. The run records the
YAML's text itself (``hyper_parameters.yaml``) and the scale it was built at
(``hyper_parameters.yaml_scale``), so evaluation, prediction, export and resume rebuild it from the run
folder alone; its ``name`` is a label (``yolov8-cls.yaml scale n``).

A YOLO classifier sees images in [0, 1], not normalised (ultralytics' classification pipeline): mean
0, std 1, which the run's data settings record (:data:`YOLO_MEAN`, :data:`YOLO_STD`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import DetectionModel, build_from_spec, parse_spec, scale_from_name
from vision_attn.models.yolo.modules import MODULES
from vision_attn.models.yolo.files import read_model_yaml

__all__ = ["YOLO_MEAN", "YOLO_STD", "yolo_network_spec", "build_yolo_classifier", "read_classifier_yaml"]

YOLO_MEAN = (0.0, 0.0, 0.0)
YOLO_STD = (1.0, 1.0, 1.0)
"""The normalisation of a YOLO classifier's input: none (images in [0, 1])."""


def read_classifier_yaml(yaml: str) -> str:
    """The text of a classifier YAML given as a path or shipped name (or as YAML text itself), checked
    within the detector-YAML bounds."""
    return read_model_yaml(yaml, what="classifier YAML", example="yolov8-cls.yaml")


def _check_classifier(text: str, scale: str | None, source: str) -> str | None:
    """The scale the YAML builds at; ConfigError unless its last row is a classification head."""
    spec = parse_spec(text, scale=scale)
    head = spec.rows[-1]
    row = MODULES[head.module]
    if row.kind != "classify":
        what, task = (("a segmentation", "seg") if row.segment else ("a detection", "det")
                      ) if row.kind == "detect" else (f"a {head.module}-ended", "det")
        raise ConfigError(f"model.yaml={source}: {what} YAML (its last row, {head.index}, is {head.module}); "
                          f"`train cls` needs a YAML ending in a Classify row, e.g. yolov8-cls.yaml; train this "
                          f"one with `train {task}`")
    return spec.scale


def yolo_network_spec(name: str | None, yaml: str, scale: str | None, *, model_kwargs: dict[str, Any] | None,
                      attention: Any, pretrained: str | None, freeze: str) -> tuple[str, str, str | None]:
    """``(label, YAML text, scale)`` a YOLO classification run records, from ``model.yaml`` (a path,
    a shipped name such as ``yolov8n-cls.yaml``, or the text a run recorded) and ``model.scale``.

    Refused (ConfigError, one line): ``model.name`` beside ``model.yaml``, ``model_kwargs``,
    ``attention`` (insert attention rows into the YAML: ``vision-attn yaml insert``), ``pretrained``,
    ``freeze: backbone``, and a YAML whose last row is not ``Classify``."""
    given_text = "\n" in yaml
    source = "<yaml text>" if given_text else yaml
    if scale is None and not given_text:
        scale = scale_from_name(yaml)  # yolov8s-cls.yaml: scale s
    text = read_classifier_yaml(yaml)
    built_at = _check_classifier(text, scale, source)
    stem = "classifier YAML" if given_text else Path(yaml).name
    label = f"{stem} scale {built_at}" if built_at else stem
    if name is not None:
        raise ConfigError(f"model.name={name!r} and model.yaml={source!r} both given; a classifier is either a "
                          "registered model (model.name) or a YAML (model.yaml): drop one")
    for key, value in (("model_kwargs", model_kwargs), ("attention", attention), ("pretrained", pretrained)):
        if value:
            hint = ("insert attention rows into the YAML instead (`vision-attn yaml insert`)" if key == "attention"
                    else "the YAML states the whole network" if key == "model_kwargs"
                    else "a YOLO classifier trains from random weights here")
            raise ConfigError(f"model.{key} with model.yaml={source!r}: not supported; {hint}; drop model.{key}")
    if freeze != "none":
        raise ConfigError(f"model.freeze={freeze!r} with model.yaml={source!r}: not supported for a YOLO "
                          "classifier; give freeze: none")
    return label, text, built_at


def build_yolo_classifier(text: str, scale: str | None, num_classes: int) -> DetectionModel:
    """The classifier of a YAML's text at ``scale`` with ``num_classes`` classes: images (B, 3, H, W)
    in [0, 1] -> logits (B, num_classes), in training and in eval."""
    model = build_from_spec(parse_spec(text, scale=scale, num_classes=num_classes))
    if model.task != "classify":
        raise ConfigError(f"the recorded YAML builds a {model.task} model, not a classifier; train a YAML whose "
                          "last row is Classify (e.g. yolov8-cls.yaml)")
    return model
