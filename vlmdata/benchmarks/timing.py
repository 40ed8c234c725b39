"""Side-by-side timing: contenders interleaved in rotating order over rounds, wall and CPU time.

The method every vlmdata figure follows (docs/BENCHMARKS.md):

* ``interleave(contenders, rounds, warmup)`` runs ``warmup`` untimed rounds, then ``rounds`` timed
  rounds; round ``r`` (warm-up rounds included, numbered from 0) runs the contenders rotated by ``r``:
  ``A B C``, ``B C A``, ``C A B``, ... so no contender always runs first or right after another.
* A contender is a callable (run in this process) or a command (an argv list, run as a subprocess).
  Per contender per round it records the wall time and the CPU time: for a callable, this process's
  CPU (``time.process_time``: all its threads) plus the CPU of any child processes it started and
  waited for (``resource.getrusage(RUSAGE_CHILDREN)``); for a command, the children's CPU alone.
  ``before`` (untimed) runs ahead of every run, e.g. to remove the previous run's output.
* The load average (``os.getloadavg``) is recorded at the start and the end of the whole run.
* ``TimingResult`` keeps every measurement; ``ratios(name, baseline)`` are per round
  ``baseline time / name time`` (> 1: ``name`` is faster), and ``summary()`` gives min/median/max of
  times, ratios and rates (``units`` of work per second, e.g. samples) as plain JSON-able dicts.

The clock is a parameter (``Clock``) so tests can drive the whole schedule with fake time.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vlmdata.errors import VlmdataError


class BenchmarkError(VlmdataError):
    """A contender failed, or the benchmark was asked for something it cannot do."""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass(frozen=True)
class Clock:
    """Where time comes from: wall seconds, this process's CPU seconds, waited-for children's CPU seconds."""

    wall: Callable[[], float] = time.perf_counter
    cpu_self: Callable[[], float] = time.process_time
    cpu_children: Callable[[], float] = _children_cpu
    load: Callable[[], tuple[float, float, float]] = os.getloadavg


@dataclass(frozen=True)
class Contender:
    """One side of a comparison.

    Args:
        name: unique label.
        run: a callable (timed in this process) or an argv list (timed as a subprocess).
        units: work done by one run (e.g. samples), for rates; ``None``: no rate.
        before: untimed callable run ahead of every run (warm-up included).
        env: extra environment for a command.
    """

    name: str
    run: Callable[[], object] | Sequence[str]
    units: float | None = None
    before: Callable[[], object] | None = None
    env: dict[str, str] | None = None

    @property
    def is_command(self) -> bool:
        return not callable(self.run)


@dataclass(frozen=True)
class Measurement:
    """One timed run."""

    name: str
    round: int
    position: int
    wall_s: float
    cpu_s: float


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"min", "median", "max"}`` of ``values`` (``nan`` each when empty)."""
    if not values:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan")}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


@dataclass
class TimingResult:
    """Every measurement of one interleaved run, and the figures derived from them."""

    names: list[str]
    rounds: int
    warmup: int
    measurements: list[Measurement]
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    units: dict[str, float | None] = field(default_factory=dict)
    orders: list[list[str]] = field(default_factory=list)

    def times(self, name: str, kind: str = "cpu") -> list[float]:
        """Per-round times of ``name`` (``kind`` "cpu" or "wall"), in round order."""
        if name not in self.names:
            raise BenchmarkError(f"no contender named {name!r} (contenders: {', '.join(self.names)})")
        if kind not in ("cpu", "wall"):
            raise BenchmarkError(f"kind must be 'cpu' or 'wall', got {kind!r}")
        rows = sorted((m for m in self.measurements if m.name == name), key=lambda m: m.round)
        return [m.cpu_s if kind == "cpu" else m.wall_s for m in rows]

    def ratios(self, name: str, baseline: str, kind: str = "cpu") -> list[float]:
        """Per round ``baseline time / name time``: how many times faster ``name`` is (same round)."""
        return [b / t if t > 0 else float("inf") for b, t in zip(self.times(baseline, kind), self.times(name, kind))]

    def rates(self, name: str, kind: str = "cpu") -> list[float]:
        """Per round ``units / time`` (e.g. samples per CPU-second); empty when ``name`` has no units."""
        u = self.units.get(name)
        if u is None:
            return []
        return [u / t if t > 0 else float("inf") for t in self.times(name, kind)]

    def summary(self, baseline: str | None = None) -> dict:
        """JSON-able figures: load, rounds, and per contender wall/cpu/rate/ratio spreads."""
        out = {
            "rounds": self.rounds,
            "warmup_rounds": self.warmup,
            "baseline": baseline,
            "load_average_start": list(self.load_start),
            "load_average_end": list(self.load_end),
            "orders": self.orders,
            "contenders": {},
        }
        for n in self.names:
            row = {
                "wall_s": spread(self.times(n, "wall")),
                "cpu_s": spread(self.times(n, "cpu")),
                "units": self.units.get(n),
            }
            if self.units.get(n) is not None:
                row["per_cpu_s"] = spread(self.rates(n, "cpu"))
                row["per_wall_s"] = spread(self.rates(n, "wall"))
            if baseline is not None:
                row["ratio_cpu"] = spread(self.ratios(n, baseline, "cpu"))
                row["ratio_wall"] = spread(self.ratios(n, baseline, "wall"))
            out["contenders"][n] = row
        return out


