"""The result of one audit run (what ``runner.run_audit`` returns, ``report.build_report`` reads).

``header(run)``: the config, the resolved run, the environment and the workload, made before anything is
measured. ``sources_result(...)``: each source's records (the stop rule's window), loader, start-up wait,
census and pairing with real. ``straggler_model(...)``: data-parallel stragglers simulated from each
source's census and a cost model fitted on every measured micro-batch (``vlmdata.audit.analysis.straggler_model``).
``measurement(...)``: how the figures were obtained (rounds, stop reason, warm-up, seconds, garbage collection,
the samples every step holds per rank and, in ``epoch_wrap``, the sources repeated within a step because an epoch
of theirs on this rank is shorter than one step: ``census.wrap_note``). The records these hand the report are
typed (``vlmdata.audit.analysis.result_types``: ``AuditResult``, ``SourceResult``, ``StepRecord``, ``Measurement``).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any, Iterable

import numpy
import torch
import transformers

from vlmdata import __version__
from vlmdata.audit.analysis.result_types import AuditResult, CompileSummary, Measurement, SourceResult, StepRecord
from vlmdata.audit.analysis.straggler_model import Sample, calibrate, fit_cost_model, simulate
from vlmdata.audit.sources.registry import REAL, AuditError
from vlmdata.audit.workload.compiled import compile_stats, fallback_note
from vlmdata.audit.workload.kernels import compile_counters

__all__ = [
    "DP_SIZES",
    "cpu_model",
    "environment",
    "header",
    "sources_result",
    "straggler_model",
    "measurement",
    "iter_records",
]
DP_SIZES = (8, 64, 512, 4096)  # data-parallel sizes the straggler model predicts


def environment(device: str) -> dict:
    """Versions, the device and the host's load."""
    dev = torch.device(device)
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "vlmdata": __version__,
        "device": str(dev),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "load_average": _load(),
    }
    if dev.type == "cuda":
        env.update(
            device_name=torch.cuda.get_device_name(dev),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            # torch.cuda.nccl is loaded by `import torch` but torch.cuda does not import it by name
            nccl=".".join(map(str, torch.cuda.nccl.version())),  # pyright: ignore[reportAttributeAccessIssue]
        )
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The host CPU's model name (Linux: /proc/cpuinfo's first "model name"; else the platform's processor): a
    launch-bound step's time, and so a mock/real ratio, moves with the host's single-thread speed (docs/RESULTS.md,
    fourth families set), so two reports are compared knowing their hosts."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _load() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def header(run: Any) -> AuditResult:
    """The result's parts known before measuring."""
    return {
        "config": run.plan.config_dict(),
        "run": run.plan.res.describe(),
        "environment": environment(run.plan.device),
        "workload": run.workload.describe(),
        "sources": {},
    }


def _pairing(records: list[StepRecord], real: list[StepRecord]) -> dict[str, Any]:
    """How many measured steps of a paired source saw exactly the samples (keys) real saw at that step."""
    same = sum(1 for a, b in zip(records, real) if a.get("keys") and a.get("keys") == b.get("keys"))
    return {"steps": len(records), "same_samples": same, "paired_fraction": same / len(records) if records else None}


def sources_result(
    run: Any, sources: Any, loaders: Any, records: dict[str, list[StepRecord]], window: int
) -> dict[str, SourceResult]:
    """Every source's entry of the result (module docstring)."""
    out: dict[str, SourceResult] = {}
    for name in run.plan.names:
        c, inp = sources.censuses[name], sources.inputs[name]
        recs = records[name][:window]
        run.configure(name)
        trains = run.workload.trains() if hasattr(run.workload, "trains") else None
        out[name] = {
            "trains": trains,  # what trained under this name's configuration (the backward's FLOPs as it ran)
            "records": recs,
            "loader": loaders.record(name),
            "world_size": run.plan.world,
            "paired": inp.paired,
            "definition": inp.definition,
            "startup_wait_ms": loaders.startup.get(name),
            "census": {
                "micro_batches": len(c.items),
                "samples": sum(len(b) for b in c.samples),
                "longest_tokens": c.longest,
                "mismatched_steps": sum(1 for r in recs if r["census_match"] is False),
                "epoch_samples": c.epoch_samples(),
                "rank_epoch_samples": c.rank_epoch,
            },
            "pairing": _pairing(recs, records[REAL][:window]) if inp.paired and REAL not in run.oom else None,
            "oom": run.oom.get(name),
        }
    return out


