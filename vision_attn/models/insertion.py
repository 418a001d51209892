"""Insert attention blocks into any ``nn.Module`` without editing its code.

``insert_into_module(model, "cbam", after="Bottleneck", position="residual")`` (what
:func:`vision_attn.insert_attention` does with a model) selects modules, infers
each block's channel count from one dry forward pass, attaches the blocks and returns a report.

How a block is attached keeps every existing state-dict key (name and shape), so a pretrained
backbone still loads strictly apart from the new keys:

- ``position="after"``: the block becomes a child ``post_attn`` of the selected module and a forward
  hook passes the module's output through it (keys ``<module>.post_attn.*``). An ``nn.Sequential``
  gets the block appended under that name instead: it runs last, as its own element.
- ``position="residual"``: on the residual branch before the addition, after the branch's last norm,
  where the SE and CBAM papers put it. On torchvision's ``BasicBlock``/``Bottleneck`` the block
  becomes the child ``se`` and a hook on ``bn2``/``bn3`` applies it; timm's ResNet blocks have that
  slot (``se``, called after ``bn2``/``bn3``) and get the block there. Either way the keys are
  ``<block>.se.*``: timm's SE/ECA/CBAM-ResNet keys.

Hooks are plain picklable objects: the model can be deep-copied, pickled, traced by ``torch.fx``
and compiled by ``torch.compile``. ``zero_init=True`` wraps each block in
:class:`~vision_attn.layers.plugins.IdentityBlend` (keys ``...block.*`` and ``...scale``), which starts
as the exact identity.
"""
from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence, Union

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vision_attn.errors import ConfigError
from vision_attn.layers.plugins import IdentityBlend
from vision_attn.layers.plugins.registry import attention_factory, check_block_arguments

__all__ = ["insert_into_module", "Insertion", "InsertionReport", "select_modules", "default_attention_sites"]

Predicate = Callable[[str, nn.Module], bool]
Selector = Union[str, type, Predicate, Sequence[Union[str, type, Predicate]]]

AFTER_NAME = "post_attn"
RESIDUAL_NAME = "se"

# Residual blocks by (module, class name): the last norm of the residual branch, and whether the class
# has timm's attention slot ``se`` (called after that norm). Matching by name needs no import of either
# library; a subclass matches through its MRO.
RESIDUAL_BLOCKS: dict[tuple[str, str], tuple[str, bool]] = {
    ("torchvision.models.resnet", "BasicBlock"): ("bn2", False),
    ("torchvision.models.resnet", "Bottleneck"): ("bn3", False),
    ("timm.models.resnet", "BasicBlock"): ("bn2", True),
    ("timm.models.resnet", "Bottleneck"): ("bn3", True),
}


# ------------------------------------------------------------------------------------------------ report
@dataclass(frozen=True)
class Insertion:
    """One inserted block: ``where`` it goes (the selected module), under which qualified ``name``
    (its state-dict prefix), the block's class, the ``channels`` and map ``size`` (H, W) it saw in the
    dry forward, and the parameters and MACs it adds (MACs of one image at that size)."""

    where: str
    position: str
    name: str
    block: str
    channels: int
    size: tuple[int, int]
    params: int
    macs: int


@dataclass(frozen=True)
class InsertionReport:
    """What :func:`insert_attention` did; iterate it for the :class:`Insertion` rows, ``print`` it
    for a table. ``new_keys``: the state-dict keys the blocks added (the only keys a pretrained
    backbone's file lacks)."""

    insertions: tuple[Insertion, ...]
    input_shape: tuple[int, ...]
    position: str
    zero_init: bool
    new_keys: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.insertions)

    def __iter__(self) -> Iterator[Insertion]:
        return iter(self.insertions)

    def __getitem__(self, i: int) -> Insertion:
        return self.insertions[i]

    @property
    def params(self) -> int:
        """Parameters added in all."""
        return sum(r.params for r in self.insertions)

    @property
    def macs(self) -> int:
        """MACs added in all, for one image of ``input_shape``."""
        return sum(r.macs for r in self.insertions)

    def table(self) -> str:
        """A plain-text table: one row per block and a total."""
        head = ("where", "added as", "block", "channels", "map", "params", "MACs")
        rows = [(r.where, r.name, r.block, str(r.channels), f"{r.size[0]}x{r.size[1]}", f"{r.params:,}",
                 f"{r.macs:,}") for r in self.insertions]
        rows.append(("total", "", "", "", "", f"{self.params:,}", f"{self.macs:,}"))
        widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
        right = {3, 4, 5, 6}

        def line(row: Sequence[str]) -> str:
            cells = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
            return "  ".join(cells).rstrip()

        shape = "x".join(str(s) for s in self.input_shape)
        title = (f"{len(self)} attention block(s), position={self.position}, zero_init={self.zero_init}; "
                 f"channels and MACs from a dry forward at {shape}")
        rule = "  ".join("-" * w for w in widths)
        return "\n".join([title, line(head), rule, *map(line, rows[:-1]), rule, line(rows[-1])])

    def __str__(self) -> str:
        return self.table()


