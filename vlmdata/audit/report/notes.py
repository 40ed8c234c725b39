"""The notes a person must read beside the verdict, one list for every rendering (console, report.md, report.html,
report.json's ``notes``): ``collect_notes(result)``; and the stop rule that ended the measurement in words
(``stop_words(measurement)``; after a budget stop with too few steps for an interval, the budget that would
have measured enough, from the run's own round time).

The notes are, in order: what the run's settings say about themselves (``resolve``: a mock-data Bridge config, a
PEFT run, values assumed or defaulted, the model read from the Bridge config, disagreements between the Bridge
config and the model, the slice measured), the benchmark's (``benchmark``), the measurement's (sources repeated
within a step; a compiled part that fell back to eager past its recompile budget). No torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vlmdata.audit.analysis.verdict import MIN_INTERVAL_STEPS

__all__ = ["collect_notes", "stop_words", "STOP_WORDS"]

STOP_WORDS = {
    "settled": "every gap's 95% interval decided the verdict",
    "max_steps": "the step cap (`max_steps`) was reached",
    "budget": "the time budget (`budget_s`) left no room for another round",
    "out_of_memory": "a source ran out of memory and no gap was left to measure",
}


def collect_notes(result: Mapping[str, Any]) -> list[str]:
    """Every note of one run's result (module docstring), each once, in order."""
    found: list[str] = []
    found += (result.get("run") or {}).get("notes") or []
    found += (result.get("plan") or {}).get("notes") or []
    found += (result.get("benchmark") or {}).get("notes") or []
    found += (result.get("measurement") or {}).get("epoch_wrap") or []
    found += ((result.get("measurement") or {}).get("compile") or {}).get("notes") or []  # a part fell back to eager
    return list(dict.fromkeys(n for n in found if n))


def stop_words(measurement: Mapping[str, Any] | None) -> str | None:
    """Why the measurement stopped, in words (None before anything was measured)."""
    m = measurement or {}
    why = m.get("stop")
    if why is None:
        return None
    steps = m.get("steps_per_source")
    text = STOP_WORDS.get(str(why), str(why)) + _budget_for_an_interval(m)
    return f"stopped after {steps} steps per source: {text}" if steps is not None else f"stopped: {text}"


def _budget_for_an_interval(m: Mapping[str, Any]) -> str:
    """After a budget stop with too few steps for an interval: the budget that would have measured enough, from
    this run's own round time (the measuring seconds over the rounds run), with a tenth more for the noise; ""
    otherwise."""
    steps, rounds, block = m.get("steps_per_source"), m.get("rounds"), m.get("block") or 1
    total, measure = m.get("total_seconds"), m.get("measure_seconds")
    if m.get("stop") != "budget" or steps is None or steps >= MIN_INTERVAL_STEPS or not rounds:
        return ""
    if total is None or measure is None:
        return ""
    round_s = measure / rounds
    more = math.ceil((MIN_INTERVAL_STEPS - steps) / block)
    need = 10 * math.ceil((total + more * round_s) * 1.1 / 10)
    return (
        f"; an interval needs {MIN_INTERVAL_STEPS} steps per source: a round took {round_s:.0f} s here, so "
        f"`budget_s` {need} would measure them"
    )
