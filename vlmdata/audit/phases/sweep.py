"""``vlmdata audit --sweep KEY=V1,V2``: every configuration of a grid, on every source, the same way.

Keys on the reference workload (``SWEEP_KEYS``): ``micro_batch_size`` (the loader's), ``freeze_vision``
(0/1), ``recompute`` (none | selective | full) and, under torchrun, ``parallel`` (ddp | fsdp); the grid is
the product of the sweeps. A user ``--step module:function`` workload receives every sweep value as a
keyword argument (any key). Each configuration is one full audit (``run_audit``: paired sources, every
shape warmed, interleaved rounds) with a model built for it; a source that runs out of memory is a result
(``oom``), not a crash, and the sweep goes on. Each configuration keeps its measured steps
(``resample.step_columns``); ``decide_sweep`` then draws their bootstrap replicates once
(``resample.SweepReplicates``) and gives the decisions (``decisions.decide_configs``: each source's best set,
which choices each mock gets wrong), every knob's effect with its interval and the knobs a mock cannot see
(``knob_effects``), and which configurations fit each GPU card (``cards.card_fits``); the sweep's verdict
(``sweep_verdict``) is MISLEADING, UNDECIDED (exit 4, like a single audit) or OK.
"""

from __future__ import annotations

import gc
import itertools
import math
import os
from dataclasses import replace
from typing import Any, Callable

import torch

from vlmdata.audit.analysis.cards import card_fits
from vlmdata.audit.analysis.decisions import decide_configs, label
from vlmdata.audit.analysis.knob_effects import knob_effects
from vlmdata.audit.analysis.resample import SweepReplicates, step_columns
from vlmdata.audit.analysis.result_types import AuditResult
from vlmdata.audit.analysis.verdict import MORE
from vlmdata.audit.phases.runner import run_audit
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.workloads import PARALLEL, RECOMPUTE

SWEEP_KEYS = ("micro_batch_size", "freeze_vision", "recompute", "parallel")
MAX_CONFIGS = 256  # configurations of one sweep (the grid is checked by its size before it is built)


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("0", "false", "no", "off"):
        return False
    if low in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{v!r} is not 0 or 1")


