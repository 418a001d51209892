"""Editing a detector YAML together with its checkpoint: what ``vision-attn yaml insert|remove`` does.

:func:`edit_detector_yaml` resolves the YAML (a file, a shipped name, or the model an ultralytics
``.pt`` carries), inserts or removes attention rows (every ``from`` re-indexed, comments kept), and,
given a checkpoint, carries its weights to the edited rows: a plain state dict comes out as a state
dict, an ultralytics ``.pt`` as a detection checkpoint (:func:`vision_attn.tasks.detect.run.detector_checkpoint`:
the edited YAML, the class names, every tensor of the edited model). Both the input and the edited
YAML must build at every scale before anything is written; each file is written atomically.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from vision_attn.analysis.yaml_info import compare_yaml
from vision_attn.errors import ConfigError
from vision_attn.io.atomic import save_torch, write_text
from vision_attn.models.yolo import check_builds, insert_attention_text, remove_attention_text, scale_from_name
from vision_attn.models.yolo.from_ultralytics import YamlSource
from vision_attn.models.yolo.transfer import TransferredWeights, transfer_weights
from vision_attn.tasks.detect.run import detector_checkpoint

__all__ = ["DetectorYamlEdit", "edit_detector_yaml"]


@dataclass
class DetectorYamlEdit:
    """What :func:`edit_detector_yaml` did: the ``action`` (``insert``/``remove``) and ``block``; the
    ``source`` label and the ``before`` text of the YAML edited; the edited ``text``; the rows
    ``inserted`` (their new indices) or ``removed`` (their old ones) and ``index_map`` (old row -> new
    row); the ``output`` and ``checkpoint_out`` paths (written unless ``dry_run``); ``weights``, the
    checkpoint carried to the edited rows (its ``transferred`` and ``new_keys``, of ``total`` tensors;
    None without a checkpoint or in a dry run); in a dry run, ``comparison``: parameters and GFLOPs
    before and after at every scale (:func:`vision_attn.analysis.yaml_info.compare_yaml`)."""

    action: str
    block: str | None
    source: str
    before: str
    text: str
    inserted: list[int]
    removed: list[int]
    index_map: dict[int, int]
    output: str | None
    checkpoint_out: str | None
    dry_run: bool
    weights: TransferredWeights | None = None
    comparison: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One line: what was inserted or removed (``inserted 4 CBAM row(s) at 3, 6, 9, 12``)."""
        if self.action == "insert":
            return (f"inserted {len(self.inserted)} {self.block} row(s) at {', '.join(map(str, self.inserted))}"
                    if self.inserted else f"nothing to insert: every position is already followed by {self.block}")
        return f"removed {len(self.removed)} row(s)" if self.removed else "nothing to remove"

    @property
    def diff(self) -> str:
        """The unified diff from the YAML before to the edited one (``(no change)`` when they are equal)."""
        lines = difflib.unified_diff(self.before.splitlines(keepends=True), self.text.splitlines(keepends=True),
                                     fromfile=self.source, tofile=self.output or f"{self.source} (edited)")
        return "".join(lines) or "(no change)\n"


def _check_outputs(action: str, output: str | None, checkpoint: str | None, checkpoint_out: str | None,
                   dry_run: bool) -> None:
    """Raise a ConfigError, before anything is edited, for an output that is missing or cannot be written."""
    if dry_run:
        return
    if not output:
        raise ConfigError(f"yaml {action}: say where to write the result with -o OUT.yaml (or use --dry-run)")
    if checkpoint and not checkpoint_out:
        raise ConfigError(f"{checkpoint}: an edit of a checkpoint's model needs --checkpoint-out NEW.pt, where to "
                          "save the remapped state dict")
    for out in (output, checkpoint_out):
        if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise ConfigError(f"{out}: the folder {os.path.dirname(os.path.abspath(out))} does not exist; "
                              "nothing was written")


def _path(value: str | os.PathLike | None) -> str | None:
    return os.fspath(value) if value is not None else None


