"""The audit's verdict: is the mock throughput figure reportable, is synthetic a proxy, and why.

- gap = source rate / real rate for samples/s, TFLOP/s and non-pad tokens/s (``GAP_METRICS``), each
  with a 95% bootstrap interval; sources measured interleaved are resampled jointly by step (paired).
  Honest intervals (``gaps``): from fewer than ``MIN_INTERVAL_STEPS`` steps per source there is no interval
  (``lo = hi = None``, ``few_steps``: a bootstrap over 1-4 steps is zero-width or far too narrow); otherwise
  the percentile bootstrap is *expanded* for its small-sample bias (Hesterberg 2015: the tails at
  ``2 Phi(-sqrt(n/(n-1)) t_{n-1, 0.975})`` instead of 2.5%; ``level`` stays the nominal 0.95);
- each mock (every source but real and synthetic) is, on each metric, an **offender** (its interval lies
  above ``1 + threshold``), **within** (its interval lies at or below it) or **undecided** (its interval
  spans the limit, or there is no interval); a mock is an offender when any metric is, undecided when
  none is and any is undecided;
- status: **MISLEADING** when any mock is an offender, else **UNDECIDED** when any mock is undecided, else
  **OK**; the CLI exits 3, 4 and 0 (``vlmdata audit --help``): an undecided verdict never passes a gate
  and never flips between MISLEADING and OK on noise. The headline names every offender and every
  undecided mock, and the advice names what to measure more (```max_steps```, ```budget_s```: the CLI
  shows them as flags; ``more`` overrides it, e.g. for training logs);
- synthetic is a **trustworthy** proxy when every gap's interval lies within ``1 ± proxy_tolerance`` (5%),
  **not trustworthy** when one lies outside, else **undecided**; synthetic never changes the status; when
  it is not trustworthy or undecided the line names where the deviation sits (``proxy_cause``): a host-side
  stage (data wait, prep, h2d: the generated images cost differently) or a compute stage (the twin has
  real's shapes, so the same FLOPs: host noise such as a competing process on a 2-core CPU); an interval
  outside the tolerance whose difference lies mostly in compute stages (``host_noise``) makes synthetic
  undecided, not "not trustworthy": the measurement, not the data, differs;
- ``settled``: the intervals are tight enough for the verdict (each on one side of its limits, each
  within ±precision of its ratio, none missing); the runner measures until they are;
- the stage that contributes most to each source's gap (per-sample stage time, real minus source), named
  only when the source's samples/s interval excludes 1 (``significant``): a stage inside the noise is not
  a cause;
- knobs: rules on the real source's figures, largest share first (the next one to look at;
  ``vlmdata.audit.analysis.knobs``, importable from here).

When real runs out of memory under the run's configuration there is no gap to measure
(``out_of_memory_verdict``): **MISLEADING** when a mock ran (its figure is of a configuration real data cannot
run: exit 3), else **DOES NOT FIT** (nothing measured on real or a mock: exit 1).
"""

from __future__ import annotations

import math

from vlmdata.audit.analysis.knobs import knobs
from vlmdata.audit.analysis.metrics import RATE_LABELS, ratio_ci
from vlmdata.audit.settings.defaults import DEFAULT_THRESHOLD, PROXY_TOLERANCE, REPEAT_MARGIN  # noqa: F401  # their home

GAP_METRICS = ("samples_per_s", "tflops", "nonpad_tokens_per_s")  # headline order: what people report first
METRIC_LABELS = {m: RATE_LABELS[m] for m in GAP_METRICS} | {"tflops": "TFLOP/s"}
PROXY = "synthetic"
MIN_INTERVAL_STEPS = 5  # fewer steps per source: no interval (the verdict is undecided), never a zero-width one
LEVEL = 0.95
MORE = "measure more steps (`max_steps`, `budget_s`)"
OFFENDER, WITHIN, UNDECIDED = "offender", "within", "undecided"


def expanded_level(n: int, level: float = LEVEL) -> float:
    """The percentile-bootstrap level whose tails match a t interval's for ``n`` steps (module docstring)."""
    if n < 2:
        return level
    # scipy: heavy, and only needed once a verdict is computed (not by `vlmdata audit --help`)
    from scipy.stats import t as student_t

    z = math.sqrt(n / (n - 1)) * float(student_t.ppf(1 - (1 - level) / 2, n - 1))
    return 1.0 - math.erfc(z / math.sqrt(2))  # 1 - 2 P(Z > z): the two tails, each at the t quantile's z


