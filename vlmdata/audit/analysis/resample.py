"""Bootstrap replicates of a sweep's figures, drawn as the headline verdict draws them.

A sweep (``sweep.run_sweep``) keeps, per configuration and source, its measured global steps
(``step_columns``: the fields a rate needs, each step's peak memory and a digest of the samples it saw).
``SweepReplicates`` draws step indices once for each group of step lists resampled jointly (paired): the
sources of one configuration, measured in the same interleaved rounds, when they have as many steps (as
``verdict.gaps``: the round's host noise cancels), and step lists of any configurations whose steps saw
the same samples, step by step (the data's step-to-step variation cancels in a knob's ratio; e.g. freezing
at one micro-batch size). Every other list is drawn independently. A ``Figure`` is a point (the rate over all steps,
``metrics.rate``; or the largest step's peak memory) and its replicates (the rate of each draw,
``metrics.rate_replicates``; the largest peak among each draw's steps).

Comparisons are made on logarithms (``LogFigure``: a ratio of two figures, the mean of several ratios, a
difference of two), replicate by replicate, so every derived figure keeps the joint draws. ``interval``: the
percentile interval of the replicates at ``verdict.expanded_level`` of the fewest steps involved (the
headline's small-sample expansion); none from fewer than ``verdict.MIN_INTERVAL_STEPS`` steps. A
configuration stored without its steps (a report written before the sweep kept them) gives points only,
taken as exact: zero-width intervals. Fixed seed.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from vlmdata.audit.analysis.metrics import rate, rate_replicates
from vlmdata.audit.analysis.verdict import MIN_INTERVAL_STEPS, expanded_level

__all__ = [
    "STEP_FIELDS",
    "SAMPLES",
    "PEAK",
    "N_BOOT",
    "step_columns",
    "Figure",
    "LogFigure",
    "SweepReplicates",
    "interval",
]

STEP_FIELDS = ("step_ms", "samples", "tokens_nonpad", "tokens_total", "peak_mem_bytes")
SAMPLES = "samples_digest"  # a step's digest of the sample keys it saw (None without keys)
PEAK = "peak_mem"  # the figure name of peak memory (bytes), beside the rate names of ``metrics.RATES``
N_BOOT = 2000
LEGACY = 0  # ``steps`` of a figure stored without its steps: its point is taken as exact


def _digest(keys) -> str | None:
    return hashlib.blake2b("\n".join(map(str, keys)).encode(), digest_size=8).hexdigest() if keys else None


def step_columns(records: list[dict]) -> list[dict]:
    """What a sweep keeps of each measured global step (``STEP_FIELDS`` and ``SAMPLES``)."""
    return [{**{k: r.get(k) for k in STEP_FIELDS}, SAMPLES: _digest(r.get("keys"))} for r in records]


def _groups(configs: list[dict]) -> list[list[tuple[int, str]]]:
    """The step lists resampled jointly (module docstring), as groups of (configuration, source), in order."""
    nodes = [
        (i, name)
        for i, c in enumerate(configs)
        for name, cell in c["sources"].items()
        if cell.get("steps") and not cell.get("oom")
    ]
    parent = {n: n for n in nodes}

    def root(n):
        while parent[n] != n:
            n = parent[n]
        return n

    def join(a, b):
        parent[root(b)] = root(a)

    by_samples: dict[tuple, tuple[int, str]] = {}
    for i, name in nodes:
        steps = configs[i]["sources"][name]["steps"]
        if configs[i].get("paired"):
            first = next(n for n in nodes if n[0] == i and len(configs[i]["sources"][n[1]]["steps"]) == len(steps))
            join(first, (i, name))
        digests = tuple(st.get(SAMPLES) for st in steps)
        if all(digests):
            join(by_samples.setdefault(digests, (i, name)), (i, name))
    groups: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for n in nodes:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())


@dataclass(frozen=True)
class Figure:
    """A source's figure in one configuration: the point and its bootstrap replicates (None: no steps kept)."""

    point: float
    reps: np.ndarray | None
    steps: int


