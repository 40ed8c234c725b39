"""The audit's plan, before anything is built: ``preview(cfg)`` (``vlmdata audit --plan``; a normal run shows it
first and keeps it in the report's ``plan``).

In a few seconds and without building a model: the run resolved (``plan.make_plan``: every setting and where it
came from, the benchmark's side and the arms that will be measured, the notes), the model and the part of it one
GPU builds with parameter counts and estimated peak memory against this device's memory (``estimate``; a part that
will not fit is named with what would), the real data's first micro-batches read in shapes mode (no image decoded)
for their FLOPs, the device's matmul rate measured, and from them the expected steps and wall time of every phase:
model build, census, warm-up (with compilation), measured rounds. ``budget`` says what ``budget_s`` bounds and what
it cannot (``vlmdata.audit.phases.stop``). Every time is an estimate, said as such.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from vlmdata.audit.phases.live_loaders import UNTIMED_MODEL_MICRO
from vlmdata.audit.phases.stop import STOP_RULE
from vlmdata.audit.planning.estimate import EFFICIENCY, count_params, device_flops, human_gib
from vlmdata.audit.planning.plan import AuditPlan, loader_options, make_plan
from vlmdata.audit.settings.config import AuditConfig, device_kind
from vlmdata.audit.sources.real_data import real_shards
from vlmdata.audit.sources.registry import REAL, AuditError, prepare_input
from vlmdata.audit.workload.flops import step_flops
from vlmdata.dataset.resolve import open_dataset
from vlmdata.loaders.api import make_loader

__all__ = ["preview", "SAMPLE_MICRO_BATCHES", "setting_rows", "duration"]

SAMPLE_MICRO_BATCHES = 8  # real micro-batches read (shapes only) for the step's FLOPs
BUILD_PARAMS_PER_S = {"cpu": 150e6, "cuda": 1.5e9}  # random initialisation (rough)
COMPILE_S = {"none": 0.0, "vision": 40.0, "decoder": 40.0, "all": 80.0}  # torch.compile in the warm-up (rough)


def setting_rows(plan: AuditPlan) -> list[tuple[str, Any, str]]:
    """(setting, value, where it came from) for every setting of the run, then the measurement's."""
    res, cfg = plan.res, plan.cfg
    d = res.run.describe()
    rows = [(k, d.get(k), d["sources"].get(k, "default")) for k in d["sources"] if k != "default_micro_batches"]
    if cfg.gpus is not None:  # the GPU count DP was derived from
        rows.insert(next(i for i, r in enumerate(rows) if r[0] == "dp"), ("gpus", cfg.gpus, "flag"))
    rows += [
        ("model", f"{res.shape.name} ({res.shape.family})", res.sources.get("model", "default")),
        ("slice_layers", res.layers or res.shape.layers, res.sources.get("slice_layers", "default")),
        ("micro_batches_per_step", res.run.micro_batches, "derived"),
    ]
    given = set(cfg.to_dict()) - {"benchmark", "loader_options", "workload_options", "sources"}
    for name, value in (
        ("device", plan.device),
        ("compile", plan.compile),
        ("logits", plan.logits),
        ("max_steps", plan.cap),
        ("block", plan.block),
        ("budget_s", plan.budget_s),
        ("warmup", plan.warmup),
        ("num_workers", plan.workers),
    ):
        explicit = name in given and getattr(cfg, name, None) is not None and name != "device"
        rows.append((name, value, "flag" if explicit or (name == "device" and cfg.device != "cpu") else "default"))
    return rows