def gaps(runs: dict[str, dict], source: str, real: str = "real", seed: int = 0) -> dict[str, dict | None]:
    """``{metric: interval of source/real}`` (``ratio_ci``'s dict with ``lo``/``hi`` from the expanded
    bootstrap, or None when fewer than ``MIN_INTERVAL_STEPS`` steps: then ``few_steps`` is True); None for a
    metric a side does not have. ``runs[name] = {"records", "world_size", "interleaved"?}``."""
    a, b = runs[source], runs[real]
    paired = bool(a.get("interleaved") and b.get("interleaved"))
    n = min(len(a["records"]), len(b["records"]))
    out: dict[str, dict | None] = {}
    for m in GAP_METRICS:
        ci = ratio_ci(
            a["records"],
            b["records"],
            m,
            world_num=a.get("world_size", 1),
            world_den=b.get("world_size", 1),
            paired=paired,
            seed=seed,
            level=expanded_level(n),
        )
        if ci is not None:
            ci["level"], ci["bootstrap_level"] = LEVEL, ci["level"]
            ci["few_steps"] = n < MIN_INTERVAL_STEPS or ci["lo"] is None
            if ci["few_steps"]:
                ci["lo"] = ci["hi"] = None
        out[m] = ci
    return out


def _bounds(source: str, threshold: float, proxy_tolerance: float) -> tuple[float, ...]:
    return (1 - proxy_tolerance, 1 + proxy_tolerance) if source == PROXY else (1 + threshold,)


def widen(ci: dict | None, margin: float) -> dict | None:
    """``ci`` with ``lo`` / ``hi`` moved out by the run-to-run ``margin`` (``REPEAT_MARGIN``), multiplicatively;
    the bootstrap's own bounds kept as ``lo_run`` / ``hi_run``."""
    if ci is None or ci.get("lo") is None or not margin:
        return ci
    return {
        **ci,
        "lo_run": ci["lo"],
        "hi_run": ci["hi"],
        "lo": ci["lo"] / (1 + margin),
        "hi": ci["hi"] * (1 + margin),
        "repeat_margin": margin,
    }


def classify(ci: dict | None, limit: float) -> str | None:
    """A mock's gap against ``limit``: OFFENDER (interval above), WITHIN (at or below), UNDECIDED (spans it,
    or no interval); None when the metric is missing."""
    if ci is None:
        return None
    if ci.get("lo") is None:
        return UNDECIDED
    return OFFENDER if ci["lo"] > limit else WITHIN if ci["hi"] <= limit else UNDECIDED


def proxy_state(ci: dict | None, tolerance: float) -> str | None:
    """Synthetic's gap: "trustworthy" (interval inside 1 ± tolerance), "not trustworthy" (outside), "undecided"."""
    if ci is None:
        return None
    if ci.get("lo") is None:
        return UNDECIDED
    if ci["lo"] >= 1 - tolerance and ci["hi"] <= 1 + tolerance:
        return "trustworthy"
    if ci["hi"] < 1 - tolerance or ci["lo"] > 1 + tolerance:
        return "not trustworthy"
    return UNDECIDED


def settled(
    runs: dict[str, dict],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    proxy_tolerance: float = PROXY_TOLERANCE,
    precision: float = 0.05,
    real: str = "real",
    seed: int = 0,
) -> tuple[bool, list[str]]:
    """(every gap decided, the gaps still open). A gap is decided when it has an interval (enough steps), the
    interval lies on one side of each of its limits (1 + threshold for a mock; 1 ± proxy_tolerance for
    synthetic) and its half-width is at most ``precision`` of its ratio."""
    open_items = []
    for src in runs:
        if src == real:
            continue
        for m, ci in gaps(runs, src, real, seed).items():
            if ci is None:
                continue
            if ci["lo"] is None:
                open_items.append(f"{src} {METRIC_LABELS[m]}: too few steps for an interval")
                continue
            half = (ci["hi"] - ci["lo"]) / 2 / ci["ratio"]
            if half > precision:
                open_items.append(f"{src} {METRIC_LABELS[m]}: ±{half:.1%}")
            for bound in _bounds(src, threshold, proxy_tolerance):
                if ci["lo"] <= bound <= ci["hi"]:
                    open_items.append(
                        f"{src} {METRIC_LABELS[m]}: interval [{ci['lo']:.3f}, {ci['hi']:.3f}] contains {bound:.2f}"
                    )
    return not open_items, open_items


