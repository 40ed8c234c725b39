"""Per-source throughput figures from per-step records, and bootstrap intervals for ratios.

A record is one measured step (or, for training logs, one logged interval)::

    {"step_ms": wall time of the step including the wait for its batch,
     "data_wait_ms": time the step waited for data, "wait_kind": "steady" | "epoch_boundary",
     "samples", "images", "tokens_total", "tokens_nonpad", "tokens_loss", "tokens_visual", "tokens_padding",
     "flops": model FLOPs of the step (all ranks), "times_ms": {stage: ms} (optional),
     "visual_tokens_per_sample": [...] (optional), "peak_mem_bytes" (optional)}

Token counts (``TOKEN_DEFINITIONS``): *non-pad* tokens are what the decoder processes for the samples
(text + visual, padding excluded), *loss* tokens are Σ loss_mask (the supervised answer tokens), *visual*
tokens the ``<|image_pad|>`` tokens; *total* includes padding (what the step computes).

Rates are ratios of sums (total work / total time), so a slow step weighs what it costs. Missing work
fields give ``None`` rates. Intervals: percentile bootstrap over steps. When two sources are *paired*
(step k of each saw the same sample positions, measured in the same round), step indices are resampled
jointly, so the per-step variation of the data cancels in the ratio; otherwise each side is resampled
independently. Fixed seed.
"""

from __future__ import annotations

import numpy as np

from vlmdata.audit.analysis.result_types import Records
from vlmdata.audit.workload.stages import STAGE_ORDER

# the work fields of a step record, summed over its micro-batches (and over ranks)
SUMMED = (
    "samples",
    "images",
    "patches",
    "tokens_total",
    "tokens_nonpad",
    "tokens_loss",
    "tokens_visual",
    "tokens_padding",
)
# model FLOPs of a micro-batch (``flops.step_flops``); a step record names the first one "flops"
FLOP_FIELDS = ("total_flops", "lm_flops", "lm_layers_flops", "lm_head_flops", "vision_flops", "projector_flops")

# rate name -> work field (divided by total step seconds)
RATES = {
    "samples_per_s": "samples",
    "images_per_s": "images",
    "tokens_per_s": "tokens_total",
    "nonpad_tokens_per_s": "tokens_nonpad",
    "loss_tokens_per_s": "tokens_loss",
    "visual_tokens_per_s": "tokens_visual",
    "tflops": "flops",  # per GPU: divided by world size and 1e12
}
RATE_LABELS = {
    "samples_per_s": "samples/s",
    "images_per_s": "images/s",
    "tokens_per_s": "tokens/s",
    "nonpad_tokens_per_s": "non-pad tokens/s",
    "loss_tokens_per_s": "loss tokens/s",
    "visual_tokens_per_s": "visual tokens/s",
    "tflops": "TFLOP/s/GPU",
}
TOKEN_DEFINITIONS = {
    "tokens_total": "every position of the batch, padding included (what the step computes)",
    "tokens_nonpad": "text + visual tokens of the samples, padding excluded (what the decoder processes for them)",
    "tokens_loss": "Σ loss_mask: the supervised (assistant) tokens the loss is taken on",
    "tokens_visual": "<|image_pad|> tokens: the vision encoder's output, one per 2x2 merged patch",
    "tokens_padding": "padding positions (pad id after the last real token of a row, or attention_mask == 0)",
}


def _column(records: Records, key: str) -> np.ndarray | None:
    vals = [r.get(key) for r in records]
    if not vals or any(v is None for v in vals):
        return None
    return np.asarray(vals, dtype=np.float64)


def rate(records: Records, name: str, world_size: int = 1) -> float | None:
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