def _sample_real(plan: AuditPlan) -> list[dict]:
    """The FLOPs and tokens of real's first micro-batches under the run's padding (shapes mode, nothing decoded)."""
    cfg, res = plan.cfg, plan.res
    inp = prepare_input(REAL, real_shards(plan.real), seed=cfg.seed, model=res.shape.loader_model)
    opts = loader_options(plan, inp, workers=0, images="shapes")
    config = res.shape.sliced(res.layers, res.experts)
    out = []
    it = make_loader(inp.source, opts).iter_inline()
    while len(out) < SAMPLE_MICRO_BATCHES:
        try:
            batch = next(it)
        except StopIteration:
            break
        except ValueError as e:  # e.g. a packed row longer than seq_length: as the census says it (next_batch)
            raise AuditError(f"source {REAL}: {e}") from None
        out.append(step_flops(config, res.run.prepare(batch), logits=plan.logits))
    return out


def _real_samples(real: str) -> int | None:
    """Samples in the real dataset by its manifest, None when it does not say or says no positive count (the
    plan's estimate only: the run counts real's epoch from the samples its census reads)."""
    try:
        manifest = open_dataset(real).manifest or {}
    except (OSError, ValueError, AuditError):
        return None
    written = (manifest.get("accounting") or {}).get("written")
    return written if isinstance(written, int) and not isinstance(written, bool) and written > 0 else None


def _steps(plan: AuditPlan) -> dict[str, Any]:
    """min_steps (given, else one epoch of real on this rank), max_steps (whole rounds)."""
    cfg, per_step = plan.cfg, plan.n_micro * plan.res.run.micro_batch_size
    samples = _real_samples(plan.real)
    epoch = math.ceil(samples / plan.world / per_step) if samples else None
    if cfg.min_steps is not None:
        low, why = min(cfg.min_steps, plan.cap), "given"
    elif epoch:
        low, why = (
            min(plan.cap, epoch),
            f"one epoch of real ({samples} samples by its manifest, {per_step} per step and rank)",
        )
    else:
        low, why = plan.cap, "max_steps (real's epoch unknown)"
    return {"min": low, "min_why": why, "max": plan.cap, "real_samples": samples, "real_epoch_steps": epoch}


