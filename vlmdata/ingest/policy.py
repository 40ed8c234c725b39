"""How many processes ``vlmdata build`` uses when the caller does not say (``BuildOptions.workers=None``).

Policy: build inline (one process, no pool) unless worker processes can pay, which needs all of:

- heavy per-input work: ``verify="full"`` (every image decoded) or ``max_pixels`` (large images
  re-encoded), or a remote source (object-storage reads wait on the network). With header checks of
  local files the per-input work (a 8 KiB head and the tail of each image, the JSON) costs about what
  the main process spends anyway parsing the record, pickling it to a worker and the result back, so a
  pool adds CPU and never wall time;
- more inputs than the first ``SMALL_INPUT`` (a source that ends within them is built before a pool
  would have started);
- a free core: ``usable cores - 1-minute load average >= 1`` (usable: the process's CPU affinity).

Then ``workers = min(usable cores, free cores + 1)`` (at least 2). With the Ray engine, no number means
all usable cores (Ray schedules its own tasks). The output never depends on the number (planning is
in input order in the main process), only the time does.

Measured (docs/BENCHMARKS.md, ``bench/build_vs_plain.py``; 2-core machine shared with other jobs, load
1.7-3.6): 2k and 8k LLaVA samples of 320-1280 px JPEGs with header checks, ``--workers 2`` took 0.43-1.26x
the wall time of ``--workers 1`` (median about 0.85x) for 20-60% more CPU; with ``verify="full"`` at 2k
samples and load 3.5, 0.74-1.19x. That is the crossover the policy encodes: light work never, heavy work
only with a core to spare.
"""

from __future__ import annotations

import os

SMALL_INPUT = 256  # inputs: a source that ends within these is always built inline


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def free_cores() -> float:
    """Usable cores minus the 1-minute load average (what other processes keep busy)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return usable_cores() - load


def auto_workers(*, heavy: bool, small: bool, engine: str = "local") -> int:
    """The number of processes for a build (module docstring).

    Args:
        heavy: per-input work that pays for a process of its own (full verify, re-encode, remote source).
        small: the source ended within the first ``SMALL_INPUT`` inputs.
        engine: "local" or "ray"."""
    if engine == "ray":
        return usable_cores()
    if small or not heavy:
        return 1
    free = free_cores()
    if free < 1:
        return 1
    return max(2, min(usable_cores(), int(free) + 1))