def stage_attribution(mock: dict, real: dict, significant: bool = True) -> dict:
    """Which stages make real slower than mock, per sample (ms): real minus mock, largest first.
    ``significant``: whether the gap itself lies beyond the noise (else no top stage is named)."""
    rm, mm = real.get("stages_ms_per_sample") or {}, mock.get("stages_ms_per_sample") or {}
    diff = {k: rm.get(k, 0.0) - mm.get(k, 0.0) for k in {*rm, *mm}}
    total = sum(diff.values())
    ranked = sorted(diff.items(), key=lambda kv: -kv[1])
    top = ranked[0][0] if ranked and ranked[0][1] > 0 and significant else None
    return {
        "ms_per_sample_diff": dict(ranked),
        "total_ms_per_sample_diff": total,
        "top_stage": top,
        "top_share": diff[top] / total if top and total > 0 else None,
        "significant": significant,
    }


def _significant(g: dict) -> bool:
    """The source's samples/s gap has an interval that excludes 1 (a difference beyond the noise)."""
    ci = g.get("samples_per_s")
    return bool(ci and ci.get("lo") is not None and (ci["lo"] > 1 or ci["hi"] < 1))


def decide(
    runs: dict[str, dict],
    summaries: dict[str, dict],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    proxy_tolerance: float = PROXY_TOLERANCE,
    real: str = "real",
    stragglers: list[int] | None = None,
    seed: int = 0,
    more: str = MORE,
    repeat_margin: float = 0.0,
) -> dict:
    """The full verdict (module docstring).

    Args:
        runs: ``{name: {"records", "world_size", "interleaved"?}}`` of the measured steps.
        summaries: ``{name: metrics.summarize(...)}``.
        threshold: a mock overstates real when its gap exceeds ``1 + threshold``.
        proxy_tolerance: synthetic is a proxy when within ``1 ± proxy_tolerance``.
        real: the reference source's name.
        stragglers: ranks flagged as stragglers (advice).
        seed: the bootstrap's seed.
        more: what to do when a verdict is undecided (the line's advice).
        repeat_margin: the run-to-run spread a mock's interval is widened by before it is judged (``widen``;
            the audit passes ``REPEAT_MARGIN``; 0 for figures that are not repeated runs, e.g. training logs).

    Returns:
        ``{"status", "line", "gaps", "states", "offenders", "undecided", "attribution", "synthetic_proxy"?,
        "knobs", "next_knob", ...}``.
    """
    if real not in runs:
        raise ValueError(f"the verdict needs the {real!r} source")
    others = [s for s in runs if s != real and "@" not in s]  # "m@run": counterfactual arms are not judged
    if not others:
        raise ValueError("the verdict needs at least one source besides real")
    limit = 1 + threshold
    result: dict = {
        "threshold": threshold,
        "proxy_tolerance": proxy_tolerance,
        "metrics": list(GAP_METRICS),
        "min_interval_steps": MIN_INTERVAL_STEPS,
        "gaps": {},
        "states": {},
        "attribution": {},
        "offenders": [],
        "undecided": [],
        "more": more,
        "repeat_margin": repeat_margin,
    }
    for src in others:
        g = gaps(runs, src, real, seed)
        result["gaps"][src] = g
        result["attribution"][src] = stage_attribution(summaries[src], summaries[real], _significant(g))
        if src != PROXY:
            judged = {m: widen(ci, repeat_margin) for m, ci in g.items()}
            result["states"][src] = _judge(src, judged, limit, result["offenders"], result["undecided"])
    judged = result["states"].values()
    result["status"] = "MISLEADING" if OFFENDER in judged else "UNDECIDED" if UNDECIDED in judged else "OK"
    if PROXY in result["gaps"]:
        result["synthetic_proxy"] = _proxy(result["gaps"][PROXY], proxy_tolerance, result["attribution"][PROXY])
    result["knobs"] = knobs(summaries[real], stragglers)
    result["next_knob"] = result["knobs"][0]["knob"] if result["knobs"] else None
    result["line"] = verdict_line(result)
    return result


def _judge(src: str, g: dict, limit: float, offenders: list, undecided: list) -> str:
    """A mock's state over its gaps (``classify``), its offending and undecided metrics added to the lists."""
    states = {m: classify(ci, limit) for m, ci in g.items()}
    for m, ci in g.items():
        if ci is None or states[m] == WITHIN:
            continue
        entry = {"source": src, "metric": m, "ratio": ci["ratio"], "lo": ci["lo"], "hi": ci["hi"]}
        if states[m] == OFFENDER:
            offenders.append({**entry, "confident": True})
        else:
            undecided.append({**entry, "few_steps": ci["few_steps"]})
    known = [x for x in states.values() if x is not None]
    return OFFENDER if OFFENDER in known else UNDECIDED if UNDECIDED in known or not known else WITHIN