# ------------------------------------------------------------------------------------------------ selection
def _glob_match(pattern: Sequence[str], name: Sequence[str]) -> bool:
    """Match dotted-name segments: ``*`` (and ``?``, ``[...]``) within one segment, ``**`` any number."""
    if not pattern:
        return not name
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_glob_match(rest, name[i:]) for i in range(len(name) + 1))
    return bool(name) and fnmatch.fnmatchcase(name[0], head) and _glob_match(rest, name[1:])


def _type_names(module: nn.Module) -> set[str]:
    return {cls.__name__ for cls in type(module).__mro__ if cls is not object}


def _matcher(selector: Selector) -> Predicate:
    if isinstance(selector, type):
        return lambda name, module: isinstance(module, selector)
    if isinstance(selector, str):
        parts = selector.split(".")
        return lambda name, module: selector in _type_names(module) or _glob_match(parts, name.split("."))
    if callable(selector):
        return selector
    if isinstance(selector, (list, tuple)) and selector:
        matchers = [_matcher(s) for s in selector]
        return lambda name, module: any(m(name, module) for m in matchers)
    raise ConfigError(
        f"after={selector!r}: select modules by type (a class or its name, e.g. 'Bottleneck'), by a dotted-name "
        f"glob ('layer3.*'), by a predicate (name, module) -> bool, or by a list of those")


def select_modules(model: nn.Module, after: Selector) -> list[tuple[str, nn.Module]]:
    """The (qualified name, module) pairs of ``model`` that ``after`` selects, in model order (never
    the model itself). A string matches a class name in the module's MRO or its qualified name as a
    glob whose ``*`` stays within one level (``layer3.*``: the blocks of layer3, not their layers;
    ``**`` crosses levels). Nothing selected is a :class:`ConfigError` listing the candidates."""
    match = _matcher(after)
    found = [(name, m) for name, m in model.named_modules() if name and match(name, m)]
    if not found:
        raise ConfigError(_no_match_message(model, after))
    return found


