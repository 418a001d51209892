"""Class-activation maps of trained runs (``vision-attn explain``): :func:`explain` writes one figure per
image; :func:`~.layers.target_layers` is the layer chosen per model family; :func:`~.methods.cam_map`
one map by pytorch-grad-cam."""
from vision_attn.analysis.explain.explain import (check_method, chosen_method, explain, explain_image, explained_figures,
                                                 rollout_map)
from vision_attn.analysis.explain.layers import TargetLayers, closest_names, target_layers
from vision_attn.analysis.explain.methods import CAM_METHODS, METHODS, cam_map, uses_targets

__all__ = ["explain", "explained_figures", "explain_image", "check_method", "chosen_method", "rollout_map", "TargetLayers", "target_layers", "closest_names", "CAM_METHODS",
           "METHODS", "cam_map", "uses_targets"]
