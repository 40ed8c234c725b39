"""The audit's verdict: is the mock throughput figure reportable, is synthetic a proxy, and why.

- gap = source rate / real rate for samples/s, TFLOP/s and non-pad tokens/s (``GAP_METRICS``), each
  with a 95% bootstrap interval; sources measured interleaved are resampled jointly by step (paired);
- MISLEADING when, for any judged source (every source but real and synthetic: the mocks), any gap's
  point estimate exceeds ``1 + threshold``; ``confident`` says whether the interval's lower end is above
  the limit too. The headline names every offender;
- synthetic is a trustworthy proxy when every available gap synthetic/real is within ``proxy_tolerance``
  (5%) of 1;
- ``settled``: the intervals are tight enough for the verdict (each on one side of its limit, each within
  ±precision of its ratio); the runner measures until they are;
- the stage that contributes most to each mock's gap: per-sample stage time, real minus mock;
- knobs: rules on the real source's figures, largest share first (the next one to look at).
"""

from __future__ import annotations

from vlmdata.audit.metrics import RATE_LABELS, ratio_ci

GAP_METRICS = ("samples_per_s", "tflops", "nonpad_tokens_per_s")  # headline order: what people report first
METRIC_LABELS = {m: RATE_LABELS[m] for m in GAP_METRICS} | {"tflops": "TFLOP/s"}
DEFAULT_THRESHOLD = 0.10
PROXY_TOLERANCE = 0.05
PROXY = "synthetic"
FORWARD_STAGES = ("forward_other", "vision", "projector", "lm_forward", "lm_head_loss")


def gaps(runs: dict[str, dict], source: str, real: str = "real", seed: int = 0) -> dict[str, dict | None]:
    """``{metric: ratio_ci(source/real)}``; ``runs[name] = {"records", "world_size", "interleaved"?}``."""
    a, b = runs[source], runs[real]
    paired = bool(a.get("interleaved") and b.get("interleaved"))
    return {
        m: ratio_ci(
            a["records"],
            b["records"],
            m,
            world_num=a.get("world_size", 1),
            world_den=b.get("world_size", 1),
            paired=paired,
            seed=seed,
        )
        for m in GAP_METRICS
    }


def _bounds(source: str, threshold: float, proxy_tolerance: float) -> tuple[float, ...]:
    return (1 - proxy_tolerance, 1 + proxy_tolerance) if source == PROXY else (1 + threshold,)


def settled(
    runs: dict[str, dict],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    proxy_tolerance: float = PROXY_TOLERANCE,
    precision: float = 0.05,
    real: str = "real",
    seed: int = 0,
) -> tuple[bool, list[str]]:
    """(every gap decided, the gaps still open). A gap is decided when its interval lies on one side of each
    of its limits (1 + threshold for a mock; 1 ± proxy_tolerance for synthetic) and its half-width is at most
    ``precision`` of its ratio."""
    open_items = []
    for src in runs:
        if src == real:
            continue
        for m, ci in gaps(runs, src, real, seed).items():
            if ci is None or ci["lo"] is None:
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


def stage_attribution(mock: dict, real: dict) -> dict:
    """Which stages make real slower than mock, per sample (ms): real minus mock, largest first."""
    rm, mm = real.get("stages_ms_per_sample") or {}, mock.get("stages_ms_per_sample") or {}
    diff = {k: rm.get(k, 0.0) - mm.get(k, 0.0) for k in {*rm, *mm}}
    total = sum(diff.values())
    ranked = sorted(diff.items(), key=lambda kv: -kv[1])
    top = ranked[0][0] if ranked and ranked[0][1] > 0 else None
    return {
        "ms_per_sample_diff": dict(ranked),
        "total_ms_per_sample_diff": total,
        "top_stage": top,
        "top_share": diff[top] / total if top and total > 0 else None,
    }


def knobs(real: dict, stragglers: list[int] | None = None) -> list[dict]:
    """Rules on the real source's summary, each with the share of step time at stake, largest first."""
    st, step = real.get("stages_ms") or {}, real["step_ms"]["mean"]
    share = (lambda *ks: sum(st.get(k, 0.0) for k in ks) / step) if step else (lambda *ks: 0.0)
    fwd = sum(st.get(k, 0.0) for k in FORWARD_STAGES)
    out = []
    wait = real.get("data_wait_fraction") or 0.0
    if wait > 0.05:
        out.append(
            {
                "knob": "data_wait",
                "share": wait,
                "message": f"data wait is {wait:.0%} of step time (> 5%): the loader does not keep up; add DataLoader "
                "workers, pin memory, use the fast image path or GPU JPEG decode",
            }
        )
    vis = st.get("vision", 0.0) + st.get("projector", 0.0)
    if fwd and (vis / fwd > 0.30 or vis == max(st.get(k, 0.0) for k in FORWARD_STAGES) > 0):
        out.append(
            {
                "knob": "vision_encoder",
                "share": min(3 * share("vision", "projector"), 1.0),
                "message": f"vision encoder dominates: {vis / fwd:.0%} of the forward (backward about the same share); "
                "profile it separately, use varlen flash attention, lower max_pixels, or give it its own "
                "parallelism",
            }
        )
    pad = (real.get("shape") or {}).get("padding_fraction") or 0.0
    if pad > 0.30:
        out.append(
            {
                "knob": "padding",
                "share": pad,
                "message": f"padding is {pad:.0%} of tokens (> 30%): pack sequences or pad to a multiple of 128 "
                "instead of seq_length; compare runs by non-pad tokens/s",
            }
        )
    h2d = share("h2d")
    if h2d > 0.05:
        out.append(
            {
                "knob": "h2d",
                "share": h2d,
                "message": f"host-to-device copies take {h2d:.0%} of step time: pin memory (non_blocking copies)",
            }
        )
    head = share("lm_head_loss")
    if head > 0.25:
        out.append(
            {
                "knob": "lm_head",
                "share": head,
                "message": f"lm_head + loss take {head:.0%} of step time: the vocabulary projection over every token; "
                "compute logits on loss tokens only or fuse the cross entropy",
            }
        )
    cv = real["step_ms"].get("cv") or 0.0
    if cv > 0.20:
        out.append(
            {
                "knob": "variance",
                "share": cv / 2,
                "message": f"step time varies (cv {cv:.0%}): batches carry different visual work; bucket by visual "
                "tokens or balance images across micro-batches",
            }
        )
    if stragglers:
        out.append(
            {
                "knob": "stragglers",
                "share": 1.0,
                "message": f"ranks {stragglers} carry more visual tokens per step and stall the others: balance images "
                "across data-parallel ranks",
            }
        )
    return sorted(out, key=lambda k: -k["share"])