def _no_match_message(model: nn.Module, after: Selector) -> str:
    names = [name for name, _ in model.named_modules() if name]
    types = list(dict.fromkeys(type(m).__name__ for name, m in model.named_modules() if name))
    hint = ""
    if isinstance(after, str):
        close = difflib.get_close_matches(after, types + names, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    shallow = [n for n in names if n.count(".") <= 1]
    shown = ", ".join(shallow[:16])
    if len(names) > min(len(shallow), 16):
        shown += f", ... ({len(names)} modules in all)"
    return (f"after={after!r} matches no module of {type(model).__name__}: {hint}"
            f"its module types are {', '.join(types[:24])}{' ...' if len(types) > 24 else ''}; "
            f"its modules include {shown}. Select by type (a class or its name), by a dotted-name glob "
            f"('layer3.*': * stays within one level, ** crosses levels) or by a predicate (name, module) -> bool")


def _residual_spec(module: nn.Module) -> tuple[str, bool] | None:
    for cls in type(module).__mro__:
        spec = RESIDUAL_BLOCKS.get((cls.__module__, cls.__name__))
        if spec is not None:
            return spec
    return None


def default_attention_sites(model: nn.Module) -> dict[str, Any] | None:
    """Where ``create_model(attention=...)`` puts blocks by default: on the residual branch of every
    torchvision or timm ResNet block (``{"after": (types...), "position": "residual"}``); None when
    the model has none."""
    types = tuple(dict.fromkeys(type(m) for m in model.modules() if _residual_spec(m) is not None))
    return {"after": types, "position": "residual"} if types else None


# ------------------------------------------------------------------------------------------------ sites
class _RunChild:
    """Forward hook: pass the hooked module's output through the child ``name`` of ``owner`` (the
    hooked module itself when ``owner`` is None). A module-level class, so models stay picklable."""

    def __init__(self, name: str, owner: nn.Module | None = None) -> None:
        self.name = name
        self.owner = owner

    def __call__(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return getattr(module if self.owner is None else self.owner, self.name)(output)


@dataclass
class _Site:
    where: str
    target: nn.Module      # the selected module; the block becomes its child ``child``
    child: str
    probe: nn.Module       # the module whose output the block takes
    hook: bool             # whether to hook ``probe`` (False: the module calls the child itself)

    @property
    def name(self) -> str:
        return f"{self.where}.{self.child}"


def _site(where: str, module: nn.Module, position: str) -> _Site:
    if position == "after":
        if hasattr(module, AFTER_NAME):
            raise ConfigError(f"{where} ({type(module).__name__}) already has a block at {where}.{AFTER_NAME}; "
                              f"insert after a module once")
        return _Site(where, module, AFTER_NAME, module, hook=not isinstance(module, nn.Sequential))
    spec = _residual_spec(module)
    if spec is None:
        known = ", ".join(f"{m}.{c}" for m, c in RESIDUAL_BLOCKS)
        raise ConfigError(
            f"position='residual' needs a ResNet block, and {where} is a {type(module).__name__} "
            f"({type(module).__module__}); supported: {known}. Select those blocks (e.g. after='Bottleneck' "
            f"or 'layer3.*') or use position='after'")
    norm, has_slot = spec
    current = getattr(module, RESIDUAL_NAME, None)
    if (has_slot and current is not None) or (not has_slot and hasattr(module, RESIDUAL_NAME)):
        raise ConfigError(f"{where} already has attention on its residual branch ({where}.{RESIDUAL_NAME}: "
                          f"{type(current).__name__}); insert once per block")
    return _Site(where, module, RESIDUAL_NAME, getattr(module, norm), hook=not has_slot)


# ------------------------------------------------------------------------------------------------ dry run
def _input_shape(model: nn.Module, input_size: int | Sequence[int] | None) -> tuple[int, int, int, int]:
    first_conv = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
    chans = first_conv.in_channels if first_conv is not None else 3
    if input_size is None:
        size: tuple[int, ...] = (chans, 224, 224)
    elif isinstance(input_size, int):
        size = (chans, input_size, input_size)
    else:
        size = tuple(int(s) for s in input_size)
        size = (chans, *size) if len(size) == 2 else size
    if len(size) != 3 or any(s < 1 for s in size):
        raise ConfigError(f"input_size={input_size!r}: give an int (square image), (H, W) or (C, H, W), all positive")
    return (1, *size)  # type: ignore[return-value]


def _dry_run(model: nn.Module, sites: list[_Site], shape: tuple[int, ...]) -> list[torch.Size]:
    """Run ``model`` once on zeros of ``shape`` in eval mode without gradients and return the output
    shape of each site's probe; every module's training flag is restored."""
    seen: dict[int, list[Any]] = {id(s.probe): [] for s in sites}

    def record(module: nn.Module, args: Any, output: Any) -> None:
        seen[id(module)].append(output.shape if isinstance(output, torch.Tensor) else type(output).__name__)

    reference = next(iter(model.parameters()), next(iter(model.buffers()), None))
    device = reference.device if reference is not None else torch.device("cpu")
    dtype = reference.dtype if reference is not None and reference.is_floating_point() else torch.float32
    modes = {m: m.training for m in model.modules()}
    handles = [s.probe.register_forward_hook(record) for s in {id(s.probe): s for s in sites}.values()]
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(shape, device=device, dtype=dtype))
    except Exception as e:
        raise ConfigError(
            f"the dry forward pass that infers channel counts failed on a {tuple(shape)} input "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); give input_size= a size the model "
            f"accepts") from e
    finally:
        for h in handles:
            h.remove()
        for m, training in modes.items():
            m.training = training
    shapes = []
    for s in sites:
        outs = seen[id(s.probe)]
        probe = s.where if s.probe is s.target else f"{s.where} (its last norm)"
        if not outs:
            raise ConfigError(f"{probe} did not run in a forward pass of a {tuple(shape)} input, so no channel "
                              f"count can be inferred; select modules that the model's forward calls")
        bad = next((o for o in outs if not isinstance(o, torch.Size) or len(o) != 4), None)
        if bad is not None:
            got = f"shape {tuple(bad)}" if isinstance(bad, torch.Size) else f"a {bad}"
            raise ConfigError(f"the output of {probe} is {got}, not a (B, C, H, W) feature map; attention blocks "
                              f"go after modules that output one")
        if len({o[1] for o in outs}) > 1:
            raise ConfigError(f"{probe} runs several times with different channel counts "
                              f"({sorted({o[1] for o in outs})}); one block cannot fit them all")
        shapes.append(outs[0])
    return shapes