def host_noise(attribution: dict) -> bool:
    """Whether synthetic's per-sample difference from real lies mostly in compute stages (same shapes, same
    FLOPs on both: the host's noise) rather than in the host-side stages its images can make differ."""
    diff = attribution.get("ms_per_sample_diff") or {}
    host = sum(abs(d) for k, d in diff.items() if k in HOST_STAGES)
    compute = sum(abs(d) for k, d in diff.items() if k not in HOST_STAGES and k != "other")
    return compute > host


def _proxy(g: dict, tolerance: float, attribution: dict | None = None) -> dict:
    devs = {m: abs(ci["ratio"] - 1) for m, ci in g.items() if ci is not None}
    states = [x for x in (proxy_state(ci, tolerance) for ci in g.values()) if x is not None]
    state = (
        "not trustworthy"
        if "not trustworthy" in states
        else UNDECIDED
        if UNDECIDED in states or not states
        else "trustworthy"
    )
    noise = state == "not trustworthy" and attribution is not None and host_noise(attribution)
    if noise:  # the twin has real's shapes: a gap in compute stages is the host's, not the data's
        state = UNDECIDED
    cis = [ci for ci in g.values() if ci is not None and ci["lo"] is not None]
    return {
        "state": state,
        "host_noise": noise,
        "trustworthy": state == "trustworthy",
        "max_deviation": max(devs.values()) if devs else None,
        "deviations": devs,
        "few_steps": any(ci["few_steps"] for ci in g.values() if ci is not None),
        "intervals_include_1": bool(cis) and all(c["lo"] <= 1 <= c["hi"] for c in cis),
    }


def _fmt_ci(ci: dict) -> str:
    return f"{ci['ratio']:.2f}x" + (f" [{ci['lo']:.2f}, {ci['hi']:.2f}]" if ci.get("lo") is not None else "")


def _fmt_judged(ci: dict, judged: dict, margin: float) -> str:
    """The run's interval and, when the run-to-run margin widened it, the one the verdict judged (spanning the limit)."""
    moved = margin and judged.get("lo") is not None
    return _fmt_ci(ci) + (f" (±{margin:.0%} run to run: [{judged['lo']:.2f}, {judged['hi']:.2f}])" if moved else "")


def _order(items: list[dict]) -> list[dict]:
    order = {m: i for i, m in enumerate(GAP_METRICS)}
    return sorted(items, key=lambda o: order[o["metric"]])


def mock_line(v: dict) -> str:
    """The mocks' part of the headline: the status, every offender (with its top stage) and every undecided
    mock (with what to measure more)."""
    limit = 1 + v["threshold"]
    parts = []
    for src in dict.fromkeys(o["source"] for o in v["offenders"]):
        offs = _order([o for o in v["offenders"] if o["source"] == src])
        g = v["gaps"][src]
        text = f"{src} overstates real " + ", ".join(
            f"{METRIC_LABELS[o['metric']]} {_fmt_ci(g[o['metric']])}" for o in offs
        )
        top = v["attribution"][src]["top_stage"]
        if top:
            text += f"; most of its gap is {top}"
        parts.append(text)
    undecided = [s for s, st in v.get("states", {}).items() if st == UNDECIDED]
    margin = v.get("repeat_margin") or 0.0
    for src in undecided:
        items = _order([u for u in v.get("undecided", []) if u["source"] == src])
        g = v["gaps"][src]
        if items and all(u["few_steps"] for u in items):
            n = min((g[items[0]["metric"]] or {}).get("steps") or [0])
            parts.append(
                f"{src} undecided: {n} steps per source, too few for an interval (at least {v.get('min_interval_steps', MIN_INTERVAL_STEPS)})"
            )
        elif items:
            parts.append(
                f"{src} undecided: "
                + ", ".join(
                    f"{METRIC_LABELS[u['metric']]} {_fmt_judged(g[u['metric']], u, margin)} spans {limit:.2f}"
                    for u in items
                )
            )
    within = [s for s, st in v.get("states", {}).items() if st == WITHIN]
    if v["status"] == "MISLEADING":
        line = f"MISLEADING (limit {limit:.2f}x): " + "; ".join(parts)
    elif v["status"] == "UNDECIDED":
        line = f"UNDECIDED (limit {limit:.2f}x): " + "; ".join(parts)
        if within:
            line += f"; {', '.join(within)} within {v['threshold']:.0%} of real"
    else:
        line = (
            f"OK: {', '.join(within)} within {v['threshold']:.0%} of real" if within else "OK: no mock source measured"
        )
    if v["status"] == "UNDECIDED" or (v["status"] == "MISLEADING" and undecided):
        line += f"; {v.get('more', MORE)}"
    return line


