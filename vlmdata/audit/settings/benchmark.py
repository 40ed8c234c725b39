"""The benchmark's configuration beside the training run's: ``resolve_benchmark(cfg, res)``.

A throughput benchmark is often not run as the training run is: Megatron Bridge 0.6.2's Qwen3-VL pretrain-mock
recipes freeze the language model and the vision tower and use another parallel layout than the SFT recipes, and
Bridge's one published mock/real pair also differs in forced routing balance, vision CUDA graphs, recompute and
the pipeline split (REFERENCE.md sections 12-13). The audit measures each mock under the **benchmark's**
configuration and real under the **training run's**, and attributes the gap factor by factor
(``vlmdata.audit.analysis.attribution``).

Inputs (``AuditConfig``): ``benchmark_config`` (a second Bridge ``ConfigContainer`` YAML, read like
``bridge_config``) and ``benchmark`` (a mapping of ``BENCHMARK_KEYS`` to values, which win over that file). A
setting neither gives is the run's (source ``"run"``). The run side's execution policy (``force_balance``,
``vp``, ``cuda_graphs``) comes from ``bridge_config``; the benchmark's from its own file or ``benchmark``.

``Benchmark`` holds both sides (``Side``: a ``RunSpec``, the execution policy, where each value came from, the
file's dataset class), ``diffs`` (every setting that differs, with its kind: ``measured`` when it changes the step
one GPU runs, ``composed`` when it changes only how that step spreads over GPUs, ``noted`` when the audit cannot
reproduce it and only names it), and ``links``: the measured differences grouped (``LINK_GROUPS``, in that
order) into the chain of configurations ``C_0 = run, C_1, ..., C_n = benchmark`` that the counterfactual arms
measure: ``C_i`` is ``C_{i-1}`` with link i's settings set to the benchmark's. A link whose intermediate
configuration is not a valid run (``RunSpecError``) is merged with the next one; a link that leaves the step
one GPU runs unchanged (a layout change with the same padding and micro-batches) is measured as no link.

``arms(sources, bench)`` names the counterfactual arms: for each mock ``m``, ``m@run`` (the mock under the run's
configuration) and ``m@+<link>`` for every intermediate ``C_i``; and ``real@benchmark`` (real under the
benchmark's configuration: the interaction of data and configuration). ``spec_of(name)`` is the ``RunSpec``
each measured name runs under. Light: no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from vlmdata.audit.settings.bridge_config import BridgeRun, read_bridge_config
from vlmdata.audit.settings.run_spec import RECOMPUTE, SEQ_POLICIES, RunSpec, RunSpecError
from vlmdata.audit.sources.registry import REAL, AuditError

__all__ = [
    "BENCHMARK_KEYS",
    "LINK_GROUPS",
    "Benchmark",
    "Side",
    "SettingDiff",
    "Link",
    "resolve_benchmark",
    "arms",
    "RUN_ARM",
    "REAL_ARM",
    "side_of",
    "is_counterfactual",
]

RUN_ARM = "run"  # suffix of a mock measured under the run's configuration: "imagefree@run"
REAL_ARM = f"{REAL}@benchmark"  # real measured under the benchmark's configuration

# RunSpec fields a benchmark may set, with the Bridge field each is read from (``BridgeRun`` attribute)
_RUN_FIELDS = {
    "micro_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size",
    "seq_length": "seq_length",
    "tp": "tensor_parallel",
    "pp": "pipeline_parallel",
    "ep": "expert_parallel",
    "cp": "context_parallel",
    "etp": "expert_tensor_parallel",
    "dp": "data_parallel",
    "freeze_language_model": "freeze_language_model",
    "freeze_vision_model": "freeze_vision_model",
    "freeze_vision_projection": "freeze_vision_projection",
    "recompute": "recompute",
}
# execution policy: key -> (Bridge execution field, kind)
_EXECUTION = {
    "force_balance": ("moe_router_force_load_balancing", bool),
    "vp": ("virtual_pipeline_model_parallel_size", int),
    "cuda_graphs": ("cuda_graph_impl", str),
}
BENCHMARK_KEYS = (*_RUN_FIELDS, "seq_policy", *_EXECUTION)
# the measured links, in the order the chain applies them (each a group of settings changed together)
LINK_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("freeze_language_model", ("freeze_language_model",)),
    ("freeze_vision_model", ("freeze_vision_model",)),
    ("freeze_vision_projection", ("freeze_vision_projection",)),
    ("recompute", ("recompute",)),
    ("batch", ("micro_batch_size", "global_batch_size")),
    ("sequence", ("seq_length", "seq_policy")),
    ("layout", ("tp", "pp", "ep", "cp", "etp", "dp")),
)
_LAYOUT = ("tp", "pp", "ep", "cp", "etp", "dp", "vp", "force_balance")
# what each difference means for a user (the verdict's words)
ACTION = {
    "freeze_language_model": "your benchmark froze the language model",
    "freeze_vision_model": "your benchmark froze the vision tower",
    "freeze_vision_projection": "your benchmark froze the vision projection",
    "recompute": "your benchmark recomputes differently",
    "batch": "your benchmark used another micro/global batch",
    "sequence": "your benchmark pads or packs sequences differently",
    "layout": "your benchmark's parallel layout pads or batches differently",
    "data": "your benchmark's data is not your training data",
    "composed": "your benchmark's parallel layout and routing balance",
}


@dataclass(frozen=True)
class Side:
    """One configuration: the run spec, the execution policy and where each value came from."""

    name: str  # "run" | "benchmark"
    run: RunSpec
    execution: dict[str, Any]  # force_balance, vp, cuda_graphs
    sources: dict[str, str]  # setting -> "flag" | "bridge config" | "benchmark config" | "run" | "default"
    path: str | None = None  # the Bridge YAML it was read from
    dataset_target: str | None = None

    def value(self, key: str) -> Any:
        if key in _EXECUTION:
            return self.execution.get(key)
        d = self.run.describe()
        return d.get(key, getattr(self.run, key, None))

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one data-parallel replica spans: TP * PP * CP (EP lies inside DP * CP * TP)."""
        return self.run.tp * self.run.pp * self.run.cp

    def describe(self) -> dict[str, Any]:
        return {
            "run": self.run.describe(),
            "execution": dict(self.execution),
            "sources": dict(self.sources),
            "path": self.path,
            "dataset_target": self.dataset_target,
            "gpus_per_replica": self.gpus_per_replica,
        }


