"""Parse Megatron-LM / Megatron Bridge training logs and give the audit's verdict on two runs.

Formats read (one log may mix them):

- the iteration line both print once per logging interval (Megatron-LM ``training.py: training_log``,
  Bridge ``training/utils/train_utils.py: training_log``; one line in the log)::

     [2026-01-01 00:00:00] iteration       20/     100 | consumed samples:          640 |
     elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 |
     learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 2.345678E+00 | ...

- Bridge's own console line, printed by rank 0 just before each iteration line (which Bridge prints on
  the *last* rank, so with pipeline parallelism rank 0's console has only these)::

    Step Time : 4.65s GPU utilization: 123.4MODEL_TFLOP/s/GPU     (older Bridge: "58.2TFLOP/s/GPU")

  It supplies the throughput when the iteration line has none; a log with no iteration line at all
  is read from these lines alone, one interval each (``log_interval`` iterations from the config
  dump, else 1), with samples from ``global_batch_size`` in the config dump;

- the configuration dump: Megatron-LM's ``  seq_length ........ 4096`` argument list and Bridge's YAML
  (``model:`` / ``  seq_length: 4096``), kept as dotted paths (``model.seq_length``), and the lines
  ``using world size: 8, ...`` and ``number of parameters on (tensor, pipeline) model parallel rank
  (0, 0): N``.

Each logged interval becomes one record whose work (samples, tokens, FLOPs) and time cover all its
iterations (``step_ms`` = per-iteration ms x iterations), so rates are exact ratios of sums and the
bootstrap resamples intervals.  The summary's ``step_ms`` is then replaced by *per-iteration* figures
(interval averages weighted by their iterations; the per-interval ones move to ``interval_ms``), so
"step ms" in tables and the variance advice are per iteration, whatever the logging interval.

Tokens per iteration: a ``tokens`` field when one is logged, else ``global batch size x seq_length``
(padded tokens, as Bridge's ``time/tokens``), seq_length from the dump or the caller.  Non-pad tokens
are logged by neither, so logs are judged on samples/s and TFLOP/s; loss tokens are kept when a
``loss tokens`` (or ``useful tokens``) field is logged.

Warm-up: ``warmup`` iterations are excluded (an interval is kept when it starts at or after them);
default the first logged interval and the first 10% of iterations, relaxed for short runs (a
10-iteration quick run): first to the first interval only, then to nothing, with a note.  With fewer
than ``verdict.MIN_INTERVAL_STEPS`` (5) intervals on a side there is no bootstrap interval (the gaps carry
``lo = hi = None``) and the verdict is UNDECIDED.

Same workload or no verdict: ``compare_logs`` raises ``WorkloadMismatch`` when the logs show a
different global batch size, seq_length, GPU count or model (architecture fields of the dump,
``_target_`` class, parameter count), unless ``allow_mismatch`` (then the differences are listed in
the report).  Advice that assumes images (step-time variance from visual work) is given only when a
log carries image information (vision settings in the dump, a VL model class, image fields in the
iteration lines); ``report["workload"]["images"]`` says which evidence was found.

Logs are untrusted input (``parse_log``): only a regular file is read (a FIFO, ``/dev/zero`` or a directory
is refused without blocking), at most ``MAX_LOG_BYTES``, streamed line by line (a line longer than
``MAX_LINE_BYTES`` is skipped and counted); numbers are checked where they are used: an elapsed time that
is not a finite positive number, a negative or non-finite throughput, batch size, sample or token count,
or consumed samples that go backwards make ``LogError`` naming the file and line, never a figure.

``report_content(report)`` gives what a log-comparison report shows (lines, tables, plottable
metrics): logs carry no environment, stage times or visual-token counts, so a report of logs must
not show those sections.
"""

from __future__ import annotations

import math
import re
from typing import Iterator

import numpy as np

from vlmdata import storage
from vlmdata.audit.metrics import summarize
from vlmdata.audit.verdict import (
    DEFAULT_THRESHOLD,
    GAP_METRICS,
    METRIC_LABELS,
    MIN_INTERVAL_STEPS,
    decide,
    verdict_line,
)
from vlmdata.errors import VlmdataError