def rotation(names: Sequence[str], r: int) -> list[str]:
    """The order of round ``r``: ``names`` rotated left by ``r``."""
    k = r % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def run_command(argv: Sequence[str], name: str, env: dict[str, str] | None = None) -> None:
    """Run ``argv`` (output discarded); ``BenchmarkError`` naming contender ``name`` if it fails."""
    full_env = {**os.environ, **env} if env else None
    p = subprocess.run(list(argv), check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=full_env)
    if p.returncode != 0:
        tail = p.stderr.decode(errors="replace")[-2000:]
        raise BenchmarkError(f"contender {name!r}: command {' '.join(argv)!r} exited {p.returncode}: {tail}")


def _timed(c: Contender, clock: Clock) -> tuple[float, float]:
    if c.before is not None:
        c.before()
    w0, s0, k0 = clock.wall(), clock.cpu_self(), clock.cpu_children()
    if c.is_command:
        run_command(c.run, c.name, c.env)  # type: ignore[arg-type]
    else:
        c.run()  # type: ignore[operator]
    w1, s1, k1 = clock.wall(), clock.cpu_self(), clock.cpu_children()
    cpu = (k1 - k0) if c.is_command else (s1 - s0) + (k1 - k0)
    return w1 - w0, cpu


def interleave(
    contenders: Sequence[Contender],
    rounds: int = 5,
    warmup: int = 1,
    clock: Clock | None = None,
    on_round: Callable[[int, int], object] | None = None,
) -> TimingResult:
    """Run ``contenders`` interleaved (see the module docstring) and return every measurement.

    Args:
        contenders: at least one; names unique.
        rounds: timed rounds (>= 1).
        warmup: untimed rounds first (>= 0); they also rotate.
        clock: time sources (default: the real ones).
        on_round: called with (round done, rounds in all, warm-up included) after each round (progress).

    Returns:
        ``TimingResult`` with ``rounds * len(contenders)`` measurements.
    """
    if not contenders:
        raise BenchmarkError("contenders: give at least one")
    names = [c.name for c in contenders]
    if len(set(names)) != len(names):
        raise BenchmarkError(f"contenders: names must be unique, got {names}")
    if rounds < 1:
        raise BenchmarkError(f"rounds must be >= 1, got {rounds}")
    if warmup < 0:
        raise BenchmarkError(f"warmup must be >= 0, got {warmup}")
    clock = clock or Clock()
    by_name = {c.name: c for c in contenders}
    load_start = tuple(clock.load())
    measurements: list[Measurement] = []
    orders: list[list[str]] = []
    total = warmup + rounds
    for r in range(total):
        order = rotation(names, r)
        timed = r >= warmup
        if timed:
            orders.append(order)
        for pos, n in enumerate(order):
            wall, cpu = _timed(by_name[n], clock)
            if timed:
                measurements.append(Measurement(n, r - warmup, pos, wall, cpu))
        if on_round is not None:
            on_round(r + 1, total)
    return TimingResult(
        names=names,
        rounds=rounds,
        warmup=warmup,
        measurements=measurements,
        load_start=load_start,  # pyright: ignore[reportArgumentType]  (os.getloadavg: three floats)
        load_end=tuple(clock.load()),  # type: ignore[arg-type]
        units={c.name: c.units for c in contenders},
        orders=orders,
    )


def _fmt(s: dict[str, float], digits: int = 2, suffix: str = "") -> str:
    return f"{s['median']:.{digits}f}{suffix} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def markdown_table(summary: dict, unit: str = "samples", title: str | None = None) -> str:
    """A markdown table of ``TimingResult.summary()``: median (min-max) per contender, and the load."""
    base = summary.get("baseline")
    head = ["contender", "CPU s", "wall s", f"{unit}/CPU-s", f"{unit}/s"]
    if base:
        head += [f"x {base} (CPU)", f"x {base} (wall)"]
    lines = []
    if title:
        lines += [f"**{title}**", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, row in summary["contenders"].items():
        cells = [n, _fmt(row["cpu_s"], 3), _fmt(row["wall_s"], 3)]
        cells += [_fmt(row["per_cpu_s"], 1), _fmt(row["per_wall_s"], 1)] if "per_cpu_s" in row else ["", ""]
        if base:
            cells += [_fmt(row["ratio_cpu"], 2, "x"), _fmt(row["ratio_wall"], 2, "x")]
        lines.append("| " + " | ".join(cells) + " |")
    ls, le = summary["load_average_start"], summary["load_average_end"]
    foot = (
        f"{summary['rounds']} interleaved rounds (+{summary['warmup_rounds']} warm-up), median (min-max); "
        f"load average {ls[0]:.2f} at start, {le[0]:.2f} at end; {os.cpu_count()} cores"
    )
    lines += ["", foot]
    return "\n".join(lines)
