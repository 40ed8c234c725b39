"""Per-source throughput figures from per-step records, and bootstrap intervals for ratios.

A record is one measured step (or, for training logs, one logged interval)::

    {"step_ms": wall time of the step including the wait for its batch,
     "data_wait_ms": time blocked on the loader iterator,
     "samples", "images", "tokens_total", "tokens_useful", "tokens_visual", "tokens_padding",
     "flops": model FLOPs of the step (all ranks), "times_ms": {stage: ms} (optional),
     "visual_tokens_per_sample": [...] (optional), "peak_mem_bytes" (optional)}

Rates are ratios of sums (total work / total time), so a slow step weighs what it costs.
Missing work fields give ``None`` rates.  Intervals: percentile bootstrap over steps, each source
resampled independently, fixed seed.
"""

from __future__ import annotations

import numpy as np

# rate name -> work field (divided by total step seconds)
RATES = {
    "samples_per_s": "samples",
    "images_per_s": "images",
    "tokens_per_s": "tokens_total",
    "useful_tokens_per_s": "tokens_useful",
    "visual_tokens_per_s": "tokens_visual",
    "tflops": "flops",  # per GPU: divided by world size and 1e12
}
STAGE_ORDER = ("data_wait", "prep", "h2d", "forward_other", "vision", "projector", "lm_forward",
               "lm_head_loss", "backward", "optimizer", "other")


def _column(records: list[dict], key: str) -> np.ndarray | None:
    vals = [r.get(key) for r in records]
    if not vals or any(v is None for v in vals):
        return None
    return np.asarray(vals, dtype=np.float64)


def rate(records: list[dict], name: str, world_size: int = 1) -> float | None:
    """One rate over ``records``: total work / total seconds (TFLOP/s per GPU for ``tflops``)."""
    work, ms = _column(records, RATES[name]), _column(records, "step_ms")
    if work is None or ms is None:
        return None
    seconds = ms.sum() / 1e3
    if seconds <= 0:
        return None
    value = work.sum() / seconds
    return value / world_size / 1e12 if name == "tflops" else float(value)


def _pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q))


def stage_split(records: list[dict]) -> dict[str, float]:
    """Mean ms per step of each stage; ``other`` = step wall time not covered by data wait and the
    workload's own stages (host overhead, the final sync, hooks)."""
    out: dict[str, float] = {}
    n = len(records)
    if not n:
        return out
    if all(not r.get("times_ms") and r.get("data_wait_ms") is None for r in records):
        return out  # training logs: no stage times
    for r in records:
        t, wait = r.get("times_ms") or {}, r.get("data_wait_ms") or 0.0
        covered = wait + t.get("total", 0.0)
        parts = {"data_wait": wait, **{k: v for k, v in t.items() if k != "total"},
                 "other": max(r["step_ms"] - covered, 0.0)}
        for k, v in parts.items():
            out[k] = out.get(k, 0.0) + float(v) / n
    return {k: out[k] for k in (*STAGE_ORDER, *sorted(set(out) - set(STAGE_ORDER))) if k in out}


def summarize(records: list[dict], world_size: int = 1) -> dict:
    """Every figure of one source: step time distribution, rates, workload shape, stage split."""
    if not records:
        raise ValueError("no measured steps")
    ms = _column(records, "step_ms")
    out = {"steps": len(records), "world_size": world_size,
           "step_ms": {"median": _pct(ms, 50), "p10": _pct(ms, 10), "p90": _pct(ms, 90), "mean": float(ms.mean()),
                       "std": float(ms.std(ddof=1)) if len(ms) > 1 else 0.0,
                       "iqr": _pct(ms, 75) - _pct(ms, 25), "min": float(ms.min()), "max": float(ms.max())}}
    out["step_ms"]["cv"] = out["step_ms"]["std"] / out["step_ms"]["mean"] if out["step_ms"]["mean"] else 0.0
    out["rates"] = {name: rate(records, name, world_size) for name in RATES}
    shape = {}
    samples = _column(records, "samples")
    for key in ("images", "tokens_total", "tokens_useful", "tokens_visual", "tokens_padding", "flops"):
        col = _column(records, key)
        shape[f"{key}_per_sample"] = None if col is None or samples is None or samples.sum() == 0 \
            else float(col.sum() / samples.sum())
    tt, pad = _column(records, "tokens_total"), _column(records, "tokens_padding")
    shape["padding_fraction"] = None if tt is None or pad is None or tt.sum() == 0 else float(pad.sum() / tt.sum())
    useful = _column(records, "tokens_useful")
    shape["ms_per_1k_useful_tokens"] = None if useful is None or useful.sum() == 0 \
        else float(ms.sum() / useful.sum() * 1e3)
    shape["ms_per_sample"] = None if samples is None or samples.sum() == 0 else float(ms.sum() / samples.sum())
    out["shape"] = shape
    out["stages_ms"] = stage_split(records)
    per_step = None if samples is None or samples.mean() == 0 else float(samples.mean())
    out["samples_per_step"] = per_step
    out["stages_ms_per_sample"] = {k: v / per_step for k, v in out["stages_ms"].items()} if per_step else {}
    wait = _column(records, "data_wait_ms")
    out["data_wait_fraction"] = None if wait is None else float(wait.sum() / ms.sum())
    peaks = [r.get("peak_mem_bytes") for r in records if r.get("peak_mem_bytes") is not None]
    out["peak_mem_bytes"] = max(peaks) if peaks else None
    vts = [v for r in records for v in r.get("visual_tokens_per_sample") or []]
    out["visual_tokens_per_sample"] = vts
    return out


def _rate_arrays(records: list[dict], name: str) -> tuple[np.ndarray, np.ndarray] | None:
    work, ms = _column(records, RATES[name]), _column(records, "step_ms")
    return None if work is None or ms is None else (work, ms)


def ratio_ci(num: list[dict], den: list[dict], name: str, *, world_num: int = 1, world_den: int = 1,
             n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict | None:
    """rate(num)/rate(den) with a percentile bootstrap interval (steps resampled with replacement,
    each side independently, vectorised).  None when either rate is missing or zero."""
    a, b = rate(num, name, world_num), rate(den, name, world_den)
    if a is None or b is None or b == 0:
        return None
    (wa, ta), (wb, tb) = _rate_arrays(num, name), _rate_arrays(den, name)
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(wa), (n_boot, len(wa)))
    ib = rng.integers(0, len(wb), (n_boot, len(wb)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (wa[ia].sum(1) / ta[ia].sum(1) / world_num) / (wb[ib].sum(1) / tb[ib].sum(1) / world_den)
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - level) / 2 * 100
    lo, hi = (float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))) if ratios.size \
        else (None, None)
    return {"ratio": a / b, "lo": lo, "hi": hi, "level": level, "n_boot": n_boot}