@dataclass(frozen=True)
class LogFigure:
    """A log ratio (or a mean or difference of log ratios) with its replicates; ``steps``: the fewest steps
    of any figure in it (``LEGACY`` when one was stored without its steps)."""

    point: float
    reps: np.ndarray | None
    steps: int

    @staticmethod
    def ratio(num: Figure, den: Figure) -> LogFigure:
        reps = None
        if num.reps is not None and den.reps is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                reps = np.log(num.reps) - np.log(den.reps)
        return LogFigure(math.log(num.point / den.point), reps, min(num.steps, den.steps))

    @staticmethod
    def mean(parts: list[LogFigure]) -> LogFigure:
        arrays = [p.reps for p in parts if p.reps is not None]
        reps = np.mean(arrays, axis=0) if len(arrays) == len(parts) else None
        return LogFigure(sum(p.point for p in parts) / len(parts), reps, min(p.steps for p in parts))

    def minus(self, other: LogFigure) -> LogFigure:
        reps = None if self.reps is None or other.reps is None else self.reps - other.reps
        return LogFigure(self.point - other.point, reps, min(self.steps, other.steps))

    def scaled(self, factor: float) -> LogFigure:
        return LogFigure(self.point * factor, None if self.reps is None else self.reps * factor, self.steps)


def interval(lf: LogFigure) -> tuple[float, float] | None:
    """The log figure's interval (module docstring): exact for ``LEGACY`` figures, None from too few steps."""
    if lf.steps == LEGACY:
        return lf.point, lf.point
    if lf.reps is None or lf.steps < MIN_INTERVAL_STEPS:
        return None
    reps = lf.reps[np.isfinite(lf.reps)]
    if not reps.size:
        return None
    tail = (1 - expanded_level(lf.steps)) / 2 * 100
    return float(np.percentile(reps, tail)), float(np.percentile(reps, 100 - tail))


class SweepReplicates:
    """Every configuration's figures with replicates drawn once (module docstring).

    Args:
        configs: ``[{"sources": {name: {"steps"?: step_columns(...), "rates", "peak_mem_bytes", "oom"}},
            "paired"?: bool}]``, one per configuration (``sweep.cells`` makes the sources).
        n_boot: replicates per figure.
        seed: the draws' seed.
    """

    def __init__(self, configs: list[dict], *, n_boot: int = N_BOOT, seed: int = 0):
        self.configs = configs
        rng = np.random.default_rng(seed)
        self._idx: dict[tuple[int, str], np.ndarray] = {}
        self.groups = _groups(configs)
        for group in self.groups:  # drawn up front, in order: the same draws whatever is asked later
            i, name = group[0]
            n = len(configs[i]["sources"][name]["steps"])
            draw = rng.integers(0, n, (n_boot, n))
            self._idx.update({node: draw for node in group})
        self._cache: dict[tuple, Figure | None] = {}

    def figure(self, i: int, source: str, name: str) -> Figure | None:
        """Configuration ``i``'s figure ``name`` (a rate of ``metrics.RATES`` or ``PEAK``) on ``source``; None
        when the source ran out of memory there or the figure is missing."""
        key = (i, source, name)
        if key not in self._cache:
            self._cache[key] = self._figure(i, source, name)
        return self._cache[key]

    def _figure(self, i: int, source: str, name: str) -> Figure | None:
        cell = self.configs[i]["sources"].get(source)
        if not cell or cell.get("oom"):
            return None
        steps, idx = cell.get("steps"), self._idx.get((i, source))
        if name == PEAK:
            peaks = [s.get("peak_mem_bytes") for s in steps or []]
            if steps and all(p is not None for p in peaks):
                col = np.asarray(peaks, dtype=np.float64)
                return Figure(float(col.max()), None if idx is None else col[idx].max(1), len(col))
            peak = cell.get("peak_mem_bytes")
            return None if peak is None or steps else Figure(float(peak), None, LEGACY)
        if not steps:
            point = (cell.get("rates") or {}).get(name)
            return None if not point else Figure(float(point), None, LEGACY)
        point = rate(steps, name)
        if not point or idx is None:
            return None
        return Figure(point, rate_replicates(steps, name, idx), len(steps))
