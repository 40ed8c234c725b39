"""vlmdata audit [compare --mock LOG --real LOG]: the arguments, the ``AuditConfig`` they make (only what was
given: the library fills in every default), one library call (``audit.session.run_session``, or
``audit.logs.compare_logs``), the report printed (``cli.report_view``)."""

from __future__ import annotations

import argparse

from vlmdata.audit.config import LOGITS, AuditConfig
from vlmdata.audit.decisions import label
from vlmdata.audit.defaults import DEVICE_DEFAULTS
from vlmdata.audit.guard import check_report_dir
from vlmdata.audit.inputs import ALL_SOURCES, SOURCES
from vlmdata.audit.logs import compare_logs
from vlmdata.audit.model_config import ATTENTION, COMPILE_PARTS, PRESETS
from vlmdata.audit.report import write_report
from vlmdata.audit.run_spec import PARALLEL_FIELDS, RECOMPUTE, SEQ_POLICIES
from vlmdata.audit.verdict import DEFAULT_THRESHOLD
from vlmdata.cli import args as cli_args
from vlmdata.cli.args import fraction, key_value, non_negative_int, positive_int, positive_seconds, sweep_item
from vlmdata.cli.console import EXIT_OK, UserError, err, progress
from vlmdata.cli.report_view import exit_code, show_report

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
GIVEN = (  # AuditConfig fields whose flag carries the value as it is (None: not given)
    *("real", "profile", "device", "seed", "step", "preset", "model_config", "bridge_config", "slice_layers"),
    *("attention", "compile", "logits", "seq_length", "micro_batch_size", "global_batch_size", *PARALLEL_FIELDS),
    *("freeze_language_model", "freeze_vision_model", "freeze_vision_projection", "recompute", "link_gbps"),
    *("manual_gc", "manual_gc_interval", "benchmark_config", "expert_imbalance", "repeat_margin"),
    *("num_workers", "warmup", "budget_s", "precision", "threshold"),
)


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
    "budget_s": f"stop measuring after this many seconds once --min-steps are done, at a round's end (default {CPU['budget_s']:.0f} CPU / {GPU['budget_s']:.0f} CUDA)",
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
    "memory_limit_gb": "with --sweep: configurations whose measured peak memory exceeds this do not fit: GB or a card (h100 80, h200 141, b200 192); the report holds every configuration against all three cards",
}
COMPARE_HELP = {
    "warmup": "iterations to exclude (default: the first logged interval and the first 10%%, relaxed for short runs)",
    "seq_length": "tokens per sample when a log does not print seq_length (the log's value wins)",
    "threshold": f"MISLEADING when mock/real exceeds 1 + this (default {DEFAULT_THRESHOLD}; '10%%' works)",
    "allow_mismatch": "compare logs whose global batch size, seq_length, GPU count or model differ (default: refuse with exit 2)",
}


