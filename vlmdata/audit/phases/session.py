"""One ``vlmdata audit`` run as one library call: ``run_session(cfg, ...)``.

In order: the checks that fail in a second instead of after minutes of measuring (the input paths carry no
credential, the device exists, the output folder can be written and replaces only an earlier audit's files:
``vlmdata.audit.settings.guard``); the torch CPU threads; the process group under torchrun
(``distributed.init_distributed``); the watchdog of a user ``step`` (no single call outlasts ``budget_s``);
the plan (``preview.preview``: every setting, the estimates, handed to ``on_plan`` before anything is built and
kept in the report); then one audit (``runner.run_audit``) or, with ``sweep``, every configuration of the grid
(``sweep.run_sweep``), every rank's result gathered into the report (``report.build_report``). Rank 0 writes
the report's files; no rank leaves before it has (torchrun kills the others when one exits), and the process
group is shut down whatever happened.

The library prints nothing: ``progress`` and ``on_config`` are the caller's (called on rank 0 only), and the
returned ``AuditSession`` carries the report, the files written and whether this is rank 0 (the one that
reports; the other ranks' reports are rank 0's figures too).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence, cast

import torch
import torch.distributed

from vlmdata.audit.analysis.result_types import AuditResult
from vlmdata.audit.phases.preview import preview
from vlmdata.audit.phases.runner import run_audit
from vlmdata.audit.phases.sweep import parse_sweep, run_sweep
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.guard import check_device, check_out_dir, check_paths
from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.distributed import DistInfo, gather, init_distributed, shutdown
from vlmdata.audit.workload.user_step import reset_step_limit, set_step_limit
from vlmdata.options_util import env_int, shown

__all__ = ["AuditSession", "run_session", "plan_only"]


@dataclass
class AuditSession:
    """What ``run_session`` returns."""

    report: dict
    paths: dict[str, str] | None  # report.json / .md / .html written (rank 0 with ``out_dir``), else None
    main: bool  # this process is rank 0 (or there is no process group)


def _preflight(cfg, out_dir, memory_limit_gb, threads, callbacks, sweep=()) -> None:
    """``run_session``'s own arguments (the settings are ``AuditConfig``'s): ``AuditError`` naming the parameter;
    then the paths and the device (``guard``) and the torch threads, what ``run_session`` and ``plan_only`` both
    check before anything is built."""
    if not isinstance(cfg, AuditConfig):
        raise AuditError(f"`cfg` must be an AuditConfig, not {type(cfg).__name__}")
    if out_dir is not None and not isinstance(out_dir, (str, os.PathLike)):
        raise AuditError(f"`out` must be a folder path, not {type(out_dir).__name__}")
    m = memory_limit_gb
    if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m < math.inf):
        raise AuditError(f"`memory_limit_gb` must be a finite number > 0, not {shown(m)}")
    if m is not None and not sweep:  # it was ignored: a run the user believed checked against a card
        raise AuditError(
            "`memory_limit_gb` judges the configurations of a sweep (`sweep`); one audit has none to judge: add a "
            "sweep or leave it out (on CUDA the report gives every source's peak memory)"
        )
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 4096):
        raise AuditError(f"`threads` must be an integer 1..4096, not {shown(threads)}")
    if any(c is not None and not callable(c) for c in callbacks):
        raise AuditError("`progress`, `on_config`, `phase` and `on_plan` must be callables or None")
    check_paths(real=cfg.real, profile=cfg.profile)
    check_device(cfg.device, cfg.loader)
    if threads:
        torch.set_num_threads(threads)


def run_session(
    cfg: AuditConfig,
    *,
    out_dir: str | None = None,
    sweep: Sequence[str] = (),
    memory_limit_gb: float | None = None,
    threads: int | None = None,
    progress: Callable | None = None,
    on_config: Callable[[int, int, dict], None] | None = None,
    phase: Callable | None = None,
    on_plan: Callable[[dict], None] | None = None,
    started: float | None = None,
) -> AuditSession:
    """Check, measure, report (module docstring).

    Args:
        cfg: the run's settings.
        out_dir: where report.json / .md / .html (and the synthetic twin) go; None: nowhere.
        sweep: ``KEY=V1,V2`` items (``sweep.parse_sweep``); empty: one audit.
        memory_limit_gb: with a sweep, configurations whose peak memory exceeds it do not fit (without a sweep:
            an ``AuditError``, as it would judge nothing).
        threads: torch CPU threads (None: torch's).
        progress: ``progress(total)`` -> context manager yielding ``advance(n=1)`` (rank 0).
        on_config: called with (index, count, values) before each configuration of a sweep (rank 0).
        phase: ``phase(name, detail)`` -> context manager around each phase before the measured rounds (rank 0).
        on_plan: called with the plan (``preview.preview``) before anything is built (rank 0); the report keeps
            it as ``plan``.
        started: the ``time.perf_counter()`` reading when the command began (the CLI's: its imports count);
            None: this call's start. ``budget_s`` and the report's ``wall_s`` count from it.

    Returns:
        An ``AuditSession``; the report has ``wall_s``.
    """
    _preflight(cfg, out_dir, memory_limit_gb, threads, (progress, on_config, phase, on_plan), sweep)
    if out_dir:  # before measuring: the folder can be written and replaces only an earlier audit's files
        check_out_dir(out_dir, real=cfg.resolved_real(), profile=cfg.profile)
    t0 = time.perf_counter() if started is None else started
    info = init_distributed(cfg.device)
    step_limit = set_step_limit(cfg.measure_settings()["budget_s"], hard=True)  # no --step call outlasts it
    main = info is None or info.is_main
    try:
        plan = preview(cfg, info) if main else None  # before anything is built; the report keeps it
        if plan is not None and on_plan is not None:
            on_plan(plan)
        shown = {"progress": progress, "phase": phase} if main else {}
        report = _measure(cfg, info, sweep, out_dir, memory_limit_gb, on_config, **shown, started=t0)
        report["wall_s"] = time.perf_counter() - t0
        if plan is not None:
            report["plan"] = plan
        paths = write_report(report, out_dir) if (main and out_dir) else None
        if info is not None:  # no rank exits before rank 0 has written (torchrun kills the others)
            torch.distributed.barrier()
    finally:
        shutdown(info)
        reset_step_limit(step_limit)
    return AuditSession(report, paths, main)


def plan_only(
    cfg: AuditConfig, *, threads: int | None = None, sweep: Sequence[str] = (), memory_limit_gb: float | None = None
) -> dict:
    """The plan of ``cfg`` and nothing else (``vlmdata audit --plan``): the same checks as ``run_session``, then
    ``preview.preview``; no model is built, nothing is measured.

    Args:
        cfg: the run's settings.
        threads: torch CPU threads (None: torch's).
        sweep: ``KEY=V1,V2`` items, checked as the run checks them (``sweep.parse_sweep``; the plan is one audit's).
        memory_limit_gb: checked as the run checks it (a sweep's only).

    Returns:
        The plan (``preview.preview``).
    """
    # the run's checks (--threads 100000 would start 100,000 threads)
    _preflight(cfg, None, memory_limit_gb, threads, (), sweep)
    n_configs = 1
    if sweep:  # a grid the run refuses passed --plan with exit 0
        grid = parse_sweep(list(sweep), user_step=bool(cfg.step), distributed=env_int("WORLD_SIZE", 1, low=1) > 1)
        n_configs = math.prod(len(v) for v in grid.values())
    plan = preview(cfg)
    if n_configs > 1:  # the plan is one audit's: say what the sweep multiplies
        plan["notes"] = [
            *plan.get("notes", []),
            f"a sweep of {n_configs} configurations: the steps, times and budget above are one configuration's; "
            f"each runs as one audit with its own `budget_s`, so the sweep takes up to about {n_configs} x that",
        ]
    return plan


def _measure(
    cfg: AuditConfig,
    info: DistInfo | None,
    sweep: Sequence[str],
    out_dir: str | None,
    memory_limit_gb: float | None,
    on_config: Callable | None,
    progress: Callable | None = None,
    phase: Callable | None = None,
    started: float | None = None,
) -> dict:
    """One audit's report, or a sweep's (``started``: when the command began, on ``time.perf_counter``: one audit's
    budget counts from it; a sweep's configurations each have their own)."""
    main = info is None or info.is_main

    def build(result: AuditResult) -> dict:  # the typed run report (result_types.Report), held as any report is
        return cast(dict, build_report(gather(result, info), threshold=cfg.threshold, seed=cfg.seed))

    if not sweep:
        return build(run_audit(cfg, out_dir=out_dir, dist=info, progress=progress, phase=phase, started=started))
    grid = parse_sweep(list(sweep), user_step=bool(cfg.step), distributed=info is not None)
    return run_sweep(
        cfg,
        grid,
        build=build,
        out_dir=out_dir,
        dist=info,
        memory_limit_gb=memory_limit_gb,
        progress=progress,
        on_config=on_config if main else None,
    )
