"""A model YAML named by a training config: a path, a shipped name (``yolov8n.yaml``, ``yolov8-seg.yaml``)
or the YAML text itself, read within the detector-YAML bounds (:data:`vision_attn.io.yaml.DETECTOR_LIMITS`)
before anything is built."""
from __future__ import annotations

from vision_attn.errors import ConfigError
from vision_attn.io.resources import resolve_path
from vision_attn.io.yaml import DETECTOR_LIMITS, check_yaml, read_yaml_text

__all__ = ["read_model_yaml"]


def read_model_yaml(yaml: str, *, what: str = "detector YAML", example: str = "yolov8n.yaml") -> str:
    """The checked text of the model YAML ``yaml`` (a path, a shipped name, or YAML text: it has a line
    break); ConfigError naming ``model.yaml`` and an ``example`` when there is no such file."""
    if "\n" in yaml:
        check_yaml(yaml, "<yaml text>", DETECTOR_LIMITS)
        return yaml
    path = resolve_path(yaml, kinds=("model",))
    if path is None or not path.is_file():
        raise ConfigError(f"model.yaml={yaml!r}: no such file (looked beside the config, in the working directory "
                          f"and among the shipped model YAMLs: `vision-attn configs`); give a {what} such as "
                          f"{example}")
    text = read_yaml_text(path, DETECTOR_LIMITS, what=what)
    check_yaml(text, str(path), DETECTOR_LIMITS)
    return text