def _times(plan: AuditPlan, flops: list[dict], rate: float, steps: dict) -> dict[str, Any]:
    """Expected seconds of every phase (module docstring)."""
    kind = device_kind(plan.device)
    fit = plan.res.fit
    params = fit.params.total if fit is not None else 0
    micro_flops = sum(f["total_flops"] for f in flops) / len(flops) if flops else 0.0
    step_s = {n: micro_flops * plan.micro_of(n) / rate for n in plan.names} if rate else {}
    round_s = sum(step_s.values()) * plan.block
    build = 2.0 + params / BUILD_PARAMS_PER_S[kind]
    compile_s = COMPILE_S.get(plan.compile, 0.0)
    # the shape warm-up: about a round of micro-batches, each the tower alone where the token shape is fixed
    # (warmup.Warmup.shapes); the untimed steps: the model on UNTIMED_MODEL_MICRO micro-batches of each
    total = sum(f["total_flops"] for f in flops)
    tower = sum(f["vision_flops"] + f["projector_flops"] for f in flops) / total if total else 1.0
    shapes_s = round_s * (tower if plan.res.run.fixed_length else 1.0)
    untimed_s = plan.warmup * sum(
        s * min(plan.micro_of(n), UNTIMED_MODEL_MICRO) / plan.micro_of(n) for n, s in step_s.items()
    )
    warm = shapes_s + untimed_s + compile_s
    census = 1.0 + 0.002 * plan.horizon * plan.n_micro * plan.res.run.micro_batch_size * len(plan.cfg.sources)
    fixed = build + census + warm
    room = plan.budget_s - fixed
    by_budget = max(1, int(room // round_s)) if round_s and room > 0 else 1
    expected = min(steps["max"], max(steps["min"], 1), by_budget) if round_s else steps["min"]
    return {
        "step_s": step_s,
        "round_s": round_s,
        "model_build_s": build,
        "census_s": census,
        "warmup_s": warm,
        "shape_warmup_s": shapes_s,
        "untimed_steps_s": untimed_s,
        "compile_s": compile_s,
        "before_measuring_s": fixed,
        "expected_steps": expected,
        "measure_s": expected * round_s / plan.block,
        "total_s": fixed + expected * round_s / plan.block,
        "rate_flops": rate,
        "step_flops": micro_flops,
    }


def duration(seconds: float) -> str:
    """Seconds in words: "45 s", "3.5 min", "2.1 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _budget(plan: AuditPlan, t: dict) -> dict[str, Any]:
    fixed, budget = t["before_measuring_s"], plan.budget_s
    line = (
        f"`budget_s` {duration(budget)} bounds the whole command: the model build (~{duration(t['model_build_s'])}), "
        f"the census (~{duration(t['census_s'])}) and the warm-up (~{duration(t['warmup_s'])}"
        + (f", compilation ~{duration(t['compile_s'])} of it" if t["compile_s"] else "")
        + ") run first and count; then a round is measured only when it can end before the budget does"
        + " (at least one round: one step per source)"
    )
    if fixed >= budget:
        line += (
            f"; they alone are expected to take ~{duration(fixed)}, past the budget, which cannot bound them: only "
            f"one round (~{duration(t['round_s'])}) will be measured"
        )
    return {"budget_s": budget, "line": line, "unbounded_s": fixed if fixed >= budget else 0.0}


def preview(cfg: AuditConfig, dist=None, *, measure_rate: bool = True) -> dict[str, Any]:
    """The plan of ``cfg`` (module docstring).

    Args:
        cfg: the run's settings.
        dist: the process group's info under torchrun, or None.
        measure_rate: time a few GEMMs on the device for the time estimates (False: no times).

    Returns:
        ``{"settings", "benchmark", "arms", "notes", "model", "measured", "memory", "steps", "times", "budget",
        "stop_rule", "plan_seconds"}``.
    """
    t0 = time.perf_counter()
    plan = make_plan(cfg, dist)
    res, fit = plan.res, plan.res.fit
    whole = count_params(res.shape, None, None, res.run, res.peft)
    flops = _sample_real(plan)
    rate = device_flops(plan.device) * EFFICIENCY[device_kind(plan.device)] if measure_rate else 0.0
    steps = _steps(plan)
    times = _times(plan, flops, rate, steps) if rate else None
    notes = [*res.notes, *(plan.bench.notes if plan.bench is not None else ())]
    params = {f.name for f in dataclasses.fields(AuditConfig)}
    return {
        "settings": [{"setting": k, "value": v, "from": s, "param": k in params} for k, v, s in setting_rows(plan)],
        "benchmark": plan.bench.describe() if plan.bench is not None else None,
        "arms": list(plan.names),
        "notes": notes,
        "model": {
            "name": res.shape.name,
            "family": res.shape.family,
            "layers": res.shape.layers,
            "params": whole.describe(),
        },
        "measured": fit.describe() if fit is not None else None,
        "memory_line": _memory_line(fit, plan.device),
        "padding_rule": res.run.padding_rule(),
        "steps": steps,
        "times": times,
        "budget": _budget(plan, times) if times else None,
        "stop_rule": STOP_RULE,
        "plan_seconds": time.perf_counter() - t0,
        "device": plan.device,
        "cuda": torch.device(plan.device).type == "cuda",
    }


def _memory_line(fit: Any, device: str) -> str | None:
    if fit is None:
        return None
    where = "one GPU" if torch.device(device).type == "cuda" else "this machine"
    m = fit.memory
    verdict = "fits" if fit.fits else "does NOT fit"
    return (
        f"about {human_gib(m['total'])} at its largest micro-batch (training state {human_gib(m['state'])}, "
        f"decoder {human_gib(m['decoder'])}, vision {human_gib(m['vision'])}, logits {human_gib(m['logits'])}) "
        f"against {human_gib(fit.available)} of {fit.available_what} on {where}: {verdict}"
    )
