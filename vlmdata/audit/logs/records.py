"""A parsed log's logged intervals as the audit's step records, warm-up excluded (the package docstring,
``vlmdata.audit.logs``, says how intervals, tokens and warm-up are counted).

``to_records(parsed, warmup, seq_length)``: one record per logged interval (work and time over all its
iterations); ``iteration_summary(records)``: per-iteration step time; ``log_summary(records)``: a log side's
``metrics.summarize`` with ``step_ms`` per iteration.
"""

from __future__ import annotations

import numpy as np

from vlmdata.audit.analysis.metrics import summarize
from vlmdata.audit.analysis.verdict import MIN_INTERVAL_STEPS
from vlmdata.audit.logs.parse import MAX_LINE_BYTES, MS_KEY, TFLOPS_KEY, TOKEN_KEYS, USEFUL_KEYS, config_int


def _first(fields: dict, keys) -> float | None:
    return next((fields[k] for k in keys if fields.get(k) is not None), None)


def _intervals(parsed: dict) -> tuple[list[dict], str | None]:
    """Iteration lines, or intervals made from Step Time lines: ``[{"iteration", fields...}]``."""
    if parsed["lines"]:
        return parsed["lines"], None
    interval = config_int(parsed["config"], "log_interval") or 1
    gbs = config_int(parsed["config"], "global_batch_size")
    out = []
    for k, st in enumerate(parsed["step_times"], 1):
        f = {"iteration": k * interval, MS_KEY: st["s"] * 1e3, TFLOPS_KEY: st["tflops"]}
        if gbs is not None:
            f["global batch size"] = gbs
        out.append(f)
    note = (
        f"no iteration lines: intervals from {len(out)} Bridge 'Step Time' lines, "
        + (
            f"log_interval {interval}"
            if config_int(parsed["config"], "log_interval")
            else "log_interval not in the dump (1 assumed)"
        )
        + ("" if gbs is not None else "; global_batch_size not in the dump, so no samples/s")
    )
    return out, note


def _records(lines: list[dict], warmup: int, seq: int | None, log_interval: int | None = None) -> list[dict]:
    """One record per line.  A line averages the iterations since the previous *printed* line, which is
    ``log_interval`` of them: when the dump gives log_interval, a longer gap (lines cut out of an
    excerpt) still counts as log_interval iterations, with samples from the global batch size."""
    records, prev, prev_samples = [], None, None
    for f in lines:
        start = (
            prev
            if prev is not None
            else (f["iteration"] - (lines[1]["iteration"] - f["iteration"]) if len(lines) > 1 else 0)
        )
        start = max(start, 0)
        gap = f["iteration"] - start
        n = min(gap, log_interval) if log_interval else gap
        start = f["iteration"] - n
        samples = f.get("consumed samples")
        prev, prev_samples, prev_samples_old = f["iteration"], samples, prev_samples
        ms = f.get(MS_KEY)
        if start < warmup or n <= 0 or ms is None:
            continue
        gbs = f.get("global batch size")
        done = (
            samples - prev_samples_old
            if samples is not None and prev_samples_old is not None and gap == n
            else (gbs * n if gbs is not None else None)
        )
        tokens = _first(f, TOKEN_KEYS)
        tokens = tokens * n if tokens is not None else (gbs * seq * n if gbs is not None and seq else None)
        useful = _first(f, USEFUL_KEYS)
        tf = f.get(TFLOPS_KEY)
        records.append(
            {
                "step": f["iteration"],
                "iterations": n,
                "iteration_ms": ms,
                "step_ms": ms * n,
                "data_wait_ms": None,
                "samples": done,
                "global_batch_size": gbs,
                "tokens_total": tokens,
                "tokens_loss": None if useful is None else useful * n,
                "tokens_nonpad": None,
                "images": None,
                "tokens_visual": None,
                "tokens_padding": None,
                "flops": None if tf is None else tf * 1e12 * ms * n / 1e3,
            }
        )
    return records