def edit_detector_yaml(file: str | os.PathLike | None = None, action: str = "insert", *, block: str | None = None,
                       after: str | None = None, at: Sequence[int] | None = None, section: str = "backbone",
                       block_args: Mapping[str, Any] | None = None, output: str | os.PathLike | None = None,
                       checkpoint: str | os.PathLike | None = None, checkpoint_out: str | os.PathLike | None = None,
                       scale: str | None = None, identity_init: bool = True, dry_run: bool = False,
                       img_size: int = 640) -> DetectorYamlEdit:
    """Insert (``action="insert"``) or remove (``"remove"``) attention rows of a detector YAML, carry a
    checkpoint's weights to the edited rows, and write the edited YAML to ``output`` and the weights to
    ``checkpoint_out``.

    ``file``: a detector YAML (a path or a shipped name such as ``yolov8n.yaml``, whose name may give
    the scale) or an ultralytics ``.pt`` (its model YAML; it is the checkpoint too unless ``checkpoint``
    is given); without ``file``, the YAML inside ``checkpoint`` (an ultralytics ``.pt``). ``block``:
    the attention module (insert: required; remove: default every attention block); ``after`` / ``at``
    / ``section``: where to insert (after every row of module ``after`` in ``section``, or after the rows
    ``at``); ``block_args``: the block's keyword arguments. ``checkpoint``: a state dict of the original
    model or an ultralytics ``.pt``, remapped for the edited rows at ``scale`` (default: from the file
    name); with one, inserted rows start as the exact identity unless ``identity_init`` is False.
    ``dry_run``: edit and compare (parameters and GFLOPs at ``img_size``) but write nothing.
    ConfigError/CheckpointError, with nothing written, for a YAML that does not build before or after
    the edit, a missing output, or weights that do not fit.

    Example::

        >>> from vision_attn.tasks.detect.edit import edit_detector_yaml
        >>> edit = edit_detector_yaml("yolov8n.yaml", "insert", block="CBAM", after="C2f", output="cbam.yaml",
        ...                           checkpoint="runs/v8n/best.pt", checkpoint_out="cbam.pt")  # doctest: +SKIP
        >>> edit.summary, len(edit.weights.transferred), edit.weights.new_keys[:1]  # doctest: +SKIP
        ('inserted 4 CBAM row(s) at 3, 6, 9, 12', 355, ['model.3.scale'])
    """
    if action not in ("insert", "remove"):
        raise ConfigError(f"action {action!r}: use insert or remove")
    file, checkpoint = _path(file), _path(checkpoint)
    output, checkpoint_out = _path(output), _path(checkpoint_out)
    source = YamlSource.resolve(file, checkpoint)
    scale = scale or (scale_from_name(file) if isinstance(source.spec, Path) else None)
    _check_outputs(action, output, _path(source.checkpoint_path), checkpoint_out, dry_run)
    text = source.text
    check_builds(text, source.label)
    if action == "insert":
        if not block:
            raise ConfigError("yaml insert: say which block with --block, e.g. --block CBAM")
        rows_args = [dict(block_args)] if block_args is not None else None
        if source.checkpoint_path and identity_init:
            rows_args = [{**(rows_args[0] if rows_args else {}), "zero_init": True}]
        result = insert_attention_text(text, block, after=after, at=at, section=section, args=rows_args,
                                       source=source.label)
    else:
        result = remove_attention_text(text, block, source=source.label)
    check_builds(result.text, output or f"{source.label} (edited)", stage="output")
    edit = DetectorYamlEdit(action, block, source.label, text, result.text, result.inserted, result.removed,
                            result.index_map, output, checkpoint_out, dry_run)
    if dry_run:
        edit.comparison = compare_yaml(text, result.text, img_size=img_size)
        return edit

    state = source.weights()
    edit.weights = transfer_weights(state, result.text, result.index_map, scale=scale) if state is not None else None
    saved: Any = edit.weights.state if edit.weights is not None else None
    if edit.weights is not None and source.ultralytics is not None:
        # a whole detector checkpoint: the edited YAML, the class names, every tensor of the edited model
        saved = detector_checkpoint(result.text, edit.weights.state, names=source.ultralytics.names, scale=scale,
                                    img_size=source.ultralytics.img_size, source=str(source.checkpoint_path))
    write_text(output, result.text)
    if edit.weights is not None:
        save_torch(saved, checkpoint_out)
    return edit