def _count_macs(block: nn.Module, shape: torch.Size) -> int:
    ref = next(iter(block.parameters()), None)
    x = torch.zeros((1, *shape[1:]), device=ref.device if ref is not None else None,
                    dtype=ref.dtype if ref is not None else None)
    was_training = block.training
    block.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            block(x)
    finally:
        block.train(was_training)
    return counter.get_total_flops() // 2


# ------------------------------------------------------------------------------------------------ insert
def _factory(block: str | Callable[..., nn.Module], kwargs: dict[str, Any]) -> Callable[[int], nn.Module]:
    if isinstance(block, str):
        factory = attention_factory(block)
        label = repr(block)
    elif callable(block):
        factory, label = block, getattr(block, "__name__", repr(block))
    else:
        raise ConfigError(f"block={block!r}: give a registered name ('se', 'cbam', 'cbam_ultralytics', 'eca', "
                          f"'coord', 'none') or a class/function taking the channel count first")
    check_block_arguments(factory, label, kwargs)
    return lambda channels: factory(channels, **kwargs)


def insert_into_module(
    model: nn.Module,
    block: str | Callable[..., nn.Module],
    *,
    after: Selector,
    position: Literal["after", "residual"] = "after",
    zero_init: bool = False,
    input_size: int | Sequence[int] | None = None,
    **block_kwargs: Any,
) -> InsertionReport:
    """Insert an attention ``block`` at every module of ``model`` that ``after`` selects; in place.

    ``block``: a registered name (``se``, ``cbam``, ``cbam_ultralytics``, ``eca``, ``coord``, ``none``)
    or a class/function called as ``block(channels, **block_kwargs)``. ``after``: a class or class
    name, a dotted-name glob, a predicate ``(name, module) -> bool``, or a list of those
    (:func:`select_modules`). ``position``: ``"after"`` the module's output, or ``"residual"``: on
    the residual branch of a torchvision or timm ResNet block, before the addition. Channels come
    from one dry forward pass at ``input_size`` (int, (H, W) or (C, H, W); default 224), run in
    eval mode without gradients on the model's device (a model on the ``meta`` device costs
    nothing). ``zero_init=True`` makes every block start as the exact identity
    (:class:`~vision_attn.layers.plugins.IdentityBlend`). Existing state-dict keys are untouched;
    the report lists the new ones.

    :func:`vision_attn.insert_attention` calls this for a model (and the YAML editor for a YAML).
    """
    if not isinstance(model, nn.Module):
        raise ConfigError(f"insert_attention takes an nn.Module, got {type(model).__name__}; YAML model files are "
                          f"edited row by row by the YOLO YAML tools, not here")
    if position not in ("after", "residual"):
        raise ConfigError(f"position={position!r}: choose 'after' (the module's output) or 'residual' (the residual "
                          f"branch of a ResNet block, before the addition)")
    make = _factory(block, block_kwargs)
    selected = select_modules(model, after)
    sites = [_site(name, m, position) for name, m in selected]
    shape = _input_shape(model, input_size)
    shapes = _dry_run(model, sites, shape)

    reference = next(iter(model.parameters()), None)
    device = reference.device if reference is not None else torch.device("cpu")
    dtype = reference.dtype if reference is not None and reference.is_floating_point() else None
    rows, new_keys = [], []
    for site, out_shape in zip(sites, shapes):
        module = make(int(out_shape[1]))
        if not isinstance(module, nn.Module):
            raise ConfigError(f"block {block!r} returned {type(module).__name__}, not an nn.Module")
        if zero_init:
            module = IdentityBlend(module)
        module = module.to(device=device, dtype=dtype).train(site.target.training)
        macs = _count_macs(module, out_shape)
        setattr(site.target, site.child, module)  # registers it (and replaces timm's empty slot)
        if site.hook:
            owner = None if site.probe is site.target else site.target
            site.probe.register_forward_hook(_RunChild(site.child, owner))
        inner = module.block if isinstance(module, IdentityBlend) else module
        rows.append(Insertion(where=site.where, position=position, name=site.name, block=type(inner).__name__,
                              channels=int(out_shape[1]), size=(int(out_shape[2]), int(out_shape[3])),
                              params=sum(p.numel() for p in module.parameters()), macs=macs))
        new_keys += [f"{site.name}.{k}" for k in module.state_dict()]
    return InsertionReport(tuple(rows), shape, position, zero_init, tuple(new_keys))