def to_records(parsed: dict, warmup: int | None = None, seq_length: int | None = None) -> tuple[list[dict], dict]:
    """One record per logged interval after warm-up, and what was kept.

    Args:
        parsed: ``parse_log``'s result.
        warmup: iterations to exclude (an interval is kept when it starts at or after this); None: the
            first logged interval and the first 10% of iterations, relaxed for short runs.
        seq_length: tokens per sample when the dump does not say.

    Returns:
        ``(records, info)``; info has the path, format, warm-up used, seq_length, counts and ``notes``.
    """
    lines, note = _intervals(parsed)
    notes = [note] if note else []
    if parsed.get("long_lines"):
        notes.append(f"{parsed['long_lines']} line(s) longer than {MAX_LINE_BYTES} bytes skipped")
    seq = parsed.get("seq_length") or seq_length  # the log's own value wins
    interval = config_int(parsed.get("config", {}), "log_interval")
    first, last = lines[0]["iteration"], lines[-1]["iteration"]
    if warmup is not None:
        used = warmup
        records = _records(lines, used, seq, interval)
    else:
        used = max(first, last // 10)
        records = _records(lines, used, seq, interval)
        if not records and len(lines) > 1:
            used = first
            records = _records(lines, used, seq, interval)
        if not records:
            used = 0
            records = _records(lines, used, seq, interval)
            notes.append(
                f"short run: {len(lines)} logged interval(s) in all, so warm-up could not be excluded "
                "(the figures include start-up); log more often (log_interval) or run longer"
            )
    if records and len(records) < MIN_INTERVAL_STEPS:
        notes.append(
            f"{len(records)} logged interval(s) after warm-up, fewer than {MIN_INTERVAL_STEPS}: no confidence "
            "interval (the verdict is undecided); log more often (log_interval) or run longer"
        )
    gbs = sorted({r["global_batch_size"] for r in records if r["global_batch_size"] is not None})
    info = {
        "path": parsed["path"],
        "format": parsed.get("format", "iteration lines"),
        "warmup_iterations": used,
        "seq_length": seq,
        "restarts": parsed["restarts"],
        "logged_lines": len(lines),
        "kept_intervals": len(records),
        "iterations": sum(r["iterations"] for r in records),
        "first_kept": records[0]["step"] - records[0]["iterations"] + 1 if records else None,
        "last_kept": records[-1]["step"] if records else None,
        "global_batch_size": int(gbs[-1]) if gbs else config_int(parsed.get("config", {}), "global_batch_size"),
        "global_batch_sizes": [int(g) for g in gbs],
        "skipped_iterations": int(sum(f.get("number of skipped iterations", 0) or 0 for f in lines)),
        "nan_iterations": int(sum(f.get("number of nan iterations", 0) or 0 for f in lines)),
        "notes": notes,
    }
    return records, info


def iteration_summary(records: list[dict]) -> dict:
    """Per-iteration step time over the kept intervals (each interval's average weighted by its
    iterations): median, p10, p90, mean, std, cv, iqr, min, max.

    Args:
        records: ``to_records``' records.

    Returns:
        The dict that replaces ``summary["step_ms"]`` for a log.
    """
    per = np.repeat(
        np.array([r["iteration_ms"] for r in records], dtype=np.float64),
        np.array([r["iterations"] for r in records], dtype=np.int64),
    )
    mean = float(per.mean())
    std = float(per.std(ddof=1)) if len(records) > 1 else 0.0
    q = np.percentile(per, [10, 25, 50, 75, 90])
    return {
        "median": float(q[2]),
        "p10": float(q[0]),
        "p90": float(q[4]),
        "mean": mean,
        "std": std,
        "iqr": float(q[3] - q[1]),
        "min": float(per.min()),
        "max": float(per.max()),
        "cv": std / mean if mean else 0.0,
        "per": "iteration",
    }


def log_summary(records: list[dict]) -> dict:
    s = summarize(records)
    s["interval_ms"] = s["step_ms"]
    s["step_ms"] = iteration_summary(records)
    iters = sum(r["iterations"] for r in records)
    samples = [r["samples"] for r in records]
    s["samples_per_step"] = None if None in samples else sum(samples) / iters
    s["iterations"] = iters
    return s