@dataclass(frozen=True)
class SettingDiff:
    key: str
    run: Any
    benchmark: Any
    run_source: str
    benchmark_source: str
    kind: str  # "measured" | "composed" | "noted"

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Link:
    """One measured step of the chain from the run's configuration to the benchmark's."""

    name: str  # a LINK_GROUPS name, or several joined by "+"
    keys: tuple[str, ...]
    spec: RunSpec  # the configuration after this link (C_i)
    action: str

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "keys": list(self.keys), "action": self.action}


@dataclass(frozen=True)
class Benchmark:
    """Both sides, what differs and the chain of measured links (module docstring)."""

    run_side: Side
    bench_side: Side
    diffs: tuple[SettingDiff, ...]
    links: tuple[Link, ...]
    notes: tuple[str, ...] = ()
    arm_specs: dict[str, RunSpec] = field(default_factory=dict)  # filled by ``arms``

    @property
    def differs(self) -> bool:
        return bool(self.diffs)

    def describe(self) -> dict[str, Any]:
        return {
            "run": self.run_side.describe(),
            "benchmark": self.bench_side.describe(),
            "diffs": [d.describe() for d in self.diffs],
            "links": [lk.describe() for lk in self.links],
            "notes": list(self.notes),
        }


def _bridge(path: str | None) -> BridgeRun | None:
    return None if path is None else read_bridge_config(path)


def _execution(bridge: BridgeRun | None, where: str, given: Mapping[str, Any], sources: dict[str, str]) -> dict:
    out: dict[str, Any] = {"force_balance": False, "vp": 1, "cuda_graphs": "none"}
    for key in out:
        sources[key] = "default"
    found = (bridge.execution if bridge is not None else None) or {}
    for key, (bridge_key, _) in _EXECUTION.items():
        if found.get(bridge_key) is not None:
            out[key], sources[key] = found[bridge_key], where
    for key, value in given.items():
        if key in _EXECUTION:
            out[key], sources[key] = value, "flag"
    return out