def _scalar(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def parse_sweep(items: list[str], *, user_step: bool = False, distributed: bool = False) -> dict[str, list]:
    """``["micro_batch_size=1,2,4", "recompute=none,selective"]`` -> ``{key: [values]}`` (typed, checked).

    Any key is accepted for a user step (values int, float or str); the reference workload takes
    ``SWEEP_KEYS``, ``parallel`` only under torchrun."""
    if isinstance(items, str) or not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise AuditError(f"`sweep` must be a list of 'KEY=V1,V2' strings, got {type(items).__name__}")
    sweep: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key or not vals:
            raise AuditError(f"`sweep` needs KEY=V1,V2,..., got {item!r}")
        if key in sweep:
            raise AuditError(f"`sweep` key {key!r} given twice")
        try:
            if key == "micro_batch_size":
                typed = [int(v) for v in vals]
                if min(typed) < 1:
                    raise ValueError("micro_batch_size must be >= 1")
            elif key == "freeze_vision":
                typed = [_bool(v) for v in vals]
            elif key == "recompute":
                typed = vals
                if set(vals) - set(RECOMPUTE):
                    raise ValueError(f"recompute takes {', '.join(RECOMPUTE)}")
            elif key == "parallel":
                typed = vals
                if set(vals) - set(PARALLEL):
                    raise ValueError(f"parallel takes {', '.join(PARALLEL)}")
                if not distributed and not user_step:
                    raise ValueError("parallel needs several ranks (torchrun --nproc-per-node N)")
            elif user_step:
                typed = [_scalar(v) for v in vals]
            else:
                raise ValueError(f"the reference workload sweeps {', '.join(SWEEP_KEYS)}")
        except ValueError as e:
            raise AuditError(f"`sweep` {key}: {e}") from None
        sweep[key] = typed
    if math.prod(len(v) for v in sweep.values()) > MAX_CONFIGS:  # counted, not built (3 x 1,000 values: 10^9)
        sizes = " x ".join(str(len(v)) for v in sweep.values())
        raise AuditError(f"`sweep` gives {sizes} configurations; at most {MAX_CONFIGS} (each is a whole audit)")
    return sweep


def grid(sweep: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination, the first key varying slowest."""
    keys = list(sweep)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(sweep[k] for k in keys))]


def _compact(report: dict) -> dict:
    """A configuration's report without per-step records (the sweep keeps summaries, the verdict and each
    step's work, time and peak memory: ``resample.step_columns``)."""
    out = {k: v for k, v in report.items() if k not in ("sources", "environment")}
    out["sources"] = {
        n: {k: v for k, v in s.items() if k not in ("records", "per_rank")}
        | ({"steps": step_columns(s["records"])} if s.get("records") else {})
        for n, s in report["sources"].items()
    }
    return out


def cells(report: dict) -> dict[str, dict]:
    """Per source: rates, peak memory, oom and the kept steps (what ``decide_configs`` reads)."""
    out = {}
    for name, src in report["sources"].items():
        s = src.get("summary")
        oom = src.get("oom")
        out[name] = {
            "oom": bool(oom),
            "rates": (s or {}).get("rates") or {},
            "peak_mem_bytes": (s or {}).get("peak_mem_bytes") if s else (oom or {}).get("peak_mem_bytes"),
        }
        if s and src.get("steps"):
            out[name]["steps"] = src["steps"]
    return out


def decide_sweep(results: list[dict], *, threshold: float, memory_limit_gb: float | None = None, seed: int = 0) -> dict:
    """The decisions, the knob effects, the fit per GPU card and the verdict of a sweep's configurations
    (``[{"values", "label", "report"}]``; also for sweeps merged from parts), from one set of replicates.

    Returns:
        ``{"decisions", "knob_effects", "memory", "verdict"}``.
    """
    configs = [
        {
            "values": r["values"],
            "sources": cells(r["report"]),
            "paired": (r["report"].get("measurement") or {}).get("method") == "interleaved",
        }
        for r in results
    ]
    reps = SweepReplicates(configs, seed=seed)
    decisions = decide_configs(configs, threshold=threshold, memory_limit_gb=memory_limit_gb, replicates=reps)
    effects = knob_effects(configs, replicates=reps)
    memory = card_fits(configs, threshold=threshold, memory_limit_gb=memory_limit_gb, replicates=reps)
    verdict = sweep_verdict(results, decisions, effects, memory)
    return {"decisions": decisions, "knob_effects": effects, "memory": memory, "verdict": verdict}


def run_sweep(
    cfg: AuditConfig,
    sweep: dict[str, list],
    *,
    build: Callable[[AuditResult], dict],
    out_dir: str | None = None,
    dist=None,
    memory_limit_gb: float | None = None,
    workload_factory: Callable[[dict], Any] | None = None,
    on_config: Callable[[int, int, dict], None] | None = None,
    **run_kwargs,
) -> dict:
    """Run every configuration of ``sweep`` and decide.

    Args:
        cfg: the audit settings every configuration starts from.
        sweep: ``parse_sweep``'s result.
        build: turns ``run_audit``'s result into a report (``report.build_report`` after gathering ranks).
        out_dir: generated inputs of configuration i go to ``out_dir/config-i``.
        dist: ``distributed.DistInfo`` under torchrun.
        memory_limit_gb: mark configurations whose peak memory exceeds it as not fitting.
        workload_factory: ``values -> workload`` instead of the one each configuration names (tests).
        on_config: called with (index, count, values) before each configuration.
        run_kwargs: passed to ``run_audit`` (progress, clock, loader_factory).

    Returns:
        ``{"kind": "sweep", "sweep", "configs": [{"values", "label", "report"}], "decisions"}``.
    """
    configs = grid(sweep)
    results = []
    environment = workload = None
    for i, values in enumerate(configs):
        if on_config:
            on_config(i, len(configs), values)
        kwargs = dict(run_kwargs)
        if workload_factory is not None:
            kwargs["workload"] = workload_factory(values)
        sub = os.path.join(out_dir, f"config-{i}") if out_dir else None
        report = _one_configuration(cfg, values, build, sub, dist, kwargs)
        environment = environment or report.get("environment")
        workload = workload or report.get("workload")
        results.append({"values": values, "label": label(values), "report": _compact(report)})
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    decided = decide_sweep(results, threshold=cfg.threshold, memory_limit_gb=memory_limit_gb, seed=cfg.seed)
    return {
        "schema": "vlmdata.audit/2",
        "kind": "sweep",
        "config": cfg.to_dict(),
        "environment": environment,
        "workload": workload,
        "sweep": {k: list(v) for k, v in sweep.items()},
        "configs": results,
        **decided,
    }


def _one_configuration(cfg: AuditConfig, values: dict, build: Callable, out_dir, dist, kwargs: dict) -> dict:
    """One configuration's report: an audit with the sweep values (a user step gets all of them, the reference
    workload all but ``micro_batch_size``, which is the run's); every source out of memory when the model
    itself does not fit."""
    workload_values = {k: v for k, v in values.items() if k != "micro_batch_size"}
    c = replace(
        cfg,
        micro_batch_size=values.get("micro_batch_size", cfg.micro_batch_size),
        workload_options={**cfg.workload_options, **(values if cfg.step else workload_values)},
    )
    try:
        return build(run_audit(c, out_dir=out_dir, dist=dist, **kwargs))
    except torch.OutOfMemoryError as e:  # e.g. the model itself does not fit: every source is oom
        if dist is not None:
            raise
        oom = {"where": "model", "error": str(e).splitlines()[0]}
        return {"sources": {s: {"summary": None, "oom": oom} for s in cfg.sources}, "verdict": None}


def sweep_verdict(
    results: list[dict], decisions: dict, effects: dict | None = None, memory: dict | None = None
) -> dict:
    """MISLEADING when every choice a mock's data allows costs more than the threshold of real throughput
    (``decisions``), when a mock cannot measure a knob that moves real throughput (``effects``), or when any
    configuration's own verdict is MISLEADING; else UNDECIDED when any of those is undecided (a gate must not
    pass it: measure longer), else OK. The line says what makes it so first (decisions a mock gets wrong, knobs it
    cannot measure), then decisions it gets right, then the configurations' own verdicts and the gap at real's best
    configuration; ``notes``: the mocks' choices that do not fit a GPU card on real data."""
    effects = effects or {}
    # a configuration real data does not fit is the decisions' finding (a mock that picks it regrets it), not a
    # gap of the configuration's own: its out-of-memory verdict is left out here
    status_of = {
        r["label"]: v.get("status") for r in results if not (v := r["report"].get("verdict") or {}).get("out_of_memory")
    }
    gap_bad = [lab for lab, st in status_of.items() if st == "MISLEADING"]
    undecided = [lab for lab, st in status_of.items() if st == "UNDECIDED"]
    if decisions["misleading"] or gap_bad or effects.get("blind"):
        status = "MISLEADING"
    elif undecided or decisions.get("undecided") or effects.get("undecided"):
        status = "UNDECIDED"
    else:
        status = "OK"
    best = decisions["per_source"].get("real", {}).get("best")
    at_best = next((r["report"].get("verdict") for r in results if r["label"] == best), None)
    wrong = bool(decisions["misleading"] or decisions.get("undecided"))  # decisions a mock gets wrong come first
    findings = [decisions["line"]] if wrong else []
    if effects.get("line"):
        findings.append(effects["line"])
    if not wrong:  # the decisions it gets right, after the knobs it cannot measure
        findings.append(decisions["line"])
    line = f"{status}: " + "; ".join(findings)
    if gap_bad:
        line += f"; the mock figure overstates real in {len(gap_bad)} of {len(results)} configurations"
    if undecided:
        line += f"; the mock figure is undecided in {len(undecided)} of {len(results)} configurations: {MORE}"
    if at_best:
        line += f"; at real's best configuration ({best}): {at_best['line']}"
    return {
        "status": status,
        "line": line,
        "decisions_misleading": decisions["misleading"],
        "decisions_undecided": decisions.get("undecided", []),
        "knobs_blind": effects.get("blind", []),
        "knobs_undecided": effects.get("undecided", []),
        "configs_misleading": gap_bad,
        "configs_undecided": undecided,
        "notes": (memory or {}).get("lines", []),
    }
