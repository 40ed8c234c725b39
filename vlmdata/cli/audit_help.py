"""The help texts of ``vlmdata audit`` and ``vlmdata audit compare`` (description, exit codes, every flag's
help): presentation only, every default quoted read from the library (``AuditConfig``, ``DEVICE_DEFAULTS``). A
setting's flag and help text live in ``vlmdata.audit.settings.fields`` (rendered here into ``HELP``, keyed by the
flag's dest); ``COMMAND_HELP`` holds the command's own flags, which set no setting."""

from __future__ import annotations

from vlmdata.audit.analysis.verdict import DEFAULT_THRESHOLD
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.defaults import DEVICE_DEFAULTS
from vlmdata.audit.settings.fields import SETTINGS, help_text

CPU, GPU, A = DEVICE_DEFAULTS["cpu"], DEVICE_DEFAULTS["cuda"], AuditConfig  # the defaults the help quotes
EXIT_HELP = """exit codes:
  0  OK: every mock source is within --threshold of real (each interval below the limit), or no verdict
  3  MISLEADING: a mock source overstates real throughput (samples/s, TFLOP/s or non-pad tokens/s)
     by more than --threshold (its interval above the limit); with --sweep also: every choice a mock
     allows costs more than --threshold on real data, or a mock cannot measure a knob that moves real
     throughput; use it to gate a CI job or a report
  4  UNDECIDED: no mock is shown to mislead, but a mock's interval spans the limit (or too few steps
     were measured for an interval): measure longer (--max-steps, --budget-s); a gate must not pass it
  1  DOES NOT FIT: real data and every mock ran out of memory under the run's configuration (real out of
     memory while a mock ran is MISLEADING: the mock's figure is of a configuration real data cannot run)
  2  usage or input error (bad option, missing shards/log, unknown source)
Under torchrun rank 0 exits with the code (the other ranks with 0) and torchrun reports any non-zero
worker code as its own failure (exit 1), so read the verdict from report.json or --json there."""
COMPARE_EXIT_HELP = """exit codes:
  0  OK: the mock run is within --threshold of the real run (its interval below the limit)
  3  MISLEADING: the mock run overstates real throughput (TFLOP/s/GPU, samples/s) by more than --threshold
  4  UNDECIDED: the interval spans the limit, or too few logged intervals for one: log more iterations
  2  usage or input error: unreadable log, nothing to measure after warm-up, or the logs are of different
     workloads (global batch size, seq_length, GPUs, model) and --allow-mismatch was not given"""
DESCRIPTION = f"""\
Run one training workload (the built-in Qwen3-VL-MoE reference model with random weights, or --step)
on mock, synthetic and real inputs through the same loader, explain the gap stage by stage and say
whether the mock figure may be reported. Sources (--sources): real; synthetic = each real sample's
synthetic twin (same sizes, bytes and token counts; paired with real step by step); imagefree = the real
samples' own conversations without their images (paired); imagefree-fixed = fixed 16+256-token text;
bridge-noise = Megatron Bridge's mock (one 256x256 noise image). Every shape is warmed before timing;
sources are measured interleaved in rotating rounds until the intervals decide the verdict
(or --max-steps / --budget-s). With no arguments: the embedded sample data on CPU, {CPU["preset"]} preset.
A measured step is one global step of Megatron Bridge's train_step: GBS/(MBS*DP) micro-batches of
forward and backward, then one optimizer step; padded by Bridge's rule for the run's --tp/--pp/--ep
(--seq-policy); --bridge-config and --model-config describe the user's run and model.
GPU: --device cuda (preset {GPU["preset"]}, seq {GPU["seq_length"]}, micro-batch {GPU["micro_batch_size"]}, \
GBS {GPU["micro_batch_size"] * GPU["micro_batches"]}, loader workers by CPU count);
several GPUs: torchrun --nproc-per-node N -m vlmdata audit --device cuda ...
`vlmdata audit compare --mock LOG --real LOG` gives the same verdict from two Megatron-LM /
Megatron Bridge training logs."""
COMPARE_DESCRIPTION = """\
Read two training logs of one workload, a mock-data run and a real-data run: Megatron-LM or Megatron
Bridge iteration lines ('iteration N/M | ... elapsed time per iteration (ms) ...'), or Bridge's own
'Step Time : 4.65s GPU utilization: 123.4MODEL_TFLOP/s/GPU' lines, plus the configuration dump at the
top of the log. Drop warm-up iterations and give the audit's verdict on TFLOP/s/GPU and samples/s (and
tokens/s when seq_length is known), per iteration. Refuses (exit 2) logs whose global batch size,
seq_length, GPU count or model differ, unless --allow-mismatch. Short runs (a 10-iteration quick run)
work, but with fewer than five logged intervals after warm-up there is no confidence interval: UNDECIDED."""
COMMAND_HELP = {  # the command's own flags (dest -> help); the settings' flags are the table's (settings.fields)
    "steps": "measure exactly this many global steps per source (sets --min-steps and --max-steps; the sources still alternate in rounds of --block steps)",
    "out": "write report.json, report.md and report.html (and the synthetic twin) here",
    "sweep": "run every configuration of a grid on every source and report which tuning decisions each mock gets wrong; repeatable (the grid is the product). Keys: micro_batch_size, freeze_vision (0/1), recompute (none/selective/full), parallel (ddp/fsdp, under torchrun); any key for --step (passed as keyword arguments)",
    "plan": "print the plan and stop, in seconds and without building a model: every setting and where it came from (both sides with a benchmark), the arms to measure, the notes, the model and the measured slice with parameter counts and estimated peak memory against this device, the expected steps and times, what --budget-s bounds and the stop rule (exit 2 when it would not fit)",
    "memory_limit_gb": "with --sweep: configurations whose measured peak memory exceeds this do not fit: GB or a card (h100 80, h200 141, b200 192); the report holds every configuration against all three cards",
}
_QUOTED = {"cpu": CPU, "gpu": GPU, "a": A, "sources": ",".join(A.sources)}  # the defaults the table's texts quote
HELP = {  # every flag's help (dest -> help): the settings' from settings.fields, rendered; then the command's own
    **{s.dest: help_text(s, **_QUOTED) for s in SETTINGS if s.dest is not None},
    **COMMAND_HELP,
}
COMPARE_HELP = {
    "warmup": "iterations to exclude (default: the first logged interval and the first 10%%, relaxed for short runs)",
    "seq_length": "tokens per sample when a log does not print seq_length (the log's value wins)",
    "threshold": f"MISLEADING when mock/real exceeds 1 + this (default {DEFAULT_THRESHOLD}; '10%%' works)",
    "allow_mismatch": "compare logs whose global batch size, seq_length, GPU count or model differ (default: refuse with exit 2)",
}
