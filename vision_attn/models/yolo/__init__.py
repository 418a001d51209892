"""YOLO-style detectors from YAMLs in the ultralytics schema: safe schema check, builder, blocks."""
from vision_attn.models.yolo.backbone import Backbone, Index
from vision_attn.models.yolo.builder import DetectionModel, build_detector, build_from_spec, make_divisible
from vision_attn.models.yolo.editor import (EditResult, check_builds, insert_attention_data, insert_attention_file,
                                           insert_attention_text, remove_attention_text, remove_rows_text)
from vision_attn.models.yolo.modules import ACTIVATIONS, MODULES, ModuleSpec
from vision_attn.models.yolo.reindex import absolute_inputs, all_rows, check_topology, insert_row, remove_row
from vision_attn.models.yolo.remap import insertion_map, remap_state_dict
from vision_attn.models.yolo.schema import DetectorSpec, Row, load_yaml, parse_spec, scale_from_name

__all__ = ["Backbone", "Index", "DetectionModel", "build_detector", "build_from_spec", "make_divisible", "ACTIVATIONS", "MODULES",
           "ModuleSpec", "DetectorSpec", "Row", "load_yaml", "parse_spec", "scale_from_name", "insert_row",
           "remove_row", "check_topology", "absolute_inputs", "all_rows", "insertion_map",
           "remap_state_dict", "EditResult", "insert_attention_file", "insert_attention_text", "remove_rows_text",
           "insert_attention_data", "remove_attention_text", "check_builds"]
