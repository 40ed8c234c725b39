"""Run one training workload over every source, so that the figures depend on the data and nothing else.

A measured **step** is one global step of Megatron Bridge's ``train_step`` on one data-parallel rank:
``micro_batches = GBS / (MBS * DP)`` micro-batches of forward and backward, then one optimizer step
(``vlmdata.audit.settings.run_spec``; the settings resolve in ``vlmdata.audit.planning.resolve`` into an ``AuditPlan``,
``vlmdata.audit.planning.plan``). ``run_audit`` runs the phases, each a unit with its own state:

1. **Inputs and census** (``census.take_census``): real, the image-free view of real, the synthetic twin of
   real (paired: step k of each sees the same sample positions), the mocks; each source's loader run once in
   *shapes* mode for every micro-batch the measurement may use, each batch padded as the run's step pads it.
   Every sample must fit ``seq_length``; every new shape item marks its batch for warm-up; each sample's
   tokens and image patches are recorded (the straggler model's input).
2. **Warm-up** (``warmup.warm_up``, ``warmup.Warmup``, ``live_loaders.LiveLoaders``): one full global step,
   then the marked batches forward and backward untimed, one round ahead, so one-off per-shape costs fall
   here (under torchrun every rank warms the same number of batches); then each source's live loader starts
   (workers forked once; the first batch's wait is reported as start-up) and ``warmup`` untimed global steps
   per source run.
3. **Measured rounds** (``rounds.MeasuredRounds``): rounds of ``block`` global steps per source, the order
   rotating every round; each global step's record (stage times, per-micro-batch device times and shapes,
   FLOPs, first-seen shape items, census match, sample keys).
4. **Stop rule** (``stop.StopRule``): after each round past ``min_steps`` (default one epoch of real), the
   paired bootstrap intervals of every gap decide, or ``max_steps``, or the ``budget_s`` deadline: counted from
   the command's start (``started``), less ``REPORT_SHARE`` of it kept for the analysis and the report.
5. **Result** (``result``): each source's records over whole epochs of real, the simulated stragglers, how
   it was measured.

``clock`` is injectable (tests drive a fake workload on a fake clock).
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from vlmdata.audit.analysis.compose import Composition
from vlmdata.audit.analysis.compose import plan as compose_plan
from vlmdata.audit.analysis.layout import expert_share
from vlmdata.audit.analysis.result_types import AuditResult
from vlmdata.audit.phases.census import Census, census, take_census
from vlmdata.audit.phases.live_loaders import LiveLoaders
from vlmdata.audit.phases.result import environment, header, iter_records, measurement, sources_result, straggler_model
from vlmdata.audit.phases.rounds import MeasuredRounds, global_record, micro_shape
from vlmdata.audit.phases.stop import StopRule
from vlmdata.audit.phases.warmup import Warmup, warm_up
from vlmdata.audit.planning.plan import (
    AuditPlan,
    default_loader_factory,
    fit_default_seq_length,
    loader_options,
    make_plan,
)
from vlmdata.audit.settings.benchmark import side_of
from vlmdata.audit.settings.config import AuditConfig, default_real, default_workers
from vlmdata.audit.sources.registry import MOCK_SOURCES, SOURCES, AuditError, Input, real_shards
from vlmdata.audit.workload.model import part_params
from vlmdata.audit.workload.user_step import UserWorkload
from vlmdata.audit.workload.workloads import ReferenceWorkload, as_global_steps

REPORT_SHARE = 0.03  # of budget_s kept after the last round for the analysis and the report (on the H200 the
# 150 s budget ended 2-7 s late without it: the plan before the runner and the report after it went uncounted)

__all__ = [  # the runner's names, importable from here as before the phases had their own modules
    "AuditConfig",
    "AuditError",
    "AuditRun",
    "Census",
    "run_audit",
    "SOURCES",
    "MOCK_SOURCES",
    "census",
    "default_real",
    "default_workers",
    "default_loader_factory",
    "environment",
    "fit_default_seq_length",
    "global_record",
    "iter_records",
    "loader_options",
    "micro_shape",
]


@dataclass
class AuditRun:
    """What every phase of one run shares: the plan, the workload, the loader factory, the process group, the
    clock, the composition of a slice, and the sources that ran out of memory (a result, not a crash)."""

    plan: AuditPlan
    workload: Any
    factory: Callable
    dist: Any
    clock: Callable[[], float]
    work_dir: str
    comp: Composition
    oom: dict[str, dict] = field(default_factory=dict)
    comps: dict[str, Composition] = field(default_factory=dict)  # per measured name, when it differs from comp

    def composition(self, name: str) -> Composition:
        """How ``name``'s measured steps compose into its configuration's steps."""
        return self.comps.get(name, self.comp)

    def configure(self, name: str) -> None:
        """Put the workload in ``name``'s configuration (freezing, recompute) before its steps."""
        if self.plan.arm_map and hasattr(self.workload, "configure"):
            self.workload.configure(self.plan.spec(name))

    def open(self, inp: Input, images: str | None = None) -> tuple[Any, dict]:
        """A loader for ``inp`` (``plan.loader_options``) and its options as a dict."""
        opts = loader_options(self.plan, inp, images=images)
        try:
            return self.factory(inp.source, opts), opts.to_dict()
        except (ValueError, OSError) as e:
            raise AuditError(f"cannot open source {inp.name}: {e}") from None

    def out_of_memory(self, name: str, where: str, e: BaseException) -> None:
        """Record that ``name`` ran out of memory (``where``) and let the workload recover."""
        if self.dist is not None:  # ranks cannot agree to skip a collective half-way: an OOM ends a torchrun audit
            raise e
        self.oom[name] = {
            "where": where,
            "error": str(e).splitlines()[0][:300],
            "peak_mem_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        }
        self.workload.recover()


@contextmanager
def _no_phase(name: str, detail: str = ""):
    yield


def _build_words(plan: AuditPlan, workload) -> str:
    """What the model build builds, in words (the progress line)."""
    if workload is not None or plan.cfg.step:
        return "the given workload"
    res, fit = plan.res, plan.res.fit
    part = f"{res.layers} of {res.shape.layers} decoder layers" if res.sliced else f"{res.shape.layers} decoder layers"
    size = f", {fit.params.total / 1e9:.2f}B parameters" if fit is not None else ""
    return f"{res.shape.family} {part}{size} on {plan.device}, random weights"


def reference_workload(plan: AuditPlan, dist=None):
    """The workload ``plan`` names: the user's ``step``, or the reference model with the run's settings."""
    cfg, res = plan.cfg, plan.res
    if cfg.step:
        return UserWorkload(cfg.step, plan.device, cfg.workload_options)
    run = res.run
    specs = [spec for _, spec in plan.arm_map.values()] or [run]
    options = {  # a part is frozen when every configuration measured freezes it (``configure`` switches)
        "freeze_language_model": all(s.freeze_language_model for s in specs),
        "freeze_vision_model": all(s.freeze_vision_model for s in specs),
        "freeze_vision_projection": all(s.freeze_vision_projection for s in specs),
        "recompute": run.recompute if not plan.arm_map else "switch",
        "attention": cfg.attention,
        "compile": plan.compile,
        "peft": res.peft,
        **cfg.workload_options,
    }
    logits = plan.logits
    return ReferenceWorkload(
        res.shape, plan.device, logits, dist, seed=cfg.seed, layers=res.layers, experts=res.experts, **options
    )


def start_run(
    cfg: AuditConfig, factory: Callable, out_dir: str | None, dist, clock, workload=None, phase: Callable = _no_phase
) -> AuditRun:
    """The plan, the workload (built here unless given) and the composition of the run's step."""
    plan = make_plan(cfg, dist)
    if workload is None and not cfg.step and plan.res.fit is not None:
        plan.res.fit.check()  # what will not fit is refused before anything is allocated (estimate.fit_slice)
    main = dist is None or dist.is_main
    work_dir = out_dir if (out_dir and main) else tempfile.mkdtemp(prefix="vlmdata-audit-")
    with phase("model build", _build_words(plan, workload)):
        work = as_global_steps(workload if workload is not None else reference_workload(plan, dist))
    check_switchable(plan, work)
    summary = (work.describe() or {}).get("model") or {}
    comp = (
        compose_plan(plan.res.run, plan.res.shape, summary, link_gbps=cfg.link_gbps)
        if summary.get("params_trainable")
        else Composition(1, 1, 1.0)
    )
    run = AuditRun(plan, work, factory, dist, clock, work_dir, comp)
    if plan.arm_map and summary.get("params_trainable"):
        for name in plan.names:  # each configuration's optimizer shard: its own trainable parameters
            run.configure(name)
            own = work.describe().get("model") or {}
            run.comps[name] = compose_plan(plan.spec(name), plan.res.shape, own, link_gbps=cfg.link_gbps)
    return run


def benchmark_block(run: AuditRun) -> dict:
    """The benchmark's part of the result: both sides, every measured name's data and configuration, what the
    layout composition and the degenerate-benchmark check need (``vlmdata.audit.analysis.attribution`` reads it)."""
    plan = run.plan
    bench = plan.bench
    assert bench is not None
    shape = plan.res.shape
    return {
        **bench.describe(),
        "arms": {
            n: {"data": plan.base(n), "micro_batches": plan.micro_of(n), "config": side_of(n, MOCK_SOURCES)}
            for n in plan.names
        },
        "layers": shape.layers,
        "expert_share": expert_share(shape.text),
        "expert_imbalance": plan.cfg.expert_imbalance,
        "part_params": part_params(shape),
    }


def check_switchable(plan: AuditPlan, work) -> None:
    """A workload that cannot switch freezing or recompute between sources (a ``--step``) runs a benchmark only
    when the two configurations differ in what the loader does."""
    if not plan.arm_map or hasattr(work, "configure"):
        return
    keys = ("freeze_language_model", "freeze_vision_model", "freeze_vision_projection", "recompute")
    specs = {tuple(getattr(s, k) for k in keys) for _, s in plan.arm_map.values()}
    if len(specs) > 1:
        raise AuditError(
            "the benchmark's configuration differs from the run's in freezing or recompute, which a `step` "
            "workload cannot switch between sources; give the benchmark those settings of the run"
        )


def run_audit(
    cfg: AuditConfig,
    *,
    loader_factory: Callable | None = None,
    out_dir: str | None = None,
    dist=None,
    progress: Callable | None = None,
    clock: Callable[[], float] = time.perf_counter,
    workload=None,
    phase: Callable | None = None,
    started: float | None = None,
) -> AuditResult:
    """Measure every source of ``cfg`` (see the module docstring).

    Args:
        cfg: the run's settings.
        loader_factory: ``make_loader``-compatible factory (default ``vlmdata.loaders.make_loader``).
        out_dir: where generated inputs (the synthetic twin) are written (a temporary folder when None).
        dist: ``distributed.DistInfo`` under torchrun, else None.
        progress: ``progress(total)`` -> context manager yielding ``advance(n=1)``.
        clock: seconds; the timer of every measured interval.
        workload: a workload object (``vlmdata.audit.workload.workloads``' interface) instead of the one ``cfg`` names.
        phase: ``phase(name, detail)`` -> context manager around each phase before the rounds (model build,
            census, compile, warm-up): the caller's progress.
        started: the ``clock`` reading when the command began (its checks and plan ran before this call); the
            budget counts from it (default: now).

    Returns:
        ``{"config", "run", "environment", "workload", "measurement", "sources": {name: {"records", "loader",
        "world_size", "paired", "definition", "startup_wait_ms", "census", "pairing", "oom"}}, "composition",
        "straggler_model"}`` (typed: ``vlmdata.audit.analysis.result_types.AuditResult``); a record is one global
        step (``StepRecord``).
    """
    t_start = clock()
    phase = phase or _no_phase
    run = start_run(cfg, loader_factory or default_loader_factory(), out_dir, dist, clock, workload, phase)
    shards = real_shards(run.plan.real)
    result = header(run)
    try:
        t_prep = clock()
        plan = run.plan
        with phase("census", f"{len(plan.names)} sources x {plan.horizon} steps, shapes only (no image decoded)"):
            sources = take_census(run, shards)
        stop = StopRule(run, sources)
        prepare_s = clock() - t_prep
        warm, loaders = Warmup(run, sources.censuses), LiveLoaders(run, sources.inputs)
        warm_up(run, warm, loaders, phase)  # the loaders' seconds: ``warm.loader_seconds``, in its describe()
        # the budget counts from the command's start (build, census and warm-up included) and keeps room for the
        # analysis and the report after the last round (REPORT_SHARE of it)
        deadline = (t_start if started is None else started) + plan.budget_s * (1 - REPORT_SHARE)
        rounds = MeasuredRounds(run, sources, warm, loaders, stop, progress, deadline=deadline)
        done, why, measure_s = rounds.measure()
        window = stop.window(done)
        result["sources"] = sources_result(run, sources, loaders, rounds.records, window)
        result["composition"] = run.comp.describe()
        if run.plan.bench is not None:
            result["benchmark"] = benchmark_block(run)
        result["straggler_model"] = straggler_model(run, sources.censuses, rounds.records, window)
        seconds = {"prepare": prepare_s, "measure": measure_s, "total": clock() - t_start}
        result["measurement"] = measurement(run, stop, rounds, warm, done, why, seconds)
    finally:
        run.workload.close()
    return result