def proxy_line(v: dict) -> str | None:
    """Synthetic's part of the headline, or None without a synthetic source."""
    sp = v.get("synthetic_proxy")
    if not sp or sp.get("max_deviation") is None:
        return None
    tol = v["proxy_tolerance"]
    state = sp.get("state") or ("trustworthy" if sp["trustworthy"] else "not trustworthy")
    dev = f"max deviation {sp['max_deviation']:.1%}, tolerance {tol:.0%} on the interval"
    cause = proxy_cause(v)
    if state == "trustworthy":
        return f"synthetic is a trustworthy proxy ({dev}, every interval inside 1 ± {tol:.0%})"
    if state == "not trustworthy":
        return f"synthetic is NOT a trustworthy proxy ({dev}, an interval outside 1 ± {tol:.0%}" + (
            f"; {cause})" if cause else ")"
        )
    why = (
        "too few steps for an interval"
        if sp.get("few_steps")
        else f"an interval lies outside 1 ± {tol:.0%}, but in compute stages: host noise"
        if sp.get("host_noise")
        else f"an interval spans 1 ± {tol:.0%}"
    )
    return (
        f"synthetic as a proxy is undecided ({dev}; {why}"
        + (f"; {cause}" if cause else "")
        + f"): {v.get('more', MORE)}"
    )


HOST_STAGES = ("data_wait", "prep", "h2d")  # where the twin's bytes can cost differently from real's


def proxy_cause(v: dict) -> str | None:
    """Where synthetic's deviation sits: its largest per-sample stage difference from real, named as a host-side
    cost (data wait, prep, h2d: the generated images decode and move differently) or as host noise (a compute
    stage: the twin has real's shapes and token ids, so the same FLOPs; a difference there is the host's, e.g.
    a competing process on a small CPU, not the data's)."""
    att = (v.get("attribution") or {}).get(PROXY) or {}
    diff = att.get("ms_per_sample_diff") or {}  # real minus synthetic, ms per sample
    if not diff:
        return None
    stage, d = max(diff.items(), key=lambda kv: abs(kv[1]))
    if abs(d) < 0.05:
        return None
    slower = "synthetic" if d < 0 else "real"
    if stage in HOST_STAGES:
        return f"largest difference: {stage}, {abs(d):.1f} ms/sample more on {slower} (a host-side cost of the images)"
    return (
        f"largest difference: {stage}, {abs(d):.1f} ms/sample more on {slower}: a compute stage with the same "
        "shapes on both, so host noise (e.g. a competing process), not the data"
    )


def verdict_line(v: dict) -> str:
    """One line for the terminal and the report: the mocks (``mock_line``), synthetic (``proxy_line``), the
    next knob."""
    parts = [mock_line(v), proxy_line(v), f"next knob: {v['next_knob']}" if v.get("next_knob") else None]
    return "; ".join(p for p in parts if p)


DOES_NOT_FIT = "DOES NOT FIT"


def out_of_memory_verdict(oom: dict, measured: list[str], real: str = "real") -> dict:
    """The verdict when ``real`` ran out of memory (module docstring). ``oom``: source -> ``{"where", "error"}``
    of every source that did; ``measured``: the sources that ran (real's twin, synthetic, is not a mock)."""
    info = oom[real]
    error = (str(info.get("error") or "out of memory").splitlines() or [""])[0][:160]
    why = f"{info.get('where') or 'a step'}: {error}"
    mocks = [s for s in measured if s not in (real, PROXY) and "@" not in s]
    fix = "a smaller `micro_batch_size`, recompute or more parallelism"
    if mocks:
        status = "MISLEADING"
        line = (
            f"MISLEADING: real data runs out of memory under this configuration ({why}) while {', '.join(mocks)} "
            f"ran: the mock figure is of a configuration real data cannot run; measure one that fits ({fix})"
        )
    else:
        status = DOES_NOT_FIT
        gone = ", ".join(sorted(oom))
        line = f"{DOES_NOT_FIT}: {gone} ran out of memory under this configuration ({why}): nothing to compare; {fix}"
    verdict = dict(status=status, line=line, gaps={}, attribution={}, undecided=[], knobs=[], next_knob=None)
    verdict["offenders"] = [{"source": m, "metric": "fits in memory", "confident": True} for m in mocks]
    verdict["out_of_memory"] = {"sources": sorted(oom), "where": info.get("where"), "measured": list(measured)}
    return verdict
