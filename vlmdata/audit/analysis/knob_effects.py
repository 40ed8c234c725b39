"""Each swept knob's effect on every source, with its interval, and the knobs a mock cannot see.

For every swept key with at least two values, its first value is the **baseline**; for each other value the
**effect** on a source is the ratio of a figure with the key at that value to the same figure at the
baseline, the other keys held at each of their settings (``settings``) and **pooled** over them (the
geometric mean of the settings' ratios), for samples/s, non-pad tokens/s (``metrics.RATES``) and peak
memory (``resample.PEAK``). Intervals come from the sweep's replicates (``resample.SweepReplicates``: the
headline's bootstrap over global steps, each configuration drawn independently, the sources of one
configuration jointly). A setting where either side ran out of memory has no ratio (``oom``) and stays out
of the pooled one.

**A knob a mock cannot see** (``findings``), judged on the pooled effect on the decision metric
(samples/s), for every mock (every source but real and synthetic) measured with real:

- real **moves**: its effect lies outside no change (its interval excludes 1) by at least ``min_effect``;
- with D = real's log effect minus the mock's (the same draws; signed so that real's effect is positive):
  **blind** when real moves, D's interval lies above 0 (the mock measures less than real, beyond the noise)
  and the mock's point is less than half of real's (none, or the other sign): the sweep is MISLEADING
  (exit 3), a decision taken on the mock would be taken blind;
- **undecided** when the mock's point is less than half of real's but D's interval reaches 0, or real's
  point is at least ``min_effect`` while its interval includes 1 (or there is none): UNDECIDED (exit 4);
- else the mock **sees** the knob (``understates`` it when D lies above 0 and the mock sees at least half),
  or real's effect is under ``min_effect`` (``no effect on real``).

Both conditions of *blind* sit far from the noise when real's effect is a few percent and the mock's none,
so the finding does not flip between repeats of a run; a borderline case is undecided, never OK in one run
and MISLEADING in the next. The line says it in a user's words: "the image-free mock cannot measure
freezing the vision tower: real +5.2% [+3.1%, +7.4%], imagefree +0.3% [-0.9%, +1.5%] (samples/s)".
"""

from __future__ import annotations

import math

from vlmdata.audit.analysis.decisions import label
from vlmdata.audit.analysis.resample import LEGACY, PEAK, LogFigure, SweepReplicates, interval
from vlmdata.audit.analysis.verdict import MIN_INTERVAL_STEPS, MORE, PROXY, UNDECIDED

__all__ = ["EFFECT_METRICS", "MIN_EFFECT", "BLIND", "SEES", "UNDERSTATES", "NO_EFFECT", "knob_effects", "fmt_effect"]

EFFECT_METRICS = ("samples_per_s", "nonpad_tokens_per_s", PEAK)
EFFECT_LABELS = {"samples_per_s": "samples/s", "nonpad_tokens_per_s": "non-pad tokens/s", PEAK: "peak memory"}
MIN_EFFECT = 0.01
BLIND, SEES, UNDERSTATES, NO_EFFECT = "blind", "sees", "understates", "no effect on real"
SOURCE_WORDS = {  # how a finding names a mock
    "imagefree": "image-free mock",
    "imagefree-fixed": "fixed-text mock",
    "bridge-noise": "Bridge noise-image mock",
}
KEY_WORDS = {"micro_batch_size": "micro-batch size", "recompute": "recompute", "parallel": "parallelism"}


def _value(v) -> str:
    return str(int(v)) if isinstance(v, bool) else str(v)


def phrase(key: str, baseline, value) -> str:
    """A knob change in a user's words: "freezing the vision tower", "micro-batch size 1 -> 2"."""
    if key == "freeze_vision" and isinstance(value, bool):
        return "freezing the vision tower" if value else "training the vision tower"
    return f"{KEY_WORDS.get(key, key)} {_value(baseline)} -> {_value(value)}"


def _change(ratio: float, digits: int) -> str:
    text = f"{{:+.{digits}%}}".format(round(ratio - 1, 9))  # equal figures' float rounding: one text
    return "+" + text[1:] if text.startswith("-") and not text.strip("-+0.%") else text  # no "-0.0%"


