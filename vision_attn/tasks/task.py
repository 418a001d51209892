"""What one task (``cls``, ``det``, ``seg``) tells the shared machinery: its LightningModule and DataModule
classes (the ``model`` and ``data`` sections of its config), the config keys that name files, how the
runner builds and finishes a run, how a trained run is loaded back, and what the commands after training
ask of it (evaluate, predict, export, ablate). The tasks are collected in
:mod:`vision_attn.tasks.registry`; ``commands/``, ``export/``, ``ablation/`` and ``analysis/`` ask the
record and never compare task names."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Task", "Metric", "Echo", "Options", "Listing", "Explain", "ExplainTarget"]

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What ``eval`` and ``predict`` were asked for; each task reads the ones it uses. ``top_k``: labels per
    image; ``conf`` / ``iou``: lowest score and NMS IoU of a detection; ``output``: the folder for drawn
    images and the predictions file; ``batch_size`` (None: the task's default); ``num_workers``."""

    top_k: int = 5
    conf: float = 0.25
    iou: float = 0.7
    output: str | None = None
    batch_size: int | None = None
    num_workers: int = 0


@dataclass(frozen=True)
class Listing:
    """A table as text: ``title``, ``columns`` (the first left-aligned, the rest right), ``rows`` of cells
    and the ``line`` printed under it (what ``eval`` prints)."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    line: str


@dataclass(frozen=True)
class ExplainTarget:
    """What one class-activation map explains: ``label`` (its caption, e.g. ``7 0.93``), ``index`` (the
    class), ``box`` (x1, y1, x2, y2 in input pixels, or None), ``score(output) -> scalar``: the number
    whose gradient a gradient method follows, read from one image's network output (no batch axis), and
    ``level``: the feature level (0: the finest) of a detector's head that the score comes from (a
    gradient method reads that level's layer alone: :meth:`~vision_attn.analysis.explain.TargetLayers.at_level`),
    or None."""

    label: str
    index: int
    score: Callable[[Any], Any]
    box: tuple[float, float, float, float] | None = None
    level: int | None = None

    def __call__(self, output: Any) -> Any:  # pytorch-grad-cam calls a target on one image's output
        return self.score(output)


@dataclass(frozen=True)
class Explain:
    """How ``vision-attn explain`` reads a run of the task.

    ``methods``: the map methods the task serves (of ``gradcam``, ``gradcam++``, ``eigencam``,
    ``layercam``, ``rollout``); ``to_input(run, image) -> (1, 3, H, W)``: an (H, W, 3) uint8 RGB image as
    the network takes it (shown denormalised by the run's mean and std); ``output(raw) -> tensor``: the
    network's eval output as a batch-first tensor the targets read (a segmenter's ``(pred, protos)`` ->
    ``pred``); ``targets(run, output, k) -> [ExplainTarget]``: up to ``k`` targets of one image's
    batched output (the top classes; the detected boxes); ``align(run, target, output) -> ExplainTarget``:
    the same target (class, box) on another run's output of the same image, for ``--vs``; ``default``:
    the method drawn when none is named (one of ``methods``)."""

    methods: tuple[str, ...]
    to_input: Callable[[Any, Any], Any]
    output: Callable[[Any], Any]
    targets: Callable[[Any, Any, int], list[ExplainTarget]]
    align: Callable[[Any, ExplainTarget, Any], ExplainTarget]
    default: str = "gradcam"


@dataclass(frozen=True)
class Metric:
    """A task's primary metric, the one its runs are ranked by: ``key`` in ``metrics.json`` (a fraction in
    [0, 1], higher is better), ``logged``: the name the module logs it under at each validation
    (``best.ckpt`` keeps the weights that maximise it), ``label``: how it is printed (``keypoint
    mAP@.5:.95``)."""

    key: str
    logged: str
    label: str


@dataclass(frozen=True)
class Task:
    """One task.

    ``name``: ``cls``, ``det``, ``seg`` or a registered task's (the word after ``vision-attn train``);
    ``title``: what it trains;
    ``module`` / ``datamodule``: the Lightning classes whose arguments are the ``model`` / ``data``
    sections; ``filled``: ``model`` arguments the data set fills in; ``paths``: dotted config keys that
    name files, with the kinds of shipped config they may name (see :func:`vision_attn.io.resources.resolve_path`);
    ``primary``: the :class:`Metric` its runs are ranked by (``compare``, ``ablate``'s plot, ``search``'s
    objective, the report) and ``best.ckpt`` maximises (its ``logged`` name: the checkpoint's monitor);
    ``build(cfg, say) -> (module, datamodule)``;
    ``shadow(module, cfg) -> (network, label)`` rebuilds the trained network's architecture (the
    runner builds it on the meta device to count its FLOPs); ``panels``: the curves ``plot_curves``
    draws; ``report(run, callback_metrics, module, datamodule, cfg, *, flops, best, common) -> metrics``
    writes the task's own figures and returns ``metrics.json``'s content (``common``: the entries
    every task writes); ``summary(metrics) -> str`` is the last progress line;
    ``load(ckpt, path, device, weights) -> Run`` rebuilds a trained run from its checkpoint;
    ``lr_monitor``: log the schedulers' rates (tasks that set rates themselves log them).

    What the tools after training ask (None: the task does not offer it; the command says so):
    ``evaluate(checkpoint, data, options, runtime) -> report`` (``vision-attn eval``) and
    ``eval_listing(report) -> Listing`` (its table); ``predict(checkpoint, images, options, runtime) ->
    [{"image", ...}]`` and ``predict_video(checkpoint, reader, output, options, runtime) -> StreamResult``
    (``vision-attn predict``); ``prediction``: (column header, ``{k}`` the top-k, and the cell of one
    prediction); ``written``: what ``predict -o`` writes beside the images (e.g. ``boxes and
    detections.json``); ``export_kind``: what an export of a run returns (an ``export.outputs`` kind:
    ``classifier`` one (B, N) tensor, ``detector``, ``segmenter``); ``insertion``: where ``ablate``
    inserts attention (``yaml``: rows of the detector YAML ``model.yaml``; ``model``: ``model.attention``
    of ``create_model``); ``headline``: the ``metrics.json`` keys (fractions) ``ablate`` reports beside
    the primary metric, with their labels (``reported``: the primary first, then these); ``explain``: what
    ``vision-attn explain`` asks (an :class:`Explain`).
    """

    name: str
    title: str
    module: type
    datamodule: type
    filled: frozenset[str]
    primary: Metric
    build: Callable[[Any, Echo], tuple[Any, Any]]
    shadow: Callable[[Any, Any], tuple[Any, str]]
    panels: Any
    report: Callable[..., dict[str, Any]]
    summary: Callable[[dict[str, Any]], str]
    load: Callable[..., Any]
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lr_monitor: bool = True
    evaluate: Callable[..., dict[str, Any]] | None = None
    eval_listing: Callable[[dict[str, Any]], Listing] | None = None
    predict: Callable[..., list[dict[str, Any]]] | None = None
    predict_video: Callable[..., Any] | None = None
    prediction: tuple[str, Callable[[dict[str, Any]], str]] | None = None
    written: str = ""
    export_kind: str = "classifier"
    insertion: str | None = None
    headline: tuple[tuple[str, str], ...] = ()
    explain: Explain | None = None

    @property
    def reported(self) -> tuple[tuple[str, str], ...]:
        """The ``metrics.json`` keys (fractions) a comparison of runs reports, with their labels: the primary
        metric first, then the ``headline`` ones."""
        first = (self.primary.key, self.primary.label)
        return (first, *(m for m in self.headline if m[0] != first[0]))
