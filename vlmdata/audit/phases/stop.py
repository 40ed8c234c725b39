"""Phase 5 of an audit: the stop rule, checked after every measured round.

``StopRule(run, sources)`` knows ``min_steps`` (given, else one epoch of real, at most ``max_steps``) and
real's epoch in global steps. ``reason(records, done, elapsed)`` says why to stop after a round (None: go on):

- ``max_steps``: every source has run ``max_steps`` global steps;
- ``budget``: another round, as long as the last one took, would end past ``budget_s`` counted from the start of
  the run (``deadline``: the model build, the census and the warm-up count too), whatever ``min_steps`` says:
  the budget is a promise (at least one round is always measured; the plan says up front what runs before it);
- ``settled``: past ``min_steps``, on a window of whole epochs of real just completed, the paired bootstrap
  interval of every gap decides the verdict (``verdict.settled``);
- ``out_of_memory``: no source is left to measure, or real (or every other source) ran out of memory.

Under torchrun every rank stops together: the cap and the budget stop everyone, "settled" only when every
rank is settled. ``window(done)`` is the steps the figures use: whole epochs of real when an epoch is a whole
number of global steps and one was measured (every sample weighs the same), else every step run.
"""

from __future__ import annotations

import math
from typing import Any

from vlmdata.audit.analysis.verdict import settled
from vlmdata.audit.phases.census import Sources
from vlmdata.audit.sources.registry import REAL
from vlmdata.audit.workload.distributed import agree_max, agree_min

__all__ = ["StopRule", "window", "STOP_RULE"]

STOP_RULE = (
    "after every round (`block` steps of every source, in rotating order) measuring stops as soon as: every gap's "
    "95% interval decides the verdict on whole epochs of real, once `min_steps` ran (settled); or `max_steps` ran; "
    "or another round would end past `budget_s` counted from the command's start (budget); or a source ran out of "
    "memory with no gap left to measure"
)


def window(done: int, epoch: int | None) -> int:
    """Global steps the figures use (module docstring)."""
    return done if not epoch or done < epoch else done - done % epoch


class StopRule:
    """The stop rule of one run (module docstring)."""

    def __init__(self, run: Any, sources: Sources):
        self.run, self.epoch = run, sources.epoch
        plan, cfg = run.plan, run.plan.cfg
        if cfg.min_steps is not None:
            self.min_steps = min(cfg.min_steps, plan.cap)
        elif sources.epoch_micro:
            self.min_steps = min(plan.cap, max(1, math.ceil(sources.epoch_micro / plan.n_micro)))
        else:
            self.min_steps = plan.cap

    def window(self, done: int) -> int:
        return window(done, self.epoch)

    def open_items(self, records: dict[str, list]) -> tuple[bool, list[str]]:
        """(every gap decided, the gaps still open) on ``records`` (``verdict.settled``)."""
        cfg, world = self.run.plan.cfg, self.run.plan.world
        runs = {name: {"records": recs, "world_size": world, "interleaved": True} for name, recs in records.items()}
        return settled(
            runs, threshold=cfg.threshold, proxy_tolerance=cfg.proxy_tolerance, precision=cfg.precision, seed=cfg.seed
        )

    def reason(self, records: dict[str, list], done: int, elapsed: float, left: float | None = None) -> str | None:
        """Why to stop after this round (None: go on); the same on every rank. ``elapsed``: the last round's
        seconds; ``left``: seconds left before the deadline (None: no deadline)."""
        oom = self.run.oom
        measured = {k: v for k, v in records.items() if k not in oom}
        if not measured:
            stop = "out_of_memory"
        elif REAL in oom or len(measured) < 2:  # no gap to settle: the others' figures still count
            stop = "out_of_memory" if done >= min(self.min_steps, self.run.plan.cap) else None
        else:
            stop = self._rule(measured, done, elapsed, left)
        if self.run.dist is not None:  # every rank stops together
            stop = _agree(self.run.dist, stop)
        return stop

    def _rule(self, records: dict[str, list], done: int, elapsed: float, left: float | None) -> str | None:
        """The rule on the sources still measured (the settled check runs on the whole-epoch window)."""
        plan = self.run.plan
        if done >= plan.cap:
            return "max_steps"
        if done >= self.min_steps:
            w = self.window(done)
            fresh = self.epoch is None or w == done or done - w < plan.block  # a window just completed
            if fresh and self.open_items({k: v[:w] for k, v in records.items()})[0]:
                return "settled"
        if left is not None and elapsed > left:  # the next round, as long as this one, would end past the deadline
            return "budget"
        return None


def _agree(dist, reason: str | None) -> str | None:
    """One stop decision for all ranks: the cap and the budget stop everyone; 'settled' only when every
    rank is settled."""
    hard = agree_max(dist, 1 if reason in ("max_steps", "budget") else 0)
    if hard:
        return reason or "budget"
    return "settled" if agree_min(dist, 1 if reason == "settled" else 0) else None
