"""Phase 4 of an audit: the measured rounds, and the record each measured global step leaves.

Rounds of ``block`` global steps per source, the order rotating every round (A B C D, B C D A, ...); before
each round but the first, the shapes of its steps are warmed (``Warmup.shapes``, outside the budget). Python's
garbage collector follows the run's ``manual_gc`` (``vlmdata.audit.workload.collector``: Bridge's recipes disable it
and collect between steps; here after every round, outside the timed steps and the budget). After each round
the stop rule decides (``StopRule.reason``: the last round's seconds against what is left before the run's
``deadline``). Per global step::

    t0 -> for each micro-batch: next(loader) (wait), forward + backward -> optimizer -> sync -> t2
    step_ms = t2 - t0; stage times (data_wait = the device idle while the host waited for data),
    per-micro-batch device times and shapes, FLOPs (computed outside the timed region), first-seen
    shape items (expected 0), census_match, sample keys (for the pairing check), the wall-clock start
    (``started_unix``, to line steps up with outside logs such as the GPU's clocks) and the milliseconds of
    garbage collection that ran inside the step (``gc_in_step_ms``; 0 under manual collection) and the
    graphs ``torch.compile`` built inside it (``graphs_compiled_in_step``; expected 0: the warm-up compiles).

A source that runs out of memory is a result (``run.oom``), not a crash: its records are dropped and the
rounds go on without it. ``global_record`` sums a global step's micro-batches into one record; a slice's
record is then composed into the run's step (``compose.compose_record``).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Callable, cast

import torch

from vlmdata.audit.analysis.compose import compose_record
from vlmdata.audit.analysis.metrics import FLOP_FIELDS, SUMMED
from vlmdata.audit.analysis.result_types import MicroRecord, StepRecord
from vlmdata.audit.phases.census import Sources
from vlmdata.audit.phases.live_loaders import LiveLoaders
from vlmdata.audit.phases.stop import StopRule
from vlmdata.audit.phases.warmup import Warmup
from vlmdata.audit.workload.collector import Collector
from vlmdata.audit.workload.kernels import compile_counters
from vlmdata.audit.workload.workloads import batch_shape

__all__ = ["MeasuredRounds", "micro_shape", "global_record", "SUMMED", "FLOP_FIELDS"]


class MeasuredRounds:
    """The measured rounds of one run and their records (module docstring)."""

    def __init__(
        self,
        run: Any,
        sources: Sources,
        warm: Warmup,
        loaders: LiveLoaders,
        stop: StopRule,
        progress: Callable | None = None,
        deadline: float | None = None,
    ):
        self.run, self.sources, self.warm, self.loaders, self.stop = run, sources, warm, loaders, stop
        self.progress = progress
        self.deadline = deadline  # the run's clock at which ``budget_s`` ends (``stop.StopRule``)
        self.records: dict[str, list[StepRecord]] = {name: [] for name in run.plan.names}
        self.rounds = 0
        spec = run.plan.res.run
        self.collector = Collector(spec.manual_gc, spec.manual_gc_interval)
        self.gc_seconds = 0.0  # manual collections between steps: outside the measuring budget

    def measure(self) -> tuple[int, str | None, float]:
        """Interleaved rounds until the stop rule says stop; returns (steps run, why it stopped, seconds)."""
        run, plan = self.run, self.run.plan
        n, min_steps = len(plan.names), self.stop.min_steps
        done, why = 0, None
        ctx = self.progress(n * min_steps) if self.progress else nullcontext(lambda k=1: None)
        with self.collector.measuring(), ctx as advance:
            t_measure = run.clock()
            while why is None:
                if done == min_steps and hasattr(advance, "set_total"):  # measuring on past min_steps
                    advance.set_total(n * plan.cap)
                t_round = run.clock()
                self._round(done, advance)
                done += plan.block
                self.rounds += 1
                t_gc = run.clock()  # the run's clock, as the budget's (the collector times itself for the report)
                self.collector.between_steps()
                self.gc_seconds += run.clock() - t_gc
                left = None if self.deadline is None else self.deadline - run.clock()
                why = self.stop.reason(self.records, done, run.clock() - t_round, left)
        return done, why, self._measuring(t_measure)

    def _measuring(self, t_measure: float) -> float:
        """Seconds spent measuring since ``t_measure`` (the budget counts these only: not the shape warm-ups
        inside rounds, not the manual garbage collections between them)."""
        return self.run.clock() - t_measure - self.warm.stats["in_rounds"] - self.gc_seconds

    def _round(self, done: int, advance) -> None:
        """One round: ``block`` global steps of every source, starting with the round's first source."""
        plan, sources = self.run.plan, self.run.plan.names
        if self.rounds:
            self.warm.shapes(range(plan.warmup + done, plan.warmup + min(plan.cap, done + plan.block)), True)
        for name in [sources[(self.rounds + j) % len(sources)] for j in range(len(sources))]:
            for j in range(plan.block):
                if name not in self.run.oom:
                    rec = self.global_step(name, done + j)
                    if rec is None:
                        self.records[name] = []
                    else:
                        self.records[name].append(rec)
                advance(1)

    def global_step(self, name: str, k: int) -> StepRecord | None:
        """One measured global step of ``name`` (its k-th); None when it ran out of memory."""
        run, n_micro = self.run, self.run.plan.micro_of(name)
        base = (run.plan.warmup + k) * n_micro
        run.configure(name)
        parts, keys, wait_kind = [], [], "steady"
        started = time.time()  # wall clock, to line the step up with outside logs (e.g. the GPU's clocks)
        gc_before = len(self.collector.in_step)
        graphs_before = compile_counters().get("unique_graphs", 0)
        with self.collector.timed_step():  # counts any garbage collection that runs inside the step
            t0 = run.clock()
            run.workload.begin_step(n_micro)
            try:
                for j in range(n_micro):
                    t_w = run.clock()
                    batch, kind = self.loaders.next(name, base + j)  # fetched at start-up: its wait is start-up's
                    wait = (run.clock() - t_w) * 1e3 if kind == "steady" else 0.0
                    if self.loaders.note_epoch(name) and kind == "steady":
                        wait_kind = "epoch_boundary"
                    batch = run.plan.spec(name).prepare(batch)
                    run.workload.micro(batch, wait)
                    parts.append({"batch": batch, "wait_ms": wait, "i": base + j})
                    keys += self.loaders.keys(name)
                r = run.workload.finish()
            except torch.OutOfMemoryError as e:
                run.out_of_memory(name, f"step {k}", e)
                return None
            t2 = run.clock()
        shapes = [self._micro_part(name, p) for p in parts]  # shapes and FLOPs: outside the timed region
        rec = global_record(shapes, r, step=k, rnd=self.rounds, step_ms=(t2 - t0) * 1e3, wait_kind=wait_kind, keys=keys)
        rec["started_unix"] = started
        rec["gc_in_step_ms"] = sum(ms for _, ms in self.collector.in_step[gc_before:])
        rec["graphs_compiled_in_step"] = compile_counters().get("unique_graphs", 0) - graphs_before
        return compose_record(rec, run.composition(name))

    def _micro_part(self, name: str, p: dict) -> dict:
        """A timed micro-batch's shape, FLOPs, wait, first-seen shape items and census match."""
        items = self.run.workload.shape_items(p["batch"])
        new = self.warm.seen(items)
        c = self.sources.censuses[name]
        match = items == c.items[p["i"]] if p["i"] < len(c.items) else None
        return {**micro_shape(self.run.workload, p["batch"]), "wait_ms": p["wait_ms"], "new_items": new, "match": match}


