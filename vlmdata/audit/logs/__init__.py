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

from vlmdata.audit.logs.compare import VL_CLASS_RE, WorkloadMismatch, compare_logs, image_evidence
from vlmdata.audit.logs.content import report_content
from vlmdata.audit.logs.parse import (
    MAX_LINE_BYTES,
    MAX_LOG_BYTES,
    LogError,
    config_value,
    parse_line,
    parse_log,
)
from vlmdata.audit.logs.records import iteration_summary, to_records

__all__ = [
    "LogError",
    "WorkloadMismatch",
    "compare_logs",
    "config_value",
    "image_evidence",
    "iteration_summary",
    "parse_line",
    "parse_log",
    "report_content",
    "to_records",
    "MAX_LOG_BYTES",
    "MAX_LINE_BYTES",
    "VL_CLASS_RE",
]
