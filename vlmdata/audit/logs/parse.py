"""Reading one Megatron-LM / Megatron Bridge training log: its iteration lines, Bridge's Step Time lines and the
configuration dump (the formats and the checks are the package docstring's, ``vlmdata.audit.logs``).

``parse_log(path)`` streams the file (``_lines``: a regular file of at most ``MAX_LOG_BYTES``, lines over
``MAX_LINE_BYTES`` skipped and counted) and hands each line to ``_LogParser``, which sorts it into a Step Time
line, an iteration line (``parse_line``, checked by ``_check_fields``), or a line of the dump (Megatron-LM's
``  name ..... value`` arguments, Bridge's YAML kept as dotted paths, the world size, the parameter counts).
``config_value`` / ``config_int`` read the dump.
"""

from __future__ import annotations

import math
import re
from typing import Iterator

from vlmdata import storage
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
MCORE_DEFAULT_RE = re.compile(r"\s+\(Mcore default: .*\)$")  # the default Bridge's summary quotes beside a value
WORLD_RE = re.compile(r"using world size:\s*(\d+)")
PARAMS_RE = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)")
TOKEN_KEYS = ("tokens per iteration", "tokens per batch", "tokens", "num tokens", "total tokens")
USEFUL_KEYS = ("useful tokens", "loss tokens", "num loss tokens")
TFLOPS_KEY = "throughput per gpu (tflop/s/gpu)"
MS_KEY = "elapsed time per iteration (ms)"


class LogError(VlmdataError):
    """A log cannot be used (missing file, no iteration lines): one line for the user."""


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


class _LogParser:
    """The state of one pass over a log: each line is a Step Time line, an iteration line or part of the dump."""

    def __init__(self, path: str):
        self.path, self.shown = path, storage.redact_text(path)
        self.lines: list[dict] = []
        self.steps: list[dict] = []
        self.config: dict[str, str] = {}
        self.stack: list[tuple[int, str]] = []  # YAML sections open above the current line: (indent, key)
        self.world: int | None = None
        self.params: dict[tuple[int, int], int] = {}
        self.restarts, self.long_lines = 0, 0
        self.pending: dict | None = None  # the Step Time line just before an iteration line

    def feed(self, lineno: int, raw: str | None) -> None:
        if raw is None:
            self.long_lines += 1
        elif not self.step_time(lineno, raw) and not self.iteration(lineno, raw) and "|" not in raw:
            self.dump(raw)  # "|" lines left: memory / timer lines ("[Rank 0] ... memory (MB) | allocated: ...")

    def step_time(self, lineno: int, raw: str) -> bool:
        m = STEP_TIME_RE.search(raw)
        if not m:
            return False
        self.pending = {"s": float(m.group(1)), "tflops": float(m.group(2)), "line": lineno}
        if not self.pending["s"] > 0:
            raise LogError(f"{self.shown!r} line {lineno}: Step Time {m.group(1)} s is not positive")
        self.steps.append(self.pending)
        return True

    def iteration(self, lineno: int, raw: str) -> bool:
        fields = parse_line(raw)
        if fields is None:
            return False
        _check_fields(fields, self.path, lineno)
        pending, lines = self.pending, self.lines
        if TFLOPS_KEY not in fields and pending is not None:
            fields[TFLOPS_KEY] = pending["tflops"]
        if MS_KEY not in fields and pending is not None:
            fields[MS_KEY] = pending["s"] * 1e3
        self.pending = None
        if lines and fields["iteration"] <= lines[-1]["iteration"]:  # a restart: keep the last run
            self.lines, self.steps, self.restarts = [], [], self.restarts + 1
            lines = self.lines
        now, before = fields.get("consumed samples"), lines[-1].get("consumed samples") if lines else None
        if now is not None and before is not None and now < before:
            raise LogError(
                f"{self.shown!r} line {lineno}: consumed samples {now:.0f} after {before:.0f} "
                "(going backwards within one run); not a measurement"
            )
        lines.append(fields)
        return True

    def dump(self, raw: str) -> None:
        """A line of the configuration dump (or other text, which closes an open YAML block)."""
        w = WORLD_RE.search(raw)
        if w and self.world is None:
            self.world = int(w.group(1))
        p = PARAMS_RE.search(raw)
        if p:
            self.params.setdefault((int(p.group(1)), int(p.group(2))), int(p.group(3)))
            return
        a = ARG_RE.match(raw)
        if a:
            self.config.setdefault(a.group(1), a.group(2))
            return
        y = YAML_RE.match(raw)
        if y:
            indent, key, value = len(y.group(1)), y.group(2), (y.group(3) or "").strip()
            value = MCORE_DEFAULT_RE.sub("", value)  # Bridge's summary: "num_layers: 48  (Mcore default: 0)"
            while self.stack and self.stack[-1][0] >= indent:
                self.stack.pop()
            dotted = ".".join([k for _, k in self.stack] + [key])
            if value:
                self.config.setdefault(dotted, value.strip("'\""))
            else:
                self.stack.append((indent, key))
        elif raw.strip() and not raw.lstrip().startswith("-"):
            self.stack = []  # any other text closes the YAML block

    def result(self) -> dict:
        if not self.lines and not self.steps:
            raise LogError(
                f"{self.shown!r} has no Megatron iteration lines ('iteration N/M | ... elapsed time per "
                "iteration') and no Megatron Bridge 'Step Time : ...s GPU utilization' lines"
            )
        return {
            "path": self.path,
            "lines": self.lines,
            "step_times": self.steps,
            "config": self.config,
            "seq_length": config_int(self.config, "seq_length"),
            "world_size": self.world,
            "parameters": self.params,
            "restarts": self.restarts,
            "format": "iteration lines" if self.lines else "Bridge Step Time lines",
            "long_lines": self.long_lines,
        }


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
    parser = _LogParser(path)
    for lineno, raw in _lines(path):
        parser.feed(lineno, raw)
    return parser.result()


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


def config_int(config: dict[str, str], key: str) -> int | None:
    v = config_value(config, key)
    try:
        f = float(v) if v is not None else None
    except (ValueError, OverflowError):
        return None
    return int(f) if f is not None and math.isfinite(f) and 0 < f < 2**62 else None