ITER_RE = re.compile(r"iteration\s+(\d{1,15})\s*/\s*(\d{1,15})\s*\|(.*)$")
_NUM = r"(\d{1,15}(?:\.\d*)?|\.\d+)"
STEP_TIME_RE = re.compile(
    r"Step Time\s*:\s*" + _NUM + r"\s*s\s+GPU utilization:\s*" + _NUM + r"\s*(?:MODEL_)?TFLOP/s/GPU"
)
MAX_LOG_BYTES = 4 << 30  # a log is streamed; larger files are refused (cut the part of the run to compare)
MAX_LINE_BYTES = 1 << 20  # longer lines are skipped (counted in the notes)
ARG_RE = re.compile(r"^\s*([A-Za-z_][\w]*)\s+\.{2,}\s+(\S.*?)\s*$")  # Megatron-LM: "  seq_length .... 4096"
YAML_RE = re.compile(r"^(\s*)([A-Za-z_][\w]*)\s*:(?:\s+(.*?))?\s*$")  # Bridge: "  seq_length: 4096"
WORLD_RE = re.compile(r"using world size:\s*(\d+)")
PARAMS_RE = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)")
TOKEN_KEYS = ("tokens per iteration", "tokens per batch", "tokens", "num tokens", "total tokens")
USEFUL_KEYS = ("useful tokens", "loss tokens", "num loss tokens")
TFLOPS_KEY = "throughput per gpu (tflop/s/gpu)"
MS_KEY = "elapsed time per iteration (ms)"

# dump fields that identify the model (compared between the logs when both print them)
MODEL_KEYS = (
    "_target_",
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "num_experts",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "padded_vocab_size",
    "vocab_size",
)
# dump fields that exist only in vision-language runs (Megatron-LM's examples/multimodal, Bridge's
# Qwen-VL providers and VLM dataset configs); Megatron-LM's generic vision args (img_h, patch_dim) are
# printed by every run and do not count
IMAGE_KEYS = (
    "vision_model_type",
    "language_model_type",
    "use_tiling",
    "max_num_tiles",
    "use_thumbnail",
    "image_tag_type",
    "freeze_vit",
    "vision_projection_type",
    "vision_config",
    "freeze_vision_model",
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "spatial_merge_size",
    "min_pixels",
    "max_pixels",
    "hf_processor_path",
    "max_num_images",
    "max_visual_tokens",
    "num_images",
    "image_size",
)
VL_CLASS_RE = re.compile(r"(?i)(\bvl\b|[a-z0-9_]vl(?:moe)?(?:model)?provider|_vl\b|\d_?vl|vision|llava|multimodal|vlm)")


class LogError(VlmdataError):
    """A log cannot be used (missing file, no iteration lines): one line for the user."""


class WorkloadMismatch(LogError):
    """The two logs are of different workloads (global batch size, seq_length, GPUs or model).

    ``differences``: ``[(what, mock value, real value)]``."""

    def __init__(self, differences: list[tuple[str, str, str]]):
        self.differences = differences
        super().__init__(
            "the logs are of different workloads: "
            + "; ".join(f"{what} {a} (mock) vs {b} (real)" for what, a, b in differences)
            + "; compare two runs of one workload (allow_mismatch=True compares them anyway)"
        )


def _num(text: str) -> float | None:
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError, OverflowError):
        return None