def stage_split(records: Records) -> dict[str, float]:
    """Mean ms per step of each stage; ``other`` = step wall time not covered by the workload's stages
    (host overhead, the final sync, hooks). ``data_wait`` is the workload's own stage when it reports one
    (the device idle while the host waited for data), else the record's ``data_wait_ms``."""
    out: dict[str, float] = {}
    n = len(records)
    if not n:
        return out
    if all(not r.get("times_ms") and r.get("data_wait_ms") is None for r in records):
        return out  # training logs: no stage times
    for r in records:
        t = dict(r.get("times_ms") or {})
        own = t.pop("data_wait", None)  # the workload's stage is inside its total; the record's is not
        wait = float(own) if own is not None else float(r.get("data_wait_ms") or 0.0)
        covered = t.get("total", 0.0) + (0.0 if own is not None else wait)
        parts = {
            "data_wait": wait,
            **{k: v for k, v in t.items() if k != "total"},
            "other": max(r["step_ms"] - covered, 0.0),
        }
        for k, v in parts.items():
            out[k] = out.get(k, 0.0) + float(v) / n
    return {k: out[k] for k in (*STAGE_ORDER, *sorted(set(out) - set(STAGE_ORDER))) if k in out}


def data_wait_split(records: Records) -> dict | None:
    """Data wait by kind: ``steady`` steps and ``epoch_boundary`` steps (the first batch of a new epoch),
    each as total ms, steps and share of the measured step time. None without data-wait figures."""
    ms = _column(records, "step_ms")
    if ms is None or all(r.get("data_wait_ms") is None for r in records):
        return None
    total = float(ms.sum()) or 1.0
    out = {}
    for kind in ("steady", "epoch_boundary"):
        waits = [r.get("data_wait_ms") or 0.0 for r in records if r.get("wait_kind", "steady") == kind]
        out[kind] = {
            "steps": len(waits),
            "ms": float(sum(waits)),
            "fraction": float(sum(waits)) / total,
            "max_ms": float(max(waits)) if waits else 0.0,
        }
    return out


def summarize(records: Records, world_size: int = 1) -> dict:
    """Every figure of one source: step time distribution, rates, workload shape, stage split."""
    if not records:
        raise ValueError("no measured steps")
    ms = _column(records, "step_ms")
    assert ms is not None  # every step record carries step_ms (runner, distributed, logs)
    out = {
        "steps": len(records),
        "world_size": world_size,
        "step_ms": {
            "median": _pct(ms, 50),
            "p10": _pct(ms, 10),
            "p90": _pct(ms, 90),
            "mean": float(ms.mean()),
            "std": float(ms.std(ddof=1)) if len(ms) > 1 else 0.0,
            "iqr": _pct(ms, 75) - _pct(ms, 25),
            "min": float(ms.min()),
            "max": float(ms.max()),
        },
    }
    out["step_ms"]["cv"] = out["step_ms"]["std"] / out["step_ms"]["mean"] if out["step_ms"]["mean"] else 0.0
    out["rates"] = {name: rate(records, name, world_size) for name in RATES}
    shape = {}
    samples = _column(records, "samples")
    for key in ("images", "tokens_total", "tokens_nonpad", "tokens_loss", "tokens_visual", "tokens_padding", "flops"):
        col = _column(records, key)
        shape[f"{key}_per_sample"] = (
            None if col is None or samples is None or samples.sum() == 0 else float(col.sum() / samples.sum())
        )
    tt, pad = _column(records, "tokens_total"), _column(records, "tokens_padding")
    shape["padding_fraction"] = None if tt is None or pad is None or tt.sum() == 0 else float(pad.sum() / tt.sum())
    nonpad = _column(records, "tokens_nonpad")
    shape["ms_per_1k_nonpad_tokens"] = (
        None if nonpad is None or nonpad.sum() == 0 else float(ms.sum() / nonpad.sum() * 1e3)
    )
    shape["ms_per_sample"] = None if samples is None or samples.sum() == 0 else float(ms.sum() / samples.sum())
    out["shape"] = shape
    out["stages_ms"] = stage_split(records)
    per_step = None if samples is None or samples.mean() == 0 else float(samples.mean())
    out["samples_per_step"] = per_step
    out["stages_ms_per_sample"] = {k: v / per_step for k, v in out["stages_ms"].items()} if per_step else {}
    wait = _column(records, "data_wait_ms")
    out["data_wait_fraction"] = None if wait is None else float(wait.sum() / ms.sum())
    out["data_wait"] = data_wait_split(records)
    peaks = [p for r in records if (p := r.get("peak_mem_bytes")) is not None]
    out["peak_mem_bytes"] = max(peaks) if peaks else None
    vts = [v for r in records for v in r.get("visual_tokens_per_sample") or []]
    out["visual_tokens_per_sample"] = vts
    out["first_seen_shapes"] = int(sum(r.get("first_seen_shapes") or 0 for r in records))
    return out