def _run_arguments(p) -> None:
    """The model and the user's run."""
    other = ", ".join(s for s in ALL_SOURCES if s not in SOURCES)  # the registry as it is now
    for name in ("real", "profile", "sources"):
        p.add_argument(f"--{name}", help=HELP[name].replace("{other}", other))
    p.add_argument("--preset", choices=tuple(PRESETS), help=HELP["preset"])
    p.add_argument("--model-config", metavar="CONFIG_JSON", help=HELP["model_config"])
    p.add_argument("--bridge-config", metavar="YAML", help=HELP["bridge_config"])
    p.add_argument("--slice-layers", type=positive_int, metavar="K", help=HELP["slice_layers"])
    p.add_argument("--global-batch-size", type=positive_int, help=HELP["global_batch_size"])
    p.add_argument("--seq-policy", choices=SEQ_POLICIES, help=HELP["seq_policy"])
    for name, what in zip(PARALLEL_FIELDS, ("tensor", "pipeline", "expert", "context", "expert tensor", "data")):
        extra = {"dp": ", or the smallest the others allow", "etp": ", or the tensor-parallel size"}.get(name, "")
        p.add_argument(
            f"--{name}", type=positive_int, help=f"the run's {what}-parallel size (describes the run; default 1{extra})"
        )
    for flag in ("--freeze-language-model", "--freeze-vision-model", "--freeze-vision-projection"):
        p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help="as Bridge's model field")
    p.add_argument("--recompute", choices=RECOMPUTE, help=HELP["recompute"])
    p.add_argument("--manual-gc", action=argparse.BooleanOptionalAction, default=None, help=HELP["manual_gc"])
    p.add_argument("--manual-gc-interval", type=non_negative_int, metavar="N", help=HELP["manual_gc_interval"])
    p.add_argument("--attention", choices=ATTENTION, help=HELP["attention"])
    p.add_argument("--compile", choices=COMPILE_PARTS, help=HELP["compile"])
    p.add_argument("--link-gbps", type=float, help=HELP["link_gbps"])
    p.add_argument("--benchmark-config", metavar="YAML", help=HELP["benchmark_config"])
    kv = {"action": "append", "default": [], "type": key_value, "metavar": "KEY=VALUE"}
    p.add_argument("--benchmark-set", dest="benchmark_set", help=HELP["benchmark_set"], **kv)
    p.add_argument("--expert-imbalance", type=float, metavar="B", help=HELP["expert_imbalance"])
    p.add_argument("--repeat-margin", type=fraction, help=HELP["repeat_margin"])
    p.add_argument("--seq-length", type=positive_int, help=HELP["seq_length"])
    p.add_argument("--micro-batch-size", type=positive_int, help=HELP["micro_batch_size"])
    p.add_argument("--pad-to-max-length", action="store_true", help="the same as --seq-policy max")


def _measure_arguments(p) -> None:
    """How it is measured, on which device, and where the report goes."""
    for name in ("steps", "min_steps", "max_steps", "block"):
        p.add_argument(f"--{name.replace('_', '-')}", type=positive_int, help=HELP[name])
    p.add_argument("--budget-s", type=positive_seconds, help=HELP["budget_s"])
    p.add_argument("--precision", type=fraction, help=HELP["precision"])
    p.add_argument("--warmup", type=non_negative_int, help=HELP["warmup"])
    p.add_argument("--num-workers", type=non_negative_int, help=HELP["num_workers"])
    p.add_argument(
        "--loader-arg", action="append", default=[], type=key_value, metavar="KEY=VALUE", help=HELP["loader_arg"]
    )
    p.add_argument("--threshold", type=fraction, help=HELP["threshold"])
    p.add_argument("--device", help=HELP["device"])
    p.add_argument("--logits", choices=LOGITS, help=HELP["logits"])
    p.add_argument("--step", metavar="MODULE:FUNCTION", help=HELP["step"])
    p.add_argument("--seed", type=int, help=HELP["seed"])
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's)")
    p.add_argument("-o", "--out", help=HELP["out"])
    p.add_argument("--json", action="store_true", help="print the report (without per-step records) as JSON")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2", type=sweep_item, help=HELP["sweep"])
    p.add_argument("--memory-limit-gb", type=cli_args.memory_limit_gb, metavar="GB|CARD", help=HELP["memory_limit_gb"])


def _compare_arguments(c) -> None:
    c.add_argument("--mock", required=True, metavar="LOG", help="training log of the mock-data run")
    c.add_argument("--real", required=True, metavar="LOG", help="training log of the real-data run")
    c.add_argument("--warmup", type=non_negative_int, metavar="ITERATIONS", help=COMPARE_HELP["warmup"])
    c.add_argument("--seq-length", type=positive_int, help=COMPARE_HELP["seq_length"])
    c.add_argument("--threshold", type=fraction, default=DEFAULT_THRESHOLD, help=COMPARE_HELP["threshold"])
    c.add_argument("--allow-mismatch", action="store_true", help=COMPARE_HELP["allow_mismatch"])
    for side in ("mock", "real"):
        c.add_argument(f"--{side}-config", metavar="YAML", help=f"the {side} run's Bridge config (run_config.yaml)")
    c.add_argument("-o", "--out", help="write report.json, report.md and report.html into this folder")
    c.add_argument("--json", action="store_true", help="print the report (without per-interval records) as JSON")
    quiet = "accepted for symmetry: the table and the verdict are always printed"
    c.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=quiet)


