"""``AuditConfig``: everything one audit run needs, frozen and validated on construction; its defaults live here
(and, per device, in ``vlmdata.audit.settings.defaults``), the CLI reads them from here.

``AuditConfig`` holds what the caller gave; ``None`` means "not given": ``vlmdata.audit.planning.resolve`` fills it in,
in this order of precedence: what the caller gave, the user's Megatron Bridge config (``bridge_config``), the
model's ``config.json`` (``model_config``), the device's defaults (``DEVICE_DEFAULTS``).

A bad value raises ``AuditConfigError`` (an ``AuditError`` and an ``OptionsError``) naming the parameter
(```block```, ```loader_options```); ``replace(**changes)`` validates the copy and refuses a name that is not
a setting, with the closest one.

The loader: ``loader_options`` is a ``LoaderOptions`` (a mapping of its fields is accepted and turned into
one) holding how samples become batches (pixel limits, resize, the fast image path, ``image_device``, ...).
The fields the audit sets itself for every source (``AUDIT_LOADER_FIELDS``: the model family, ``seq_length``,
``micro_batch_size``, ``seed``, ``num_workers``, the padding of ``seq_policy``, endless epochs that wrap) have one home,
this object's own settings, and must stay at their defaults there. ``loader_changes()`` are the user's
fields that differ from ``LoaderOptions``' defaults: what every source's loader gets on top of the audit's.

Light to import (no torch: ``vlmdata audit --help`` reads the defaults); the device is checked with torch
when a config is made.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vlmdata import sample_data_path
from vlmdata.audit.settings.defaults import (
    DEFAULT_THRESHOLD,
    DEVICE_DEFAULTS,
    EXPERT_IMBALANCE,
    PROXY_TOLERANCE,
    REPEAT_MARGIN,
)
from vlmdata.audit.settings.guard import check_device_name
from vlmdata.audit.settings.model_checks import MAX_LAYERS
from vlmdata.audit.settings.model_config import ATTENTION, COMPILE_PARTS, PRESETS
from vlmdata.audit.settings.run_spec import BOUNDS, MAX_PARALLEL, PARALLEL_FIELDS, RECOMPUTE, SEQ_POLICIES
from vlmdata.audit.sources.registry import SOURCES, AuditError, check_loader_options, check_sources
from vlmdata.errors import OptionsError
from vlmdata.loaders.options import LoaderOptions
from vlmdata.options_util import at_least

__all__ = [
    "AuditConfig",
    "AuditConfigError",
    "AUDIT_LOADER_FIELDS",
    "DEVICE_DEFAULTS",
    "LOGITS",
    "default_real",
    "default_workers",
    "device_kind",
]

LOGITS = ("all", "loss")
# LoaderOptions fields the audit sets for every source, and the setting that decides each (None: the audit)
AUDIT_LOADER_FIELDS: dict[str, str | None] = {
    "model": "`preset` or `model_config`",
    "seq_length": "`seq_length`",
    "micro_batch_size": "`micro_batch_size`",
    "seed": "`seed`",
    "num_workers": "`num_workers`",
    "pad_to_max_length": "`seq_policy`",
    "pad_to_multiple_of": "`seq_policy`",
    "packing": "`seq_policy`",
    "num_epochs": None,
    "wrap_epochs": None,
}
_POSITIVE = (  # integer settings >= 1 when given
    *("seq_length", "micro_batch_size", "global_batch_size", *PARALLEL_FIELDS, "gpus", "slice_layers"),
    *("min_steps", "max_steps", "block"),
)
_CHOICES = {
    "compile": COMPILE_PARTS,
    "seq_policy": SEQ_POLICIES,
    "recompute": RECOMPUTE,
    "logits": LOGITS,
    "preset": tuple(PRESETS),
}
_LOADER_DEFAULTS = LoaderOptions()


class AuditConfigError(AuditError, OptionsError):
    """An ``AuditConfig`` setting is invalid; the message names the parameter (```block```)."""


def default_real() -> str:
    """The embedded sample dataset (real photographs; see its README), in a checkout or an installed wheel."""
    try:
        return sample_data_path()
    except FileNotFoundError as e:
        raise AuditError(f"no real dataset given and {e}") from None


def device_kind(device: str) -> str:
    """ "cuda" or "cpu" for a device text (``AuditConfigError`` naming ```device``` when it is neither)."""
    check_device_name(device)
    return "cuda" if device.strip().startswith("cuda") else "cpu"


@dataclass(frozen=True)
class AuditConfig:
    """One audit run's settings (module docstring); ``None``: not given (``vlmdata.audit.planning.resolve`` fills it in)."""

    real: str | None = None  # None: the embedded sample data
    profile: str | None = None  # sample the synthetic source from this profile (unpaired) instead of the twin
    sources: tuple[str, ...] = SOURCES
    device: str = "cpu"
    seed: int = 0
    step: str | None = None  # "module:function" user workload
    # the model
    preset: str | None = None
    model_config: str | None = None  # a Hugging Face config.json (or its folder)
    slice_layers: int | None = (
        None  # decoder layers measured; None: the whole model if it fits, else DeepStack + 2 (>= 4)
    )
    attention: str = "varlen"  # "varlen" (vlmdata.audit.workload.kernels) or "sdpa" (transformers' path)
    compile: str | None = None  # blocks through torch.compile: none|vision|decoder|all (None: the device's default)
    logits: str | None = None  # "all" | "loss"
    # the user's run (RunSpec); None: from bridge_config, else the device default
    bridge_config: str | None = None
    seq_length: int | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_policy: str | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    cp: int | None = None
    etp: int | None = None
    dp: int | None = None
    gpus: int | None = None  # the run's GPU count (Bridge's world size): DP = gpus / (TP * PP * CP) unless given
    freeze_language_model: bool | None = None
    freeze_vision_model: bool | None = None
    freeze_vision_projection: bool | None = None
    recompute: str | None = None
    manual_gc: bool | None = None  # Python's collector as Bridge's train.manual_gc (None: Bridge config, else manual)
    manual_gc_interval: int | None = None  # train.manual_gc_interval (None: Bridge config, else 100)
    link_gbps: float = 200.0  # per-GPU all-to-all bandwidth the modelled expert-parallel term assumes
    # the benchmark's configuration, when it is not the run's (vlmdata.audit.settings.benchmark): mocks run under it
    benchmark_config: str | None = None  # the benchmark's Bridge ConfigContainer YAML
    benchmark: dict[str, Any] = field(default_factory=dict)  # benchmark.BENCHMARK_KEYS -> value (wins over the file)
    expert_imbalance: float = (
        EXPERT_IMBALANCE  # natural routing's busiest EP rank / mean (vlmdata.audit.analysis.layout)
    )
    repeat_margin: float = REPEAT_MARGIN  # run-to-run spread every mock interval is widened by (verdict)
    # the loader
    num_workers: int | None = None  # loader workers per source and rank; None: 0 on CPU, auto on CUDA
    loader_options: LoaderOptions | Mapping[str, Any] = field(default_factory=LoaderOptions)  # module docstring
    # the measurement
    warmup: int | None = None  # untimed global steps per source after its loader starts
    min_steps: int | None = None  # global steps per source before stopping; None: one epoch of real
    max_steps: int | None = None  # global steps per source at most
    block: int | None = None  # consecutive global steps of one source within a round
    budget_s: float | None = None  # measuring stops after this many seconds (at the end of a round)
    precision: float = 0.05  # stop when every gap's interval is within ±precision of its ratio (and decided)
    threshold: float = DEFAULT_THRESHOLD
    proxy_tolerance: float = PROXY_TOLERANCE
    warm_shapes: bool = True  # False skips the shape warm-up: only to show what it prevents
    workload_options: dict[str, Any] = field(default_factory=dict)  # sweep values (recompute, parallel, ...)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", _sources(self.sources))
        object.__setattr__(self, "loader_options", _loader_options(self.loader_options))
        _check_settings(self)
        _check_measurement(self)

    @property
    def loader(self) -> LoaderOptions:
        """``loader_options`` as the ``LoaderOptions`` it always is once made."""
        assert isinstance(self.loader_options, LoaderOptions)  # __post_init__ made it one
        return self.loader_options

    def loader_changes(self) -> dict[str, Any]:
        """The user's loader fields that differ from ``LoaderOptions``' defaults (every source gets them)."""
        return {k: v for k, v in self.loader.to_dict().items() if v != getattr(_LOADER_DEFAULTS, k)}

    def defaults(self) -> dict[str, Any]:
        """The device's defaults (``DEVICE_DEFAULTS``)."""
        return DEVICE_DEFAULTS[device_kind(self.device)]

    def resolved_logits(self) -> str:
        return self.logits or self.defaults()["logits"]

    def resolved_compile(self) -> str:
        return self.compile or self.defaults()["compile"]

    def resolved_real(self) -> str:
        return self.real or default_real()

    def measure_settings(self) -> dict[str, Any]:
        """max_steps (rounded up to whole rounds), block and budget_s with the device defaults filled in."""
        d = self.defaults()
        block = self.block or d["block"]
        max_steps = self.max_steps or max(d["max_steps"], self.min_steps or 0)
        return {
            "block": block,
            "max_steps": block * math.ceil(max_steps / block),
            "budget_s": self.budget_s or d["budget_s"],
        }

    def resolved_warmup(self) -> int:
        return self.warmup if self.warmup is not None else self.defaults()["warmup"]

    def replace(self, **changes: Any) -> AuditConfig:
        """A validated copy with ``changes``; a name that is not a setting raises ``AuditConfigError``."""
        names = [f.name for f in dataclasses.fields(self)]
        for name in changes:
            if name not in names:
                close = difflib.get_close_matches(name, names, 1)
                hint = f" (did you mean `{close[0]}`?)" if close else ""
                raise AuditConfigError(f"`{name}` is not an audit setting{hint}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every setting as given (the report's ``config``): ``sources`` a list, ``loader_options`` the user's
        loader changes (``loader_changes``)."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return {**out, "sources": list(self.sources), "loader_options": self.loader_changes()}


def _sources(sources: Any) -> tuple[str, ...]:
    if isinstance(sources, str) or not isinstance(sources, (tuple, list)):
        raise AuditConfigError(f"`sources` must be a sequence of source names, got {sources!r}")
    out = tuple(sources)
    check_sources(out)
    return out


def _loader_options(value: Any) -> LoaderOptions:
    """``value`` as a ``LoaderOptions`` whose audit-owned fields are at their defaults (module docstring)."""
    try:
        opts = value if isinstance(value, LoaderOptions) else LoaderOptions().replace(**dict(value))
    except OptionsError as e:  # the loader's own message; its field names are this setting's keys
        raise AuditConfigError(f"`loader_options`: {str(e).replace('`', '')}") from None
    except (TypeError, ValueError):
        raise AuditConfigError(f"`loader_options` must be LoaderOptions or a mapping, got {value!r}") from None
    for name, home in AUDIT_LOADER_FIELDS.items():
        if getattr(opts, name) != getattr(_LOADER_DEFAULTS, name):
            why = f"give {home} instead" if home else "the audit reads every source endlessly, wrapping across epochs"
            raise AuditConfigError(f"`loader_options`: {name} is set by the audit for every source; {why}")
    changes = {k: v for k, v in opts.to_dict().items() if v != getattr(_LOADER_DEFAULTS, k)}
    if not isinstance(value, LoaderOptions):  # a key the user named is theirs, even at its default value
        for name, home in AUDIT_LOADER_FIELDS.items():
            if name in value:
                why = (
                    f"give {home} instead" if home else "the audit reads every source endlessly, wrapping across epochs"
                )
                raise AuditConfigError(f"`loader_options`: {name} is set by the audit for every source; {why}")
        changes = {**dict(value), **changes}
    try:
        check_loader_options(changes)
    except AuditError as e:
        raise AuditConfigError(f"`loader_options`: {e}") from None
    return opts


_HIGH = {  # upper bounds of integer settings, before anything is sized from them (RunSpec's for the run's)
    **BOUNDS,
    "gpus": MAX_PARALLEL * 64,
    "slice_layers": MAX_LAYERS,
    "seed": (1 << 63) - 1,  # torch's generators take 64-bit seeds
    **{name: 1 << 20 for name in ("min_steps", "max_steps", "block", "warmup")},
    "num_workers": 1024,
}
_PATHS = ("real", "profile", "model_config", "bridge_config", "step")  # strings (a path-like becomes one)


def _int_at_least(cfg: AuditConfig, name: str, low: int) -> None:
    v = getattr(cfg, name)
    if v is not None:
        at_least(name, v, low, AuditConfigError, _HIGH.get(name))


def _check_paths(cfg: AuditConfig) -> None:
    for name in _PATHS:
        v = getattr(cfg, name)
        if isinstance(v, os.PathLike):
            object.__setattr__(cfg, name, os.fspath(v))
        elif v is not None and not isinstance(v, str):
            raise AuditConfigError(f"`{name}` must be a path (a string), got {type(v).__name__}")


def _check_settings(cfg: AuditConfig) -> None:
    """The device, the model and the run's settings (their combinations are ``resolve``'s: ``RunSpec``)."""
    check_device_name(cfg.device)
    _check_paths(cfg)
    for name in _POSITIVE:
        _int_at_least(cfg, name, 1)
    for name in ("seed", "num_workers", "warmup"):
        _int_at_least(cfg, name, 0)
    for name, allowed in _CHOICES.items():
        v = getattr(cfg, name)
        if v is not None and v not in allowed:
            raise AuditConfigError(f"`{name}` must be one of {', '.join(allowed)}, got {v!r}")
    if cfg.attention not in ATTENTION:
        raise AuditConfigError(f"`attention` must be one of {', '.join(ATTENTION)}, got {cfg.attention!r}")
    for name in ("freeze_language_model", "freeze_vision_model", "freeze_vision_projection"):
        if getattr(cfg, name) not in (None, True, False):
            raise AuditConfigError(f"`{name}` must be True, False or None, got {getattr(cfg, name)!r}")
    if not _number(cfg.link_gbps) or not cfg.link_gbps > 0:
        raise AuditConfigError(f"`link_gbps` must be > 0, got {cfg.link_gbps!r}")
    if not _number(cfg.expert_imbalance) or not 1 <= cfg.expert_imbalance <= 16:
        raise AuditConfigError(f"`expert_imbalance` must be between 1 and 16, got {cfg.expert_imbalance!r}")
    if not _number(cfg.repeat_margin) or not 0 <= cfg.repeat_margin < 1:
        raise AuditConfigError(f"`repeat_margin` must be between 0 and 1, got {cfg.repeat_margin!r}")
    if cfg.benchmark_config is not None and not isinstance(cfg.benchmark_config, str):
        raise AuditConfigError(f"`benchmark_config` must be a path, got {type(cfg.benchmark_config).__name__}")
    if not isinstance(cfg.benchmark, dict):
        raise AuditConfigError(f"`benchmark` must be a dict of settings, got {type(cfg.benchmark).__name__}")
    if not isinstance(cfg.workload_options, dict):
        raise AuditConfigError(f"`workload_options` must be a dict, got {type(cfg.workload_options).__name__}")


def _check_measurement(cfg: AuditConfig) -> None:
    """How long and how precisely to measure."""
    d = cfg.defaults()
    min_steps, max_steps = cfg.min_steps, cfg.max_steps or d["max_steps"]
    if (cfg.block or d["block"]) < 1 or (min_steps is not None and not 1 <= min_steps <= max_steps):
        raise AuditConfigError(
            f"need `block` >= 1 and 1 <= `min_steps` <= `max_steps` (got block={cfg.block}, "
            f"min_steps={cfg.min_steps}, max_steps={cfg.max_steps})"
        )
    budget = cfg.budget_s if cfg.budget_s is not None else d["budget_s"]
    if not _number(budget) or not budget > 0:
        raise AuditConfigError(f"`budget_s` must be > 0, got {budget!r}")
    if not _number(cfg.precision) or not 0 < cfg.precision < 1:
        raise AuditConfigError(f"`precision` must be between 0 and 1, got {cfg.precision!r}")
    if not _number(cfg.threshold) or not cfg.threshold >= 0:
        raise AuditConfigError(f"`threshold` must be >= 0, got {cfg.threshold!r}")
    if not _number(cfg.proxy_tolerance) or not 0 < cfg.proxy_tolerance < 1:
        raise AuditConfigError(f"`proxy_tolerance` must be between 0 and 1, got {cfg.proxy_tolerance!r}")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def default_workers(device: str, n_sources: int, world_size: int = 1) -> int:
    """Loader workers per source and rank: 0 on CPU (the step already uses every core); on CUDA the
    rank's share of the CPUs, minus two for the training process, split over the sources, 1..4."""
    if device_kind(device) != "cuda":
        return 0
    cpus = (os.cpu_count() or 1) // max(1, world_size)
    return max(1, min(4, (cpus - 2) // max(1, n_sources)))
