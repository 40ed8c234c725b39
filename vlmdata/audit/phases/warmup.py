"""Phase 3 of an audit: the warm-up, so that one-off per-shape costs fall outside the timed steps.

``Warmup`` holds the shape items already warmed and what the warm-up cost:

- ``first_step()``: one full global step (optimizer state, gradient sync, main-gradient buffers) per configuration
  measured (``plan.names``: with a benchmark, each configuration's own optimizer path), untimed;
- ``shapes(steps)``: the census's micro-batches of these global steps that bring a shape item nothing warmed
  yet run forward and backward untimed (no optimizer step), one round ahead of the measured rounds; where
  every new item is the vision tower's (``batch_shapes.vision_only``: a new patch count or image grid in a
  micro-batch whose token shape is warmed, e.g. every micro-batch padded to ``seq_length``), the tower alone
  runs (``warm_vision``; ``stats["vision_batches"]``): on the H200 a padded Qwen3-VL-30B-A3B micro-batch is
  about 0.5 s of decoder and a few tens of ms of tower, and nearly every real micro-batch brings a new patch
  count. Under torchrun every rank warms the same number of batches (``agree_max``). Between rounds the time
  is kept apart (``in_rounds``): it is not part of the measuring budget;
- ``seen(items)``: the items a timed step brought that were not warmed (expected none), now warmed.

``warm_up(run, warm, loaders)`` is the phase: the first step, the first round's shapes, then each source's
live loader started and its untimed global steps (``live_loaders.LiveLoaders``); it returns the loaders' part
in seconds and keeps it on the warm-up (``Warmup.loader_seconds``), which ``describe()`` reports
(``vlmdata.describe``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch

from vlmdata.audit.phases.census import Census
from vlmdata.audit.sources.registry import REAL
from vlmdata.audit.workload.batch_shapes import vision_only
from vlmdata.audit.workload.distributed import agree_max
from vlmdata.audit.workload.workloads import materialize

__all__ = ["Warmup", "warm_up"]


class Warmup:
    """The warm-up's state (module docstring)."""

    def __init__(self, run: Any, censuses: dict[str, Census]):
        self.run, self.censuses = run, censuses
        self.warmed: set = set()
        self.stats = {"batches": 0, "vision_batches": 0, "seconds": 0.0, "in_rounds": 0.0, "full_steps": 0}
        self.loader_seconds = 0.0  # the live loaders' start and untimed steps (``warm_up``)
        self.loader_model_micro = 0  # the most micro-batches of an untimed step that ran the model

    def first_step(self) -> None:
        """One full global step of real's first census batch, untimed."""
        run = self.run
        t = run.clock()
        firsts = {}  # one full step per configuration measured (its optimizer path): the first name of each
        for name in run.plan.names:
            firsts.setdefault(run.plan.spec(name), name)
        for name in firsts.values():
            try:
                run.configure(name)
                run.workload.begin_step(1)
                run.workload.micro(materialize(self.censuses[name].batches[0]))
                run.workload.finish()
            except torch.OutOfMemoryError as e:
                run.out_of_memory(name, "first training step", e)
        self.stats["seconds"] += run.clock() - t
        self.stats["full_steps"] = len(firsts)

    def _todo(self, steps: range) -> list[tuple[str, dict, bool]]:
        """The census batches of ``steps`` that bring a shape item not warmed yet (now counted as warmed), each
        with whether its new items are all the vision tower's."""
        run, todo = self.run, []
        for name in run.plan.names:
            if name in run.oom:
                continue
            n_micro = run.plan.micro_of(name)
            c = self.censuses[name]
            for i in range(steps.start * n_micro, min(len(c.items), steps.stop * n_micro)):
                new = c.items[i] - self.warmed
                if new:
                    todo.append((name, c.batches[i], vision_only(new)))
                    self.warmed.update(new)
        return todo

    def shapes(self, steps: range, between_rounds: bool = False) -> None:
        """Warm every shape item the census's micro-batches of these global steps bring (module docstring)."""
        run = self.run
        if not run.plan.cfg.warm_shapes:
            return
        todo = self._todo(steps)
        n = int(agree_max(run.dist, len(todo)))
        t = run.clock()
        tower = getattr(run.workload, "warm_vision", None)
        for i in range(n):
            name, batch, vision = todo[min(i, len(todo) - 1)] if todo else (REAL, self.censuses[REAL].batches[0], False)
            if name in run.oom:
                continue
            try:
                run.configure(name)
                if vision and tower is not None and tower(materialize(batch)):
                    self.stats["vision_batches"] += 1
                else:
                    run.workload.warm(materialize(batch))
            except torch.OutOfMemoryError as e:
                run.out_of_memory(name, "warm-up", e)
        dt = run.clock() - t
        self.stats["batches"] += n
        self.stats["seconds"] += dt
        if between_rounds:  # warm-ups between rounds: not part of the measuring budget
            self.stats["in_rounds"] += dt

    def seen(self, items: frozenset) -> int:
        """How many of a timed micro-batch's shape items were not warmed (they are now)."""
        new = items - self.warmed
        self.warmed.update(new)
        return len(new)

    def describe(self) -> dict[str, Any]:
        """The measurement's ``warmup`` entry."""
        return {
            "shape_batches": self.stats["batches"],
            "vision_batches": self.stats["vision_batches"],
            "full_steps": self.stats["full_steps"],
            "shape_items": len(self.warmed),
            "seconds": self.stats["seconds"],
            "loader_steps_per_source": self.run.plan.warmup,
            "loader_model_micro": self.loader_model_micro,
            "loader_seconds": self.loader_seconds,
        }


def warm_up(run: Any, warm: Warmup, loaders: Any, phase: Any = None) -> float:
    """The warm-up phase (module docstring); returns the seconds the live loaders' start and steps took.
    ``phase(name, detail)``: the caller's progress around it ("compile" first when blocks are compiled: the first
    full steps compile them)."""
    plan = run.plan
    phase = phase or _no_phase
    parts = (run.workload.describe() or {}).get("options", {}).get("compile") or "none"
    if parts != "none":
        with phase("compile", f"torch.compile of the {parts} blocks in the first full step of each configuration"):
            warm.first_step()
    with phase("warm-up", "a full step per configuration, every new shape forward and backward, the loaders started"):
        if parts == "none":
            warm.first_step()
        warm.shapes(range(0, min(plan.horizon, plan.warmup + plan.block)))
        t = run.clock()
        loaders.start()
        warm.loader_model_micro = loaders.untimed_steps(plan.warmup)
    warm.loader_seconds = run.clock() - t
    return warm.loader_seconds


@contextmanager
def _no_phase(name: str, detail: str = ""):
    yield