def micro_shape(workload, batch) -> dict:
    """Shape, tokens and FLOPs of one micro-batch (outside any timed region)."""
    f = workload.flops(batch)
    shape = batch_shape(batch)
    grid = batch.get("visual_inputs")
    grid = grid.get("image_grid_thw") if isinstance(grid, dict) else getattr(grid, "image_grid_thw", None)
    per_image = [] if grid is None else torch.as_tensor(grid).prod(-1).tolist()
    return {
        **shape,
        **{k: f.get(k) for k in FLOP_FIELDS},
        **{k: f[k] for k in SUMMED if k in f},
        "patch_sq": int(sum(n * n for n in per_image)),
    }


def global_record(
    parts: list[dict], r: dict, *, step: int, rnd: int, step_ms: float, wait_kind: str, keys: list
) -> StepRecord:
    """One record per global step: work summed over its micro-batches (``parts``: their ``micro_shape``
    plus ``wait_ms``, ``new_items``, ``match``), times from the workload's ``finish()`` (``r``)."""
    rec: dict[str, Any] = {
        "step": step,
        "round": rnd,
        "micro_batches": len(parts),
        "step_ms": step_ms,
        "data_wait_ms": float(r.get("data_wait_ms", sum(p["wait_ms"] for p in parts))),
        "loader_wait_ms": float(sum(p["wait_ms"] for p in parts)),
        "wait_kind": wait_kind,
        "times_ms": r["times_ms"],
        "peak_mem_bytes": r.get("peak_mem_bytes"),
        "loss": r.get("loss"),
    }
    for k in (*SUMMED, "patch_sq"):
        rec[k] = sum(int(p.get(k) or 0) for p in parts)
    for k in FLOP_FIELDS:
        vals = [p.get(k) for p in parts]
        rec["flops" if k == "total_flops" else k] = None if any(v is None for v in vals) else sum(v or 0 for v in vals)
    rec["micro"] = _micro_records(parts, r)
    rec["plain_layers"] = r.get("plain_layers")
    rec["visual_tokens_per_sample"] = [v for p in parts for v in p.get("visual_tokens_per_sample") or []]
    rec["first_seen_shapes"] = sum(p["new_items"] for p in parts)
    rec["census_match"] = None if any(p["match"] is None for p in parts) else all(p["match"] for p in parts)
    rec["keys"] = keys
    return cast(StepRecord, rec)  # every key of StepRecord but global_step's three (built by name above)


def _micro_records(parts: list[dict], r: dict) -> list[MicroRecord]:
    """Each micro-batch's device time and work (the straggler model's input)."""
    micro_ms = r.get("micro_ms") or [None] * len(parts)
    decoder_ms = r.get("micro_decoder_ms") or [None] * len(parts)
    return [
        {
            "ms": ms,
            "decoder_ms": dec,
            "wait_ms": p["wait_ms"],
            "tokens_total": p.get("tokens_total"),
            "patches": p.get("patches"),
            "patch_sq": p.get("patch_sq"),
        }
        for p, ms, dec in zip(parts, micro_ms, decoder_ms)
    ]