def _check_given(given: Mapping[str, Any]) -> dict[str, Any]:
    """``benchmark``'s keys and value types (``AuditError`` naming the key)."""
    if not isinstance(given, Mapping):
        raise AuditError(f"`benchmark` must be a mapping of settings, got {type(given).__name__}")
    out = {}
    for key, value in given.items():
        if key not in BENCHMARK_KEYS:
            raise AuditError(f"`benchmark`: {key!r} is not a benchmark setting (one of {', '.join(BENCHMARK_KEYS)})")
        kind = _EXECUTION[key][1] if key in _EXECUTION else (bool if key.startswith("freeze_") else None)
        if key in ("recompute", "seq_policy"):
            allowed = RECOMPUTE if key == "recompute" else SEQ_POLICIES
            if value not in allowed:
                raise AuditError(f"`benchmark`: {key} must be one of {', '.join(allowed)}, got {value!r}")
        elif kind is bool or kind is str:
            if not isinstance(value, kind):
                raise AuditError(f"`benchmark`: {key} must be {kind.__name__}, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
            raise AuditError(f"`benchmark`: {key} must be an integer between 1 and {1 << 20}, got {value!r}")
        out[key] = value
    return out


def _bench_run(run: RunSpec, bridge: BridgeRun | None, given: dict[str, Any], sources: dict[str, str]) -> RunSpec:
    """The benchmark's RunSpec: ``benchmark`` > its Bridge config > the run's values."""
    values: dict[str, Any] = {}
    for key, bridge_key in _RUN_FIELDS.items():
        from_file = getattr(bridge, bridge_key, None) if bridge is not None else None
        if key in given:
            values[key], sources[key] = given[key], "flag"
        elif from_file is not None:
            values[key], sources[key] = from_file, "benchmark config"
        else:  # the run's value; one the run derives (DP, ETP, GBS unset) is derived again for this layout
            values[key] = getattr(run, key)
            sources[key] = "run" if values[key] is not None else "derived"
    if "seq_policy" in given:
        values["seq_policy"], sources["seq_policy"] = given["seq_policy"], "flag"
    else:
        values["seq_policy"], sources["seq_policy"] = run.seq_policy, "run"
    if values["global_batch_size"] is None:  # the run's global batch, not one derived again from another DP
        values["global_batch_size"], sources["global_batch_size"] = run.global_batch, "run"
    try:
        return run.replace(**values, sources={})
    except RunSpecError as e:
        raise AuditError(f"the benchmark's configuration is not a valid run: {e}") from None


def _diffs(run_side: Side, bench_side: Side) -> tuple[SettingDiff, ...]:
    out = []
    for key in BENCHMARK_KEYS:
        a, b = run_side.value(key), bench_side.value(key)
        if key == "global_batch_size":
            a, b = run_side.run.global_batch, bench_side.run.global_batch
        if key == "dp":
            a, b = run_side.run.data_parallel, bench_side.run.data_parallel
        if key == "etp":
            a, b = run_side.run.expert_tp, bench_side.run.expert_tp
        if a == b:
            continue
        kind = "noted" if key == "cuda_graphs" else "composed" if key in _LAYOUT else "measured"
        rs, bs = run_side.sources.get(key, "default"), bench_side.sources.get(key, "run")
        out.append(SettingDiff(key, a, b, rs, bs, kind))
    return tuple(out)


def _step_key(spec: RunSpec) -> tuple:
    """What the step one GPU runs depends on (two specs with the same key run the same step)."""
    return (
        spec.freeze_language_model,
        spec.freeze_vision_model,
        spec.freeze_vision_projection,
        spec.recompute,
        spec.micro_batch_size,
        spec.micro_batches,
        spec.seq_length,
        spec.seq_policy,
        spec.force_seq_length,
        spec.step_multiple(),
    )


def _links(run: RunSpec, bench: RunSpec) -> tuple[tuple[Link, ...], list[str]]:
    """The chain C_0 = run ... C_n = bench (module docstring)."""
    links: list[Link] = []
    notes: list[str] = []
    prev = run
    pending_names: list[str] = []
    pending_keys: list[str] = []
    for name, keys in LINK_GROUPS:
        changes = {k: getattr(bench, k) for k in keys if getattr(bench, k) != getattr(prev, k)}
        if not changes and not pending_names:
            continue
        if changes:
            pending_names.append(name)
        pending_keys += list(changes)
        try:
            nxt = prev.replace(**{k: getattr(bench, k) for k in pending_keys})
        except RunSpecError:
            continue  # not a valid run on its own: merged with the next link
        if _step_key(nxt) != _step_key(prev):
            label = "+".join(pending_names)
            action = " and ".join(ACTION.get(n, n) for n in pending_names)
            links.append(Link(label, tuple(pending_keys), nxt, action))
        elif pending_names:
            notes.append(f"{'+'.join(pending_names)}: the same step on one GPU (composed only)")
        prev, pending_names, pending_keys = nxt, [], []
    if pending_names:  # only the whole change is valid
        links.append(Link("+".join(pending_names), tuple(pending_keys), bench, "the remaining settings"))
    return tuple(links), notes


def resolve_benchmark(cfg: Any, run: RunSpec) -> Benchmark | None:
    """The benchmark beside the resolved run (None when ``cfg`` names no benchmark).

    Args:
        cfg: the ``AuditConfig`` (``benchmark_config``, ``benchmark``, ``bridge_config``).
        run: the training run's resolved ``RunSpec``.

    Returns:
        The ``Benchmark``; ``AuditError`` when its settings are bad or do not make a valid run.
    """
    if cfg.benchmark_config is None and not cfg.benchmark:
        return None
    given = _check_given(cfg.benchmark or {})
    run_bridge, bench_bridge = _bridge(cfg.bridge_config), _bridge(cfg.benchmark_config)
    run_sources = {k: run.sources.get(k, "default") for k in (*_RUN_FIELDS, "seq_policy")}
    run_exec = _execution(run_bridge, "bridge config", {}, run_sources)
    run_side = Side("run", run, run_exec, run_sources, cfg.bridge_config, getattr(run_bridge, "dataset_target", None))
    bench_sources: dict[str, str] = {}
    bench_run = _bench_run(run, bench_bridge, given, bench_sources)
    bench_exec = _execution(bench_bridge, "benchmark config", given, bench_sources)
    for key in _EXECUTION:  # a setting the benchmark does not state is the run's
        if bench_sources[key] == "default" and run_sources[key] != "default":
            bench_exec[key], bench_sources[key] = run_exec[key], "run"
    bench_side = Side(
        "benchmark",
        bench_run,
        bench_exec,
        bench_sources,
        cfg.benchmark_config,
        getattr(bench_bridge, "dataset_target", None),
    )
    links, notes = _links(run, bench_run)
    return Benchmark(run_side, bench_side, _diffs(run_side, bench_side), links, tuple(notes))


def arms(sources: tuple[str, ...], mocks: tuple[str, ...], bench: Benchmark | None) -> dict[str, tuple[str, RunSpec]]:
    """Every name the audit measures -> (the source whose data it reads, the RunSpec it runs under).

    Without a benchmark every source runs under the run's spec. With one: each mock under the benchmark's,
    real and synthetic under the run's, and the counterfactual arms (module docstring) when some link changes
    the step."""
    if bench is None:
        return {}
    run, bench_run = bench.run_side.run, bench.bench_side.run
    out: dict[str, tuple[str, RunSpec]] = {}
    for name in sources:
        out[name] = (name, bench_run if name in mocks else run)
    if not bench.links:
        return out
    for m in (s for s in sources if s in mocks):
        out[f"{m}@{RUN_ARM}"] = (m, run)
        for link in bench.links[:-1]:
            out[f"{m}@+{link.name}"] = (m, link.spec)
    if REAL in sources:
        out[REAL_ARM] = (REAL, bench_run)
    return out


def side_of(name: str, mocks) -> str:
    """Which configuration a measured name runs: "benchmark" (a mock, ``real@benchmark``), "run" (real, synthetic,
    ``m@run``) or the link whose intermediate configuration it is (``m@+<link>``)."""
    if not is_counterfactual(name):
        return "benchmark" if name in mocks else "run"
    suffix = name.split("@", 1)[1]
    return suffix if suffix in (RUN_ARM, "benchmark") else suffix.removeprefix("+")


def is_counterfactual(name: str) -> bool:
    """A counterfactual arm ("imagefree@run", "real@benchmark"), not a source of ``sources``."""
    return "@" in name