def add_parser(sub):
    raw = argparse.RawDescriptionHelpFormatter
    summary = "measure the mock-vs-real training throughput gap; exit 3 if misleading"
    p = sub.add_parser("audit", help=summary, description=DESCRIPTION, epilog=EXIT_HELP, formatter_class=raw)
    _run_arguments(p)
    _measure_arguments(p)
    cs = p.add_subparsers(dest="audit_command", metavar="{compare}")
    summary = "verdict from two Megatron-LM / Bridge training logs"
    c = cs.add_parser(
        "compare", help=summary, epilog=COMPARE_EXIT_HELP, formatter_class=raw, description=COMPARE_DESCRIPTION
    )
    _compare_arguments(c)
    return p


def config_from(args) -> AuditConfig:
    """The ``AuditConfig`` of the command line: only what was given (the library fills in the defaults)."""
    given = {k: getattr(args, k) for k in GIVEN if getattr(args, k, None) is not None}
    if args.sources is not None:
        given["sources"] = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    if args.seq_policy is not None and args.pad_to_max_length and args.seq_policy != "max":
        raise UserError(f"--pad-to-max-length contradicts --seq-policy {args.seq_policy}")
    if args.seq_policy is not None or args.pad_to_max_length:
        given["seq_policy"] = "max" if args.pad_to_max_length else args.seq_policy
    min_steps, max_steps, block = args.min_steps, args.max_steps, args.block
    if args.steps is not None:
        min_steps = max_steps = args.steps  # the rounds stay interleaved: --block (default 1) is not touched
        if block is not None:
            block = min(block, args.steps)
    elif min_steps is not None and max_steps is not None and max_steps < min_steps:
        max_steps = min_steps
    steps = {"min_steps": min_steps, "max_steps": max_steps, "block": block}
    given.update({k: v for k, v in steps.items() if v is not None})
    if args.loader_arg:
        given["loader_options"] = dict(args.loader_arg)
    if args.benchmark_set:
        given["benchmark"] = dict(args.benchmark_set)
    return AuditConfig(**given)


def run(args) -> int:
    if getattr(args, "audit_command", None) == "compare":
        return run_compare(args)
    cfg = config_from(args)
    # the measuring stack (torch, the model, the loaders): imported when an audit runs, not by `audit --help`
    from vlmdata.audit.session import run_session

    shown = not (args.quiet or args.json)

    def bar(total):
        return progress("audit: " + ", ".join(cfg.sources), total, unit="steps", quiet=not shown)

    def announce(i: int, n: int, values: dict) -> None:
        if shown:
            err.print(f"configuration {i + 1}/{n}: {label(values)}", highlight=False)

    sweep = {"sweep": args.sweep, "memory_limit_gb": args.memory_limit_gb}
    s = run_session(cfg, out_dir=args.out, threads=args.threads, progress=bar, on_config=announce, **sweep)
    if not s.main:
        return EXIT_OK  # rank 0 carries the verdict; torchrun then reports its code (as 1)
    show_report(s.report, s.paths, as_json=args.json, quiet=args.quiet)
    return exit_code(s.report["verdict"])


def run_compare(args) -> int:
    if args.out:  # before reading: -o can be written and never replaces a log
        check_report_dir(args.out, [args.mock, args.real])
    kw = {"warmup": args.warmup, "seq_length": args.seq_length, "allow_mismatch": args.allow_mismatch}
    kw |= {"mock_config": args.mock_config, "real_config": args.real_config}
    report = compare_logs(args.mock, args.real, threshold=args.threshold, **kw)
    paths = write_report(report, args.out) if args.out else None
    show_report(report, paths, as_json=args.json)
    return exit_code(report["verdict"])