def _lines(path: str) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of a log file; text None for a line over ``MAX_LINE_BYTES`` (skipped). LogError when
    the path is not a regular file of at most ``MAX_LOG_BYTES``."""
    shown = storage.redact_text(path)
    try:
        with storage.open_regular(path, MAX_LOG_BYTES, "the log") as (f, size):
            left = size  # a log still being written is read up to the size it had when opened
            no = 0
            while left > 0:
                raw = f.readline(min(MAX_LINE_BYTES + 1, left))
                if not raw:
                    break
                left -= len(raw)
                no += 1
                if len(raw) > MAX_LINE_BYTES:
                    while raw and not raw.endswith(b"\n") and left > 0:  # the rest of the long line
                        raw = f.readline(min(1 << 20, left))
                        left -= len(raw)
                    yield no, None
                    continue
                yield no, raw.decode("utf-8", errors="replace").rstrip("\r\n")
    except OSError as e:
        raise LogError(f"cannot read log {shown!r}: {e.strerror or e}") from None


def _check_fields(fields: dict, path: str, lineno: int) -> None:
    """LogError for a number a figure would be made of that is not a measurement (module docstring)."""
    where = f"{storage.redact_text(path)!r} line {lineno}"
    ms = fields.get(MS_KEY)
    if ms is not None and not (math.isfinite(ms) and ms > 0):
        raise LogError(f"{where}: elapsed time per iteration {ms} ms is not a positive time; not a measurement")
    for key in (TFLOPS_KEY, "global batch size", "consumed samples", *TOKEN_KEYS, *USEFUL_KEYS):
        v = fields.get(key)
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise LogError(f"{where}: {key} is {v}, not a count or rate; not a measurement")
    gbs = fields.get("global batch size")
    if gbs is not None and gbs <= 0:
        raise LogError(f"{where}: global batch size {gbs} is not positive")


def parse_line(line: str) -> dict | None:
    """Fields of one iteration line (keys lower-cased), or None.

    Args:
        line: one line of a log.

    Returns:
        ``{"iteration", "train_iters", field: number, ...}`` or None when it is not an iteration line.
    """
    m = ITER_RE.search(line)
    if not m:
        return None
    fields: dict[str, float | None] = {"iteration": int(m.group(1)), "train_iters": int(m.group(2))}
    for part in m.group(3).split("|"):
        key, sep, value = part.partition(":")
        if sep and _num(value) is not None:
            fields[key.strip().lower()] = _num(value)
    return fields


def parse_log(path: str) -> dict:
    """Everything the comparison uses from one log file.

    Args:
        path: the log file.

    Returns:
        ``{"path", "lines": [iteration fields...], "step_times": [{"s", "tflops"}...], "config":
        {dotted path: text}, "seq_length", "world_size", "parameters": {(tp, pp): n}, "restarts",
        "format"}``; a restart (iteration numbers going back) keeps the last run.

    Raises:
        LogError: unreadable file, or neither iteration nor Step Time lines.
    """
    lines: list[dict] = []
    steps: list[dict] = []
    config: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # YAML sections open above the current line: (indent, key)
    world, params, restarts, pending, long_lines = None, {}, 0, None, 0
    for lineno, raw in _lines(path):
        if raw is None:
            long_lines += 1
            continue
        m = STEP_TIME_RE.search(raw)
        if m:
            pending = {"s": float(m.group(1)), "tflops": float(m.group(2)), "line": lineno}
            if not pending["s"] > 0:
                raise LogError(f"{storage.redact_text(path)!r} line {lineno}: Step Time {m.group(1)} s is not positive")
            steps.append(pending)
            continue
        fields = parse_line(raw)
        if fields is not None:
            _check_fields(fields, path, lineno)
            if TFLOPS_KEY not in fields and pending is not None:
                fields[TFLOPS_KEY] = pending["tflops"]
            if MS_KEY not in fields and pending is not None:
                fields[MS_KEY] = pending["s"] * 1e3
            pending = None
            if lines and fields["iteration"] <= lines[-1]["iteration"]:
                lines, steps, restarts = [], [], restarts + 1
            now, before = fields.get("consumed samples"), lines[-1].get("consumed samples") if lines else None
            if now is not None and before is not None and now < before:
                raise LogError(
                    f"{storage.redact_text(path)!r} line {lineno}: consumed samples {now:.0f} after {before:.0f} "
                    "(going backwards within one run); not a measurement"
                )
            lines.append(fields)
            continue
        if "|" in raw:
            continue  # memory / timer lines: "[Rank 0] (after 10 iterations) memory (MB) | allocated: ..."
        w = WORLD_RE.search(raw)
        if w and world is None:
            world = int(w.group(1))
        p = PARAMS_RE.search(raw)
        if p:
            params.setdefault((int(p.group(1)), int(p.group(2))), int(p.group(3)))
            continue
        a = ARG_RE.match(raw)
        if a:
            config.setdefault(a.group(1), a.group(2))
            continue
        y = YAML_RE.match(raw)
        if y:
            indent, key, value = len(y.group(1)), y.group(2), (y.group(3) or "").strip()
            while stack and stack[-1][0] >= indent:
                stack.pop()
            dotted = ".".join([k for _, k in stack] + [key])
            if value:
                config.setdefault(dotted, value.strip("'\""))
            else:
                stack.append((indent, key))
        elif raw.strip() and not raw.lstrip().startswith("-"):
            stack = []  # any other text closes the YAML block
    if not lines and not steps:
        raise LogError(
            f"{storage.redact_text(path)!r} has no Megatron iteration lines ('iteration N/M | ... elapsed time per "
            "iteration') and no Megatron Bridge 'Step Time : ...s GPU utilization' lines"
        )
    seq = _config_int(config, "seq_length")
    return {
        "path": path,
        "lines": lines,
        "step_times": steps,
        "config": config,
        "seq_length": seq,
        "world_size": world,
        "parameters": params,
        "restarts": restarts,
        "format": "iteration lines" if lines else "Bridge Step Time lines",
        "long_lines": long_lines,
    }


def config_value(config: dict[str, str], key: str, section: str | None = None) -> str | None:
    """The dump's value of ``key``: the shallowest dotted path ending in it (first printed on a tie),
    so ``model.hidden_size`` wins over ``model.vision_config.hidden_size``; with ``section``, paths
    under that section are preferred when there are any (``model._target_`` over ``_target_``)."""
    paths = [p for p in config if p == key or p.endswith("." + key)]
    if section and any(p.startswith(section + ".") for p in paths):
        paths = [p for p in paths if p.startswith(section + ".")]
    best = None
    for path in paths:
        depth = path.count(".")
        if best is None or depth < best[0]:
            best = (depth, config[path])
    return None if best is None else best[1]


def _config_int(config: dict[str, str], key: str) -> int | None:
    v = config_value(config, key)
    try:
        f = float(v) if v is not None else None
    except (ValueError, OverflowError):
        return None
    return int(f) if f is not None and math.isfinite(f) and 0 < f < 2**62 else None


def _first(fields: dict, keys) -> float | None:
    return next((fields[k] for k in keys if fields.get(k) is not None), None)


def _intervals(parsed: dict) -> tuple[list[dict], str | None]:
    """Iteration lines, or intervals made from Step Time lines: ``[{"iteration", fields...}]``."""
    if parsed["lines"]:
        return parsed["lines"], None
    interval = _config_int(parsed["config"], "log_interval") or 1
    gbs = _config_int(parsed["config"], "global_batch_size")
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
            if _config_int(parsed["config"], "log_interval")
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
    interval = _config_int(parsed.get("config", {}), "log_interval")
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
        "global_batch_size": int(gbs[-1]) if gbs else _config_int(parsed.get("config", {}), "global_batch_size"),
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


def _summary(records: list[dict]) -> dict:
    s = summarize(records)
    s["interval_ms"] = s["step_ms"]
    s["step_ms"] = iteration_summary(records)
    iters = sum(r["iterations"] for r in records)
    samples = [r["samples"] for r in records]
    s["samples_per_step"] = None if None in samples else sum(samples) / iters
    s["iterations"] = iters
    return s


def image_evidence(parsed: dict) -> str | None:
    """Why the log is a vision-language run (the first image setting, VL class or image field found), or None."""
    cfg = parsed.get("config", {})
    for path, value in cfg.items():
        leaf = path.rsplit(".", 1)[-1]
        if leaf in IMAGE_KEYS:
            return f"{path}: {value}" if value else path
        if leaf in (
            "_target_",
            "model_name",
            "hf_model_id",
            "hf_model_name_or_path",
            "pretrained_model_name_or_path",
            "hf_processor_path",
            "tokenizer_model",
        ) and VL_CLASS_RE.search(value or ""):
            return f"{path}: {value}"
    for f in parsed.get("lines", []):
        for k in f:
            if isinstance(k, str) and ("image" in k or "visual" in k):
                return f"iteration field '{k}'"
    return None


def _model(parsed: dict) -> dict[str, str]:
    cfg = parsed.get("config", {})
    out = {}
    for k in MODEL_KEYS:
        v = config_value(cfg, k, section="model")
        if v is not None:
            out[k] = v
    for (tp, pp), n in parsed.get("parameters", {}).items():
        out[f"parameters on rank ({tp}, {pp})"] = str(n)
    return out


def _mismatches(parsed: dict[str, dict], infos: dict[str, dict]) -> list[tuple[str, str, str]]:
    m, r = parsed["mock"], parsed["real"]
    diffs = []
    checks = [
        ("global batch size", infos["mock"]["global_batch_size"], infos["real"]["global_batch_size"]),
        ("seq_length", infos["mock"]["seq_length"], infos["real"]["seq_length"]),
        ("GPUs (world size)", m.get("world_size"), r.get("world_size")),
    ]
    for what, a, b in checks:
        if a is not None and b is not None and a != b:
            diffs.append((what, str(a), str(b)))
    ma, mb = _model(m), _model(r)
    for k in ma:
        if k in mb and ma[k] != mb[k]:
            diffs.append((f"model {k}", ma[k], mb[k]))
    return diffs


LOG_MORE = "log more intervals (run longer, or log more often: log_interval)"


def _adjust_verdict(v: dict, real: dict, images: bool) -> dict:
    """Log-specific corrections of ``decide``'s verdict: no VLM advice without image information, and the
    verdict line rebuilt. (Too few logged intervals for an interval is ``decide``'s undecided.)"""
    if not images:
        for k in v["knobs"]:
            if k["knob"] == "variance":
                cv = real["step_ms"]["cv"]
                k["message"] = (
                    f"iteration time varies between logged intervals (cv {cv:.0%}): look for stalls "
                    "(checkpointing, evaluation, data loading, preemption) or measure more iterations"
                )
    v["line"] = verdict_line(v)
    return v


def compare_logs(
    mock: str,
    real: str,
    *,
    warmup: int | None = None,
    seq_length: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    allow_mismatch: bool = False,
) -> dict:
    """The audit verdict for two training logs (``mock`` run vs ``real`` run of the same workload).

    Args:
        mock: log of the mock-data run.
        real: log of the real-data run.
        warmup: iterations to exclude from both (default: see the module docstring).
        seq_length: tokens per sample when the logs do not print seq_length.
        threshold: MISLEADING when mock/real exceeds 1 + threshold.
        allow_mismatch: compare even when the workloads differ (the differences are listed).

    Returns:
        The report dict: ``{"schema", "kind": "logs", "config", "workload", "sources": {"mock", "real"},
        "verdict", "mismatches", "notes"}`` (``report_content`` says how to show it).

    Raises:
        LogError: a log cannot be read or has nothing to measure after warm-up.
        WorkloadMismatch: the logs differ in workload and ``allow_mismatch`` is False.
    """
    runs, sources, parsed, infos = {}, {}, {}, {}
    for name, path in (("mock", mock), ("real", real)):
        parsed[name] = parse_log(path)
        recs, info = to_records(parsed[name], warmup, seq_length)
        if not recs:
            end = max((f["iteration"] for f in parsed[name]["lines"]), default="?")
            raise LogError(
                f"{path!r}: no logged interval after {info['warmup_iterations']} warm-up iterations "
                f"(the log ends at iteration {end}); lower the warm-up"
            )
        infos[name] = info
        runs[name] = {"records": recs, "world_size": 1}  # TFLOP/s are already per GPU in the logs
        sources[name] = {"summary": _summary(recs), "log": info, "records": recs}
    diffs = _mismatches(parsed, infos)
    if diffs and not allow_mismatch:
        raise WorkloadMismatch(diffs)
    evidence = {k: image_evidence(p) for k, p in parsed.items()}
    images = any(evidence.values())
    summaries = {k: v["summary"] for k, v in sources.items()}
    verdict = _adjust_verdict(decide(runs, summaries, threshold=threshold, more=LOG_MORE), summaries["real"], images)
    notes = [f"{k}: {n}" for k in ("mock", "real") for n in infos[k]["notes"]]
    if diffs:
        notes.append("compared although the workloads differ: " + "; ".join(f"{w} {a} vs {b}" for w, a, b in diffs))
    model = {k: _model(p) for k, p in parsed.items()}
    workload = {
        "global_batch_size": infos["real"]["global_batch_size"],
        "seq_length": infos["real"]["seq_length"],
        "world_size": parsed["real"].get("world_size"),
        "model": model["real"] or model["mock"],
        "images": {"present": images, "evidence": evidence},
    }
    return {
        "schema": "vlmdata.audit/1",
        "kind": "logs",
        "config": {
            "mock": mock,
            "real": real,
            "warmup": warmup,
            "seq_length": seq_length,
            "threshold": threshold,
            "allow_mismatch": allow_mismatch,
        },
        "workload": workload,
        "sources": sources,
        "verdict": verdict,
        "mismatches": [{"what": w, "mock": a, "real": b} for w, a, b in diffs],
        "notes": notes,
    }


# ----------------------------------------------------------------------------- what a report of logs shows


def _f(v, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _ci(ci: dict | None) -> str:
    if ci is None:
        return "-"
    return f"{ci['ratio']:.3f}" + (f" [{ci['lo']:.3f}, {ci['hi']:.3f}]" if ci.get("lo") is not None else "")


def _model_text(model: dict) -> str:
    if not model:
        return "not printed in the logs (not checked)"
    return ", ".join(f"{k} {v}" for k, v in model.items())


def report_content(report: dict) -> dict:
    """What a report of a log comparison shows, for the terminal, report.md and report.html.

    Args:
        report: ``compare_logs``' result.

    Returns:
        ``{"lines": [(label, text)], "tables": [(title, head, rows)], "plot_metrics": [metric]}``: every
        line and table non-empty; ``plot_metrics`` the rates (of ``GAP_METRICS``) both logs measured, the
        only plot a log comparison has (no environment, stage split or visual tokens: logs carry none).
    """
    w, srcs, v = report["workload"], report["sources"], report.get("verdict") or {}
    img = w["images"]
    found = [f"{k}: {e}" for k, e in img["evidence"].items() if e]
    known = [
        f"{label} {w[k]}"
        for label, k in (
            ("global batch size", "global_batch_size"),
            ("seq_length", "seq_length"),
            ("GPUs", "world_size"),
        )
        if w.get(k) is not None
    ]
    lines = [
        (
            "Workload",
            (", ".join(known) or "global batch size and seq_length not in the logs")
            + f"; model: {_model_text(w['model'])}",
        ),
        (
            "Images",
            ("yes (" + "; ".join(found) + ")")
            if img["present"]
            else "no image information in the logs: a text-only run as far as the logs tell (no VLM-specific advice)",
        ),
    ]
    for name in ("mock", "real"):
        i = srcs[name]["log"]
        lines.append(
            (
                f"{name} log",
                f"{i['path']} ({i['format']}): kept {i['kept_intervals']} of {i['logged_lines']} "
                f"logged intervals, iterations {i['first_kept']}-{i['last_kept']} ({i['iterations']}), "
                f"warm-up {i['warmup_iterations']}"
                + (f"; {i['restarts']} restart(s), last run kept" if i["restarts"] else "")
                + (
                    f"; {i['skipped_iterations']} skipped, {i['nan_iterations']} NaN iterations"
                    if i["skipped_iterations"] or i["nan_iterations"]
                    else ""
                ),
            )
        )
    for n in report.get("notes") or []:
        lines.append(("Note", n))
    gaps = v.get("gaps", {})
    head = ["source", "ms/iteration", "p10-p90", "samples/s", "tokens/s", "TFLOP/s/GPU", "vs real"]
    rows = []
    for name in ("mock", "real"):
        s = srcs[name]["summary"]
        st = s["step_ms"]
        g = gaps.get(name, {}).get("samples_per_s") or gaps.get(name, {}).get("tflops")
        rows.append(
            [
                name,
                f"{st['median']:.1f}",
                f"{st['p10']:.0f}-{st['p90']:.0f}",
                _f(s["rates"]["samples_per_s"]),
                _f(s["rates"]["tokens_per_s"]),
                _f(s["rates"]["tflops"]),
                "1" if name == "real" else ("-" if not g else f"{g['ratio']:.2f}x"),
            ]
        )
    tables = [("Per iteration, after warm-up (median of logged intervals)", head, rows)]
    metrics = [m for m in GAP_METRICS if all(srcs[n]["summary"]["rates"].get(m) for n in ("mock", "real"))]
    if gaps:
        tables.append(
            (
                "mock/real gaps (95% CI)",
                ["source / real", *[METRIC_LABELS[m] for m in metrics]],
                [[src, *[_ci(g.get(m)) for m in metrics]] for src, g in gaps.items()],
            )
        )
    return {"lines": lines, "tables": tables, "plot_metrics": metrics}