def straggler_model(
    run: Any, censuses: dict, records: dict[str, list[StepRecord]], window: int, dp_sizes=DP_SIZES
) -> dict | None:
    """The simulated stragglers (module docstring); None without per-micro-batch times."""
    same = {n for n in records if run.plan.spec(n) == run.plan.res.run}  # the run's configuration only
    recs = {n: v[:window] for n, v in records.items() if n not in run.oom and v and n in same}
    micro = [
        {**m, "source": n}
        for n, rs in recs.items()
        for r in rs
        for m in r.get("micro") or []
        if m.get("ms") is not None and m.get("tokens_total") is not None
    ]
    if REAL not in recs or len(micro) < 2:
        return None
    opt = [r["times_ms"].get("optimizer", 0.0) + r["times_ms"].get("grad_sync", 0.0) for r in recs[REAL]]
    spec, n_micro = run.plan.res.run, run.plan.n_micro
    try:
        cost = calibrate(fit_cost_model(micro, optimizer_ms=sum(opt) / len(opt)), micro)
        census: dict[str, Sequence[Sample]] = {
            n: [Sample(int(t), tuple(p)) for t, p in censuses[n].epoch_samples()] for n in recs
        }
        sim = simulate(
            census,
            cost,
            micro_batch_size=spec.micro_batch_size,
            micro_batches_per_rank=n_micro,
            dp_sizes=dp_sizes,
            padded_len=lambda longest, b: spec.padded_length(longest),
            sync="micro_batch" if spec.ep > 1 else "step",
            seed=run.plan.cfg.seed,
        )
    except (AuditError, ValueError) as e:
        return {"error": str(e)}
    sim["scaling"] = (
        f"weak scaling: {n_micro} micro-batches of {spec.micro_batch_size} per rank and step at every DP "
        "(GBS grows with DP)"
    )
    return sim


def measurement(
    run: Any, stop: Any, rounds: Any, warm: Any, done: int, why: str | None, seconds: dict[str, float]
) -> Measurement:
    """The result's ``measurement`` (module docstring); ``seconds``: prepare, measure, total (the loaders' warm-up
    seconds are the warm-up's own: ``Warmup.describe``)."""
    plan, cfg = run.plan, run.plan.cfg
    n = len(cfg.sources)
    w = stop.window(done)
    measured = {k: v[:w] for k, v in rounds.records.items() if k not in run.oom}
    open_items = stop.open_items(measured)[1] if REAL in measured and len(measured) > 1 else []
    return {
        "method": "interleaved",
        "unit": "global step",
        "micro_batches_per_step": plan.n_micro,
        "block": plan.block,
        "rounds": rounds.rounds,
        "steps_run": done,
        "steps_per_source": w,
        "real_epoch_steps": stop.epoch,
        "real_epoch_micro_batches": rounds.sources.epoch_micro,
        "samples_per_step": plan.n_micro * plan.res.run.micro_batch_size,
        "epoch_wrap": rounds.sources.notes,
        "stop": why,
        "open": open_items,
        "min_steps": stop.min_steps,
        "max_steps": plan.cap,
        "budget_s": plan.budget_s,
        "precision": cfg.precision,
        "order_first_round": [cfg.sources[j % n] for j in range(n)],
        "warmup": warm.describe(),
        "prepare_seconds": seconds["prepare"],
        "measure_seconds": seconds["measure"],
        "total_seconds": seconds["total"],
        "load_average_end": _load(),
        "gc": rounds.collector.describe(),
        "compile": _compile_summary(run, rounds),
    }


def _compile_summary(run, rounds) -> CompileSummary | None:
    """Which blocks ran through torch.compile, the graphs it holds and how many it built inside timed steps; per
    part (``compiled.compile_stats``) its graphs, recompiles, compile seconds and whether it fell back to eager,
    with the note that says what a fallback does to the figures."""
    d = run.workload.describe() or {}
    parts = (d.get("options") or {}).get("compile")
    if not parts or parts == "none":
        return None
    in_steps = int(sum(r.get("graphs_compiled_in_step") or 0 for recs in rounds.records.values() for r in recs))
    by_part = compile_stats()  # per part: graphs, recompiles, compile seconds, fallback and its reason
    return {
        "parts": parts,
        "blocks": d.get("compiled_blocks"),
        "graphs": compile_counters().get("unique_graphs"),
        "graphs_in_timed_steps": in_steps,
        "by_part": by_part,
        "compile_seconds": sum(float(s.get("compile_seconds") or 0.0) for s in by_part.values()),
        "fallbacks": [p for p, s in by_part.items() if s.get("fallback")],
        "notes": [n] if (n := fallback_note(by_part, in_steps)) else [],
    }


def iter_records(result: AuditResult) -> Iterable[tuple[str, StepRecord]]:
    """(source, record) of every measured step."""
    for name, src in result["sources"].items():
        for r in src["records"]:
            yield name, r