def fmt_effect(eff: dict | None, digits: int = 1) -> str:
    """``+5.2% [+3.1%, +7.4%]`` (a ratio as a change; no interval where it rounds to the point, an exact
    figure); ``-`` without one, ``oom (side)`` where a side ran out of memory."""
    if not eff:
        return "-"
    if eff.get("oom"):
        return f"oom ({eff['oom']})"
    text = _change(eff["ratio"], digits)
    if eff.get("lo") is not None:
        lo, hi = _change(eff["lo"], digits), _change(eff["hi"], digits)
        text += "" if lo == hi == text else f" [{lo}, {hi}]"
    elif eff.get("few_steps"):
        text += " (too few steps)"
    return text


def _summary(lf: LogFigure, settings: int | None = None) -> dict:
    ci = interval(lf)
    out = {
        "ratio": math.exp(lf.point),
        "lo": None if ci is None else math.exp(ci[0]),
        "hi": None if ci is None else math.exp(ci[1]),
        "few_steps": lf.steps != LEGACY and lf.steps < MIN_INTERVAL_STEPS,
    }
    if settings is not None:
        out["settings"] = settings
    return out


def _sweep_of(configs: list[dict]) -> dict[str, list]:
    """The swept keys and their values in the order the configurations give them (the grid's order)."""
    sweep: dict[str, list] = {}
    for c in configs:
        for k, v in c["values"].items():
            vals = sweep.setdefault(k, [])
            if v not in vals:
                vals.append(v)
    return sweep


def _pairs(configs: list[dict], key: str, baseline, value) -> list[tuple[str, int, int]]:
    """(the other keys' setting, index with ``key=value``, index with ``key=baseline``) for every setting
    measured at both."""
    index = {label(c["values"]): i for i, c in enumerate(configs)}
    out = []
    for i, c in enumerate(configs):
        if c["values"].get(key) != value:
            continue
        j = index.get(label({**c["values"], key: baseline}))
        if j is not None:
            others = label({k: v for k, v in c["values"].items() if k != key}) or "-"
            out.append((others, i, j))
    return out


def _ratio(reps: SweepReplicates, configs: list[dict], i: int, j: int, source: str, metric: str):
    """A setting's LogFigure, or ``{"oom": side}``, or None (a figure missing on a side)."""
    for idx, side in ((i, "value"), (j, "baseline")):
        if (configs[idx]["sources"].get(source) or {}).get("oom"):
            return {"oom": side}
    a, b = reps.figure(i, source, metric), reps.figure(j, source, metric)
    return None if a is None or b is None else LogFigure.ratio(a, b)


def _source_effects(reps, configs, pairs, source: str) -> dict:
    """One source's effect of one change: per setting and pooled, for every metric."""
    settings = [{"others": others, "effects": {}} for others, _, _ in pairs]
    pooled = {}
    for m in EFFECT_METRICS:
        parts = []
        for s, (_, i, j) in zip(settings, pairs):
            r = _ratio(reps, configs, i, j, source, m)
            s["effects"][m] = r if r is None or isinstance(r, dict) else _summary(r)
            if isinstance(r, LogFigure):
                parts.append(r)
        pooled[m] = _summary(LogFigure.mean(parts), len(parts)) if parts else None
    return {"pooled": pooled, "settings": settings}


def _pooled(reps, configs, pairs, sources: tuple[str, str], metric: str) -> tuple[LogFigure, LogFigure] | None:
    """Real's and a mock's pooled LogFigures over the settings where both have both sides."""
    a, b = [], []
    for _, i, j in pairs:
        ra, rb = (_ratio(reps, configs, i, j, s, metric) for s in sources)
        if isinstance(ra, LogFigure) and isinstance(rb, LogFigure):
            a.append(ra)
            b.append(rb)
    return (LogFigure.mean(a), LogFigure.mean(b)) if a else None


