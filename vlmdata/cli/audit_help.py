"""The help texts of ``vlmdata audit`` and ``vlmdata audit compare`` (description, exit codes, every flag's
help): presentation only, every default quoted read from the library (``AuditConfig``, ``DEVICE_DEFAULTS``)."""

from __future__ import annotations

from vlmdata.audit.analysis.verdict import DEFAULT_THRESHOLD
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.defaults import DEVICE_DEFAULTS

CPU, GPU, A = DEVICE_DEFAULTS["cpu"], DEVICE_DEFAULTS["cuda"], AuditConfig  # the defaults the help quotes
EXIT_HELP = """exit codes:
  0  OK: every mock source is within --threshold of real (each interval below the limit), or no verdict
  3  MISLEADING: a mock source overstates real throughput (samples/s, TFLOP/s or non-pad tokens/s)
     by more than --threshold (its interval above the limit); with --sweep also: every choice a mock
     allows costs more than --threshold on real data, or a mock cannot measure a knob that moves real
     throughput; use it to gate a CI job or a report
  4  UNDECIDED: no mock is shown to mislead, but a mock's interval spans the limit (or too few steps
     were measured for an interval): measure longer (--max-steps, --budget-s); a gate must not pass it
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
HELP = {  # the audit's flags (dest -> help); every default quoted comes from the library
    "real": "real dataset: a vlmdata shard folder, a glob or a .tar (default: the embedded sample data)",
    "profile": "sample the synthetic source from this profile.json (not paired) instead of twinning the real samples",
    "sources": f"comma-separated sources (default {','.join(A.sources)}; also: {{other}}); real is required",
    "preset": f"reference model size (default {CPU['preset']} on CPU, {GPU['preset']} on CUDA)",
    "model_config": "take the model's shape from a Hugging Face Qwen3-VL / Qwen3-VL-MoE / Qwen2.5-VL config.json (or the checkpoint folder holding it); random weights, nothing downloaded",
    "bridge_config": "take the run's settings from a Megatron Bridge ConfigContainer YAML (micro and global batch, seq_length, TP/PP/EP/CP, freezing, recompute, packing); flags override it",
    "slice_layers": "measure K decoder layers (at the true width, experts/EP per layer) and compose the step (default: the whole model if it fits the GPU, else its DeepStack layers + 2 plain ones)",
    "global_batch_size": f"samples per optimizer step over all data-parallel ranks (default {CPU['micro_batches']} micro-batches per step on CPU, {GPU['micro_batches']} on CUDA)",
    "seq_policy": "padding: bridge (default: Bridge's rule for --tp/--pp/--ep: seq_length when PP>1 or EP>1, else a multiple of 128 then of lcm(TP,16)), pad128, max (seq_length), pack (in-batch packing)",
    "recompute": "activation recompute of the run (default none)",
    "manual_gc": "Python's garbage collector as Bridge's train.manual_gc: off during the timed steps, a collection between them (default: on, as Bridge's recipes); --no-manual-gc leaves the automatic collector running inside the steps",
    "manual_gc_interval": "Bridge's train.manual_gc_interval: steps between Bridge's collections, for the amortised cost the report states (default 100, the recipes'; 0: none)",
    "compile": f"run the reference model's blocks through torch.compile (inductor): none, vision (the vision tower's blocks), decoder (the decoder layers) or all, as Transformer Engine's fused kernels in Bridge; compiled during the warm-up (default {CPU['compile']} on CPU, {GPU['compile']} on CUDA)",
    "attention": f"reference model attention: varlen (packed variable-length flash kernels) or sdpa (transformers' per-image path); default {A.attention}",
    "benchmark_config": "the benchmark's own Bridge config YAML (e.g. a pretrain-mock recipe's), when it is not run as the training run: mocks are measured under it, real under --bridge-config, and the gap is attributed factor by factor",
    "benchmark_set": "a benchmark setting that differs from the run's (wins over --benchmark-config); repeatable. Keys: micro_batch_size, global_batch_size, seq_length, seq_policy, tp, pp, ep, cp, etp, dp, freeze_language_model, freeze_vision_model, freeze_vision_projection, recompute, force_balance, vp, cuda_graphs",
    "expert_imbalance": f"natural routing's busiest expert-parallel rank over the mean, for the composed layout (default {A.expert_imbalance}; forced balance: 1)",
    "repeat_margin": f"run-to-run spread a mock's interval is widened by before the verdict (default {A.repeat_margin:g})",
    "link_gbps": f"per-GPU all-to-all bandwidth in GB/s for the modelled expert-parallel term (default {A.link_gbps:g})",
    "seq_length": f"the run's seq_length (default {CPU['seq_length']} CPU / {GPU['seq_length']} CUDA)",
    "micro_batch_size": f"samples per micro-batch and rank (default {CPU['micro_batch_size']})",
    "steps": "measure exactly this many global steps per source (sets --min-steps and --max-steps; the sources still alternate in rounds of --block steps)",
    "min_steps": "steps per source before stopping may be considered (default: one epoch of the real data, at most --max-steps)",
    "max_steps": f"global steps per source at most (default {CPU['max_steps']} CPU / {GPU['max_steps']} CUDA)",
    "budget_s": f"the whole command's wall time: the model build, census and warm-up count, and a round is measured only when it can end before the budget does (at least one round; the plan says what runs before measuring and how long it is expected to take) (default {CPU['budget_s']:.0f} CPU / {GPU['budget_s']:.0f} CUDA)",
    "block": f"consecutive global steps of one source per round (default {CPU['block']} / {GPU['block']})",
    "precision": f"stop when every gap's 95%% interval is within this fraction of its ratio and decides the verdict (default {A.precision})",
    "warmup": f"extra untimed training steps per source after its loader starts (default {CPU['warmup']} CPU / {GPU['warmup']} CUDA; every shape is warmed anyway)",
    "num_workers": "loader DataLoader workers per source and rank (default 0 on CPU; on CUDA the rank's CPUs minus 2, split over the sources, 1-4)",
    "loader_arg": "extra make_loader keyword (int/float/bool/str), repeatable",
    "threshold": f"MISLEADING when mock/real exceeds 1 + this (default {A.threshold}; '10%%' works)",
    "device": f"cpu, cuda or cuda:N (default {A.device})",
    "logits": "lm_head over all tokens (Bridge; default on CUDA) or loss tokens only (default on CPU)",
    "step": "user workload: a callable taking a batch and running one training step",
    "seed": f"seed of the model, loaders, synthetic data and bootstrap (default {A.seed})",
    "out": "write report.json, report.md and report.html (and the synthetic twin) here",
    "sweep": "run every configuration of a grid on every source and report which tuning decisions each mock gets wrong; repeatable (the grid is the product). Keys: micro_batch_size, freeze_vision (0/1), recompute (none/selective/full), parallel (ddp/fsdp, under torchrun); any key for --step (passed as keyword arguments)",
    "gpus": "the run's GPU count (Bridge's world size): DP = GPUs / (TP x PP x CP), as Bridge derives it; a saved Bridge config does not record it (default: --dp, else the config's comm_overlap.data_parallel_size, else assumed: the smallest DP the layout allows, said in the notes)",
    "plan": "print the plan and stop, in seconds and without building a model: every setting and where it came from (both sides with a benchmark), the arms to measure, the notes, the model and the measured slice with parameter counts and estimated peak memory against this device, the expected steps and times, what --budget-s bounds and the stop rule (exit 2 when it would not fit)",
    "memory_limit_gb": "with --sweep: configurations whose measured peak memory exceeds this do not fit: GB or a card (h100 80, h200 141, b200 192); the report holds every configuration against all three cards",
}
COMPARE_HELP = {
    "warmup": "iterations to exclude (default: the first logged interval and the first 10%%, relaxed for short runs)",
    "seq_length": "tokens per sample when a log does not print seq_length (the log's value wins)",
    "threshold": f"MISLEADING when mock/real exceeds 1 + this (default {DEFAULT_THRESHOLD}; '10%%' works)",
    "allow_mismatch": "compare logs whose global batch size, seq_length, GPU count or model differ (default: refuse with exit 2)",
}