def _rate_arrays(records: Records, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    work, ms = _column(records, RATES[name]), _column(records, "step_ms")
    return None if work is None or ms is None else (work, ms)


def rate_replicates(records: Records, name: str, idx: np.ndarray, world_size: int = 1) -> np.ndarray | None:
    """Bootstrap replicates of ``rate(records, name)``: one per row of ``idx`` (step indices drawn with
    replacement), each a ratio of sums as ``rate`` (the same draws as ``ratio_ci``'s). None without the rate."""
    arrays = _rate_arrays(records, name)
    if arrays is None:
        return None
    work, ms = arrays
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = work[idx].sum(1) / (ms[idx].sum(1) / 1e3)
    return reps / world_size / 1e12 if name == "tflops" else reps


def ratio_ci(
    num: Records,
    den: Records,
    name: str,
    *,
    world_num: int = 1,
    world_den: int = 1,
    paired: bool = False,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict | None:
    """rate(num)/rate(den) with a percentile bootstrap interval, vectorised.

    ``paired``: step ``k`` of both lists belongs together (same sample positions, same round), so step
    indices are resampled jointly; needs equal lengths. Otherwise each side is resampled independently.
    None when either rate is missing or zero."""
    a, b = rate(num, name, world_num), rate(den, name, world_den)
    if a is None or b is None or b == 0:
        return None
    ra, rb = _rate_arrays(num, name), _rate_arrays(den, name)
    assert ra is not None and rb is not None  # both rates exist, so both columns do
    (wa, ta), (wb, tb) = ra, rb
    rng = np.random.default_rng(seed)
    paired = paired and len(wa) == len(wb)
    ia = rng.integers(0, len(wa), (n_boot, len(wa)))
    ib = ia if paired else rng.integers(0, len(wb), (n_boot, len(wb)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (wa[ia].sum(1) / ta[ia].sum(1) / world_num) / (wb[ib].sum(1) / tb[ib].sum(1) / world_den)
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - level) / 2 * 100
    lo, hi = (
        (float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))) if ratios.size else (None, None)
    )
    return {
        "ratio": a / b,
        "lo": lo,
        "hi": hi,
        "level": level,
        "n_boot": n_boot,
        "paired": paired,
        "steps": [len(wa), len(wb)],
    }


def rate_ci(
    records: Records, name: str, *, world_size: int = 1, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> dict | None:
    """One source's rate with a percentile bootstrap interval over its steps (None without the rate)."""
    value = rate(records, name, world_size)
    arrays = _rate_arrays(records, name)
    if value is None or arrays is None:
        return None
    work, ms = arrays
    idx = np.random.default_rng(seed).integers(0, len(work), (n_boot, len(work)))
    with np.errstate(divide="ignore", invalid="ignore"):
        boots = work[idx].sum(1) / (ms[idx].sum(1) / 1e3) / (world_size * 1e12 if name == "tflops" else 1)
    boots = boots[np.isfinite(boots)]
    tail = (1 - level) / 2 * 100
    return {
        "rate": value,
        "lo": float(np.percentile(boots, tail)),
        "hi": float(np.percentile(boots, 100 - tail)),
        "level": level,
    }