def _finding(real: LogFigure, mock: LogFigure, min_effect: float) -> tuple[str, dict]:
    """The mock's state for one change (module docstring) and D's summary."""
    sign = 1.0 if real.point >= 0 else -1.0
    d = real.minus(mock).scaled(sign)
    d_ci = interval(d)
    r_ci = interval(real)
    material = abs(real.point) >= math.log1p(min_effect)
    moves = material and r_ci is not None and (r_ci[0] > 0 or r_ci[1] < 0)
    under_half = sign * mock.point < abs(real.point) / 2
    d_above = d_ci is not None and d_ci[0] > 0
    if moves and d_above and under_half:
        state = BLIND
    elif under_half and material:
        state = UNDECIDED
    elif not material:
        state = NO_EFFECT
    elif d_above:
        state = UNDERSTATES
    else:
        state = SEES
    return state, _summary(d)


def _finding_line(state: str, source: str, change: dict, real: dict, mock: dict) -> str:
    who = SOURCE_WORDS.get(source, f"{source} mock")
    figures = f"real {fmt_effect(real)}, {source} {fmt_effect(mock)} (samples/s)"
    if state == BLIND:
        return f"the {who} cannot measure {change['phrase']}: {figures}"
    return f"whether the {who} can measure {change['phrase']} is undecided: {figures}"


def knob_effects(
    configs: list[dict],
    *,
    replicates: SweepReplicates | None = None,
    real: str = "real",
    metric: str = "samples_per_s",
    min_effect: float = MIN_EFFECT,
    seed: int = 0,
    more: str = MORE,
) -> dict:
    """Every knob's effect on every source, and what each mock cannot see (module docstring).

    Args:
        configs: the sweep's configurations as ``decisions.decide_configs`` takes them.
        replicates: the sweep's ``SweepReplicates`` (shared with the decisions); built here when None.
        real: the reference source.
        metric: the throughput findings are judged on.
        min_effect: the smallest effect on real that matters (a fraction).
        seed: the bootstrap's seed (when ``replicates`` is None).
        more: what an undecided finding asks for.

    Returns:
        ``{"metrics", "metric", "min_effect", "changes": [{"key", "baseline", "value", "label", "phrase",
        "sources": {name: {"pooled": {metric: effect}, "settings": [{"others", "effects": {metric: effect}}]}}}],
        "findings": [{"change", "phrase", "source", "state", "real", "mock", "difference", "line"?}],
        "blind": [line], "undecided": [line], "line"}``; an effect is ``{"ratio", "lo", "hi", "few_steps",
        "settings"?}``, ``{"oom": "value" | "baseline"}`` or None.
    """
    reps = replicates or SweepReplicates(configs, seed=seed)
    names = list(dict.fromkeys(n for c in configs for n in c["sources"]))
    out: dict = {"metrics": list(EFFECT_METRICS), "metric": metric, "min_effect": min_effect, "changes": []}
    out.update(findings=[], blind=[], undecided=[])
    for key, values in _sweep_of(configs).items():
        for value in values[1:]:
            pairs = _pairs(configs, key, values[0], value)
            if not pairs:
                continue
            change = {"key": key, "baseline": values[0], "value": value, "phrase": phrase(key, values[0], value)}
            change["label"] = f"{key} {_value(values[0])} -> {_value(value)}"
            change["sources"] = {n: _source_effects(reps, configs, pairs, n) for n in names}
            out["changes"].append(change)
            for mock in names if real in names else []:
                if mock in (real, PROXY):
                    continue
                both = _pooled(reps, configs, pairs, (real, mock), metric)
                if both is None:
                    continue
                state, diff = _finding(*both, min_effect)
                f = {"change": change["label"], "phrase": change["phrase"], "source": mock, "state": state}
                f.update(real=_summary(both[0]), mock=_summary(both[1]), difference=diff)
                if state in (BLIND, UNDECIDED):
                    f["line"] = _finding_line(state, mock, change, f["real"], f["mock"])
                    out["blind" if state == BLIND else "undecided"].append(f["line"])
                out["findings"].append(f)
    parts = out["blind"] + out["undecided"]
    out["line"] = "; ".join(parts) + (f": {more}" if out["undecided"] else "") if parts else None
    return out