def decide(
    runs: dict[str, dict],
    summaries: dict[str, dict],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    proxy_tolerance: float = PROXY_TOLERANCE,
    real: str = "real",
    stragglers: list[int] | None = None,
    seed: int = 0,
) -> dict:
    """The full verdict. ``runs[name]["records"]`` are the measured steps; ``summaries`` from metrics.summarize."""
    if real not in runs:
        raise ValueError(f"the verdict needs the {real!r} source")
    others = [s for s in runs if s != real]
    if not others:
        raise ValueError("the verdict needs at least one source besides real")
    limit = 1 + threshold
    result = {
        "threshold": threshold,
        "proxy_tolerance": proxy_tolerance,
        "metrics": list(GAP_METRICS),
        "gaps": {},
        "attribution": {},
        "offenders": [],
    }
    for src in others:
        g = gaps(runs, src, real, seed)
        result["gaps"][src] = g
        result["attribution"][src] = stage_attribution(summaries[src], summaries[real])
        if src == PROXY:
            continue
        for m, ci in g.items():
            if ci is not None and ci["ratio"] > limit:
                result["offenders"].append(
                    {
                        "source": src,
                        "metric": m,
                        "ratio": ci["ratio"],
                        "lo": ci["lo"],
                        "hi": ci["hi"],
                        "confident": ci["lo"] is not None and ci["lo"] > limit,
                    }
                )
    result["status"] = "MISLEADING" if result["offenders"] else "OK"
    if PROXY in result["gaps"]:
        devs = {m: abs(ci["ratio"] - 1) for m, ci in result["gaps"][PROXY].items() if ci is not None}
        cis = [ci for ci in result["gaps"][PROXY].values() if ci is not None and ci["lo"] is not None]
        result["synthetic_proxy"] = {
            "trustworthy": bool(devs) and max(devs.values()) <= proxy_tolerance,
            "max_deviation": max(devs.values()) if devs else None,
            "deviations": devs,
            "intervals_include_1": bool(cis) and all(c["lo"] <= 1 <= c["hi"] for c in cis),
        }
    result["knobs"] = knobs(summaries[real], stragglers)
    result["next_knob"] = result["knobs"][0]["knob"] if result["knobs"] else None
    result["line"] = verdict_line(result)
    return result


def _fmt_ci(ci: dict) -> str:
    return f"{ci['ratio']:.2f}x" + (f" [{ci['lo']:.2f}, {ci['hi']:.2f}]" if ci.get("lo") is not None else "")


def verdict_line(v: dict) -> str:
    """One line for the terminal and the report; a MISLEADING line names every offending source."""
    limit = 1 + v["threshold"]
    order = {m: i for i, m in enumerate(GAP_METRICS)}
    if v["status"] == "MISLEADING":
        parts = []
        for src in dict.fromkeys(o["source"] for o in v["offenders"]):
            offs = sorted((o for o in v["offenders"] if o["source"] == src), key=lambda o: order[o["metric"]])
            g = v["gaps"][src]
            first = offs[0]
            others = ", ".join(f"{METRIC_LABELS[o['metric']]} {_fmt_ci(g[o['metric']])}" for o in offs[1:])
            text = f"{src} overstates real {METRIC_LABELS[first['metric']]} {_fmt_ci(g[first['metric']])}"
            if others:
                text += f", {others}"
            if any(o["lo"] is None for o in offs):
                text += " (no confidence interval: too few steps)"
            elif not all(o["confident"] for o in offs):
                text += " (an interval reaches below the limit)"
            top = v["attribution"][src]["top_stage"]
            if top:
                text += f"; most of its gap is {top}"
            parts.append(text)
        line = f"MISLEADING (limit {limit:.2f}x): " + "; ".join(parts)
    else:
        judged = [s for s in v["gaps"] if s != PROXY]
        line = (
            f"OK: {', '.join(judged)} within {v['threshold']:.0%} of real" if judged else "OK: no mock source measured"
        )
    sp = v.get("synthetic_proxy")
    if sp and sp["max_deviation"] is not None:
        line += (
            f"; synthetic {'is' if sp['trustworthy'] else 'is NOT'} a trustworthy proxy "
            f"(max deviation {sp['max_deviation']:.1%}, tolerance {v['proxy_tolerance']:.0%}"
            + (
                ", intervals include 1: measure more steps"
                if not sp["trustworthy"] and sp.get("intervals_include_1")
                else ""
            )
            + ")"
        )
    if v.get("next_knob"):
        line += f"; next knob: {v['next_knob']}"
    return line
