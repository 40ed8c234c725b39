"""Parse Megatron-LM / Megatron Bridge training logs and give the audit's verdict on two runs.

Both print one line per logging interval (Megatron-LM ``training.py: training_log``, Bridge
``training/utils/train_utils.py: training_log``), fields separated by ``|``::

     [2026-01-01 00:00:00] iteration       20/     100 | consumed samples:          640 |
     elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 |
     learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 2.345678E+00 | ...

(one line in the log; Megatron-LM's timestamp has microseconds).  ``elapsed time per iteration`` and
``throughput per GPU`` are averages over the interval since the previous logged line, so each line
becomes one record covering ``iteration - previous iteration`` iterations.  Bridge also prints
``Step Time : 1.23s GPU utilization: 123.4MODEL_TFLOP/s/GPU`` (rank 0), used when the iteration line
lacks the throughput field.  Tokens per iteration: a ``tokens`` field when one is logged, else
``global batch size x seq_length`` (padded tokens, as Bridge's ``time/tokens``), with seq_length from
the argument dump (``seq_length ..... 4096`` or ``seq_length: 4096``) or given by the caller.
Useful (loss-carrying) tokens are not logged by either, so that gap is reported only when a
``useful tokens`` field exists.
"""

from __future__ import annotations

import re

from .metrics import summarize
from .verdict import DEFAULT_THRESHOLD, decide

ITER_RE = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
STEP_TIME_RE = re.compile(r"Step Time\s*:\s*([\d.]+)s\s+GPU utilization:\s*([\d.]+)\s*MODEL_TFLOP/s/GPU")
SEQ_RE = re.compile(r"^\W*(?:[\w.]+\.)?seq_length\s*(?:\.{2,}|:|=)\s*(\d+)\s*$")
TOKEN_KEYS = ("tokens per iteration", "tokens per batch", "tokens", "num tokens", "total tokens")
USEFUL_KEYS = ("useful tokens", "loss tokens", "num loss tokens")


class LogError(Exception):
    """A log cannot be used (missing file, no iteration lines): one line for the user."""


def _num(text: str) -> float | None:
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def parse_line(line: str) -> dict | None:
    """Fields of one iteration line (keys lower-cased), or None."""
    m = ITER_RE.search(line)
    if not m:
        return None
    fields = {"iteration": int(m.group(1)), "train_iters": int(m.group(2))}
    for part in m.group(3).split("|"):
        key, sep, value = part.partition(":")
        if sep and _num(value) is not None:
            fields[key.strip().lower()] = _num(value)
    return fields


def parse_log(path: str) -> dict:
    """``{"lines": [fields...], "seq_length", "restarts"}`` from a log file (a restart keeps the last run)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read().splitlines()
    except OSError as e:
        raise LogError(f"cannot read log {path!r}: {e.strerror or e}") from None
    lines, seq, restarts, step_tflops = [], None, 0, None
    for raw in text:
        m = STEP_TIME_RE.search(raw)
        if m:
            step_tflops = float(m.group(2))
            continue
        s = SEQ_RE.match(raw)
        if s and seq is None:
            seq = int(s.group(1))
            continue
        fields = parse_line(raw)
        if fields is None:
            continue
        if "throughput per gpu (tflop/s/gpu)" not in fields and step_tflops is not None:
            fields["throughput per gpu (tflop/s/gpu)"] = step_tflops
        step_tflops = None
        if lines and fields["iteration"] <= lines[-1]["iteration"]:
            lines, restarts = [], restarts + 1
        lines.append(fields)
    if not lines:
        raise LogError(f"{path!r} has no Megatron iteration lines ('iteration N/M | ... elapsed time per iteration')")
    return {"path": path, "lines": lines, "seq_length": seq, "restarts": restarts}


def _first(fields: dict, keys) -> float | None:
    return next((fields[k] for k in keys if fields.get(k) is not None), None)


def to_records(parsed: dict, warmup: int | None = None, seq_length: int | None = None) -> tuple[list[dict], dict]:
    """One record per logged interval after warm-up.  ``warmup`` iterations are excluded (an interval is
    kept when it starts after them); default: the first logged interval and the first 10% of iterations."""
    lines = parsed["lines"]
    seq = seq_length or parsed.get("seq_length")
    if warmup is None:
        warmup = max(lines[0]["iteration"], lines[-1]["iteration"] // 10)
    records, prev, prev_samples = [], None, None
    for i, f in enumerate(lines):
        start = prev if prev is not None else (
            f["iteration"] - (lines[1]["iteration"] - f["iteration"]) if len(lines) > 1 else 0)
        n = f["iteration"] - start
        samples = f.get("consumed samples")
        prev, prev_samples, prev_samples_old = f["iteration"], samples, prev_samples
        ms = f.get("elapsed time per iteration (ms)")
        if start < warmup or n <= 0 or ms is None:
            continue
        gbs = f.get("global batch size")
        done = samples - prev_samples_old if samples is not None and prev_samples_old is not None else \
            (gbs * n if gbs is not None else None)
        tokens = _first(f, TOKEN_KEYS)
        tokens = tokens * n if tokens is not None else (gbs * seq * n if gbs is not None and seq else None)
        useful = _first(f, USEFUL_KEYS)
        tf = f.get("throughput per gpu (tflop/s/gpu)")
        records.append({"step": f["iteration"], "iterations": n, "step_ms": ms * n, "data_wait_ms": None,
                        "samples": done, "tokens_total": tokens, "tokens_useful": None if useful is None else useful * n,
                        "images": None, "tokens_visual": None, "tokens_padding": None,
                        "flops": None if tf is None else tf * 1e12 * ms * n / 1e3})
    info = {"path": parsed["path"], "warmup_iterations": warmup, "seq_length": seq, "restarts": parsed["restarts"],
            "logged_lines": len(lines), "kept_intervals": len(records),
            "iterations": sum(r["iterations"] for r in records),
            "skipped_iterations": sum(f.get("number of skipped iterations", 0) or 0 for f in lines),
            "nan_iterations": sum(f.get("number of nan iterations", 0) or 0 for f in lines)}
    return records, info


def compare_logs(mock: str, real: str, *, warmup: int | None = None, seq_length: int | None = None,
                 threshold: float = DEFAULT_THRESHOLD, min_intervals: int = 2) -> dict:
    """The audit verdict for two training logs (``mock`` run vs ``real`` run of the same workload)."""
    runs, sources = {}, {}
    for name, path in (("mock", mock), ("real", real)):
        recs, info = to_records(parse_log(path), warmup, seq_length)
        if len(recs) < min_intervals:
            raise LogError(f"{path!r}: {len(recs)} logged interval(s) after {info['warmup_iterations']} warm-up "
                           f"iterations; need at least {min_intervals} (lower --warmup or log more often)")
        runs[name] = {"records": recs, "world_size": 1}  # TFLOP/s are already per GPU in the logs
        sources[name] = {"summary": summarize(recs), "log": info, "records": recs}
    summaries = {k: v["summary"] for k, v in sources.items()}
    return {"schema": "vlmdata.audit/1", "kind": "logs", "config": {"mock": mock, "real": real, "warmup": warmup,
            "seq_length": seq_length, "threshold": threshold}, "sources": sources,
            "verdict": decide(runs, summaries, threshold=threshold)}
