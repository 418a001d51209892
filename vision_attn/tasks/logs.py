"""The run's CSV and TensorBoard logs, continued across a resume.

Lightning's CSV logger deletes ``metrics.csv`` when it starts, and appending to it after a resume
fails as soon as the resumed run logs a column the file's header lacks (``ValueError: dict contains
fields not in fieldnames``). :class:`ContinuedCSVLogger` keeps the rows logged before the step the
run resumes from (rows at later steps were logged after the checkpoint was taken: the resumed run
logs them again), keeps the header, and adds new columns as Lightning's writer does (the file is
rewritten with the wider header). The TensorBoard writer starts with ``purge_step`` at that step, so
TensorBoard drops the earlier events from that step on. Each step is then logged once.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment

from vision_attn.io.atomic import write_text

__all__ = ["ContinuedCSVLogger", "run_loggers"]


class _ContinuedWriter(ExperimentWriter):
    def __init__(self, log_dir: str, resume_step: int | None) -> None:
        self.resume_step = resume_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if self.resume_step is None or not path.is_file():
            return super()._check_log_dir_exists()
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") not in (None, "") and int(float(r["step"])) < self.resume_step]
        out = io.StringIO(newline="")
        writer = csv.DictWriter(out, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
        write_text(path, out.getvalue())
        self.metrics_keys = header


class ContinuedCSVLogger(CSVLogger):
    """Lightning's CSV logger; with ``resume_step`` it continues the file of a resumed run."""

    def __init__(self, save_dir: str | Path, *, resume_step: int | None = None, **kwargs) -> None:
        super().__init__(save_dir, **kwargs)
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuedWriter(self.log_dir, self.resume_step)
        return self._experiment


def run_loggers(run_dir: Path, resume_step: int | None) -> list:
    """``csv/metrics.csv`` and ``tensorboard/`` of a run folder, continued from ``resume_step``."""
    # a resume's own event file: the writer names files by the second it starts in, so a resume within the
    # second of the stop would otherwise write over the file of the steps before it
    tb_kwargs = {} if resume_step is None else {"purge_step": resume_step, "filename_suffix": f".from{resume_step}"}
    return [ContinuedCSVLogger(run_dir, name="csv", version="", resume_step=resume_step),
            TensorBoardLogger(run_dir, name="tensorboard", version="", default_hp_metric=False, **tb_kwargs)]
