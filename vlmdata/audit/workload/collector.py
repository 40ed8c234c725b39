"""Python's garbage collector during the measured rounds, set as Megatron Bridge's training loop sets it.

Bridge (0.6.2, ``training/train.py``): with ``train.manual_gc`` the loop calls ``gc.disable(); gc.collect()``
before its first step and ``gc.collect()`` every ``train.manual_gc_interval`` steps (``maybe_run_manual_gc``;
0: never); without it Python's threshold-based collector runs wherever allocation triggers it. Bridge's
``TrainingConfig`` defaults to ``manual_gc=False``, and every recipe built on ``recipes/common.py`` (the
Qwen3-VL ones included) sets ``manual_gc=True, manual_gc_interval=100``: ``RunSpec``'s default is the
recipes'.

Why it matters for a measurement: a full (generation-2) collection of an audit process walks every tracked
object (about 465 thousand after a small-preset run: 150-260 ms each on this project's 2-core CPU). Under
automatic collection it lands inside some timed steps at random, and a launch-bound step (the image-free
decoder at 256 tokens per micro-batch) stalls for its whole length: host noise that is not in the run the
user reports when they train with a recipe.

Contract (``Collector(manual, interval)``):

- ``with collector.measuring():`` around the measured rounds. Manual: one ``gc.collect()`` first, then
  ``gc.disable()``; the previous state is restored on exit. Automatic: the collector is left as it is.
- ``with collector.timed_step():`` around each timed global step: every collection that runs inside it is
  counted with its generation and duration (``gc.callbacks``), in both modes; manual mode expects none.
- ``collector.between_steps()`` (outside any timed step): manual: a timed ``gc.collect()`` (what Bridge does
  every ``interval`` steps; here after every round, so garbage stays bounded); automatic: nothing. Returns
  the seconds it took.
- ``describe()``: ``{"mode", "interval", "between_steps": {"n", "ms_min", "ms_median", "ms_max"},
  "amortised_ms_per_step"`` (Bridge's cost per step: the median collection / ``interval``; not added to the
  step times, which are shown without it), ``"in_timed_steps": {"n", "ms", "by_generation"}}``.
"""

from __future__ import annotations

import gc
import statistics
import time
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["Collector", "describe_line"]


class Collector:
    """The garbage-collection policy of one measured run (module docstring)."""

    def __init__(self, manual: bool = True, interval: int = 100):
        self.manual, self.interval = bool(manual), int(interval)
        self.between_ms: list[float] = []
        self.in_step: list[tuple[int, float]] = []  # (generation, ms) of collections inside timed steps
        self._inside = False
        self._started: float | None = None

    def _callback(self, phase: str, info: dict) -> None:
        if not self._inside:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.in_step.append((int(info.get("generation", -1)), (time.perf_counter() - self._started) * 1e3))
            self._started = None

    @contextmanager
    def measuring(self) -> Iterator[Collector]:
        was_enabled = gc.isenabled()
        gc.callbacks.append(self._callback)
        try:
            if self.manual:
                self.between_steps()
                gc.disable()
            yield self
        finally:
            if self._callback in gc.callbacks:
                gc.callbacks.remove(self._callback)
            if was_enabled:
                gc.enable()

    @contextmanager
    def timed_step(self) -> Iterator[None]:
        self._inside = True
        try:
            yield
        finally:
            self._inside = False
            self._started = None

    def between_steps(self) -> float:
        """Manual mode: one full collection, timed; automatic: nothing. Seconds spent."""
        if not self.manual:
            return 0.0
        t = time.perf_counter()
        gc.collect()
        dt = time.perf_counter() - t
        self.between_ms.append(dt * 1e3)
        return dt

    def describe(self) -> dict[str, Any]:
        b = self.between_ms
        median = statistics.median(b) if b else None
        by_gen: dict[str, dict[str, float]] = {}
        for gen, ms in self.in_step:
            d = by_gen.setdefault(str(gen), {"n": 0, "ms": 0.0})
            d["n"] += 1
            d["ms"] += ms
        return {
            "mode": "manual" if self.manual else "automatic",
            "interval": self.interval,
            "between_steps": {
                "n": len(b),
                "ms_min": min(b) if b else None,
                "ms_median": median,
                "ms_max": max(b) if b else None,
            },
            "amortised_ms_per_step": median / self.interval if median is not None and self.interval else None,
            "in_timed_steps": {
                "n": len(self.in_step),
                "ms": sum(ms for _, ms in self.in_step),
                "by_generation": by_gen,
            },
        }


def describe_line(g: dict | None) -> str:
    """One sentence for a report's method line from ``Collector.describe()`` (empty when absent)."""
    if not g:
        return ""
    inside = g.get("in_timed_steps") or {}
    n_in = inside.get("n", 0)
    within = f"{n_in} collection(s) inside timed steps ({inside.get('ms', 0.0):.0f} ms)"
    if g.get("mode") == "automatic":
        return f"garbage collection automatic (Python's thresholds; Bridge without manual_gc): {within}."
    b = g.get("between_steps") or {}
    med, amort, interval = b.get("ms_median"), g.get("amortised_ms_per_step"), g.get("interval")
    cost = f", median {med:.0f} ms" if med is not None else ""
    if amort is not None:
        cost += f" (Bridge collects every {interval} steps: {amort:.2f} ms per step, not in the step times)"
    elif not interval:
        cost += " (Bridge with manual_gc_interval 0 never collects periodically)"
    n = b.get("n", 0)
    return f"garbage collection manual (Bridge's manual_gc): {n} collections between timed steps{cost}; {within}."
