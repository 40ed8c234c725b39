"""vlmdata audit [compare --mock LOG --real LOG]"""

from __future__ import annotations

import argparse
import time

from rich import box
from rich.markup import escape
from rich.table import Table

from vlmdata.audit.guard import check_device, check_out_dir, check_paths, check_report_dir
from vlmdata.audit.inputs import AuditError, check_loader_options
from vlmdata.audit.logs import LogError, WorkloadMismatch, compare_logs, report_content
from vlmdata.cli.args import cli_flags, non_negative_int, positive_int
from vlmdata.cli.console import (
    EXIT_MISLEADING,
    EXIT_OK,
    EXIT_UNDECIDED,
    UserError,
    err,
    out,
    print_json,
    progress,
    table,
)
from vlmdata.errors import OptionsError
from vlmdata.loaders.options import LoaderOptions
from vlmdata.storage import redact_text

EXIT_HELP = """exit codes:
  0  OK: every mock source is within --threshold of real (each interval below the limit), or no verdict
  3  MISLEADING: a mock source overstates real throughput (samples/s, TFLOP/s or non-pad tokens/s)
     by more than --threshold (its interval above the limit); use it to gate a CI job or a report
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

# library parameter names in error messages -> this command's flags
PARAM_FLAGS = {
    "seq_length": "--seq-length",
    "micro_batch_size": "--micro-batch-size",
    "num_workers": "--num-workers",
    "min_steps": "--min-steps",
    "max_steps": "--max-steps",
    "budget_s": "--budget-s",
    "block": "--block",
    "precision": "--precision",
    "warmup": "--warmup",
    "sources": "--sources",
    "step": "--step",
    "profile": "--profile",
    "global_batch_size": "--global-batch-size",
    "seq_policy": "--seq-policy",
    "slice_layers": "--slice-layers",
    "link_gbps": "--link-gbps",
    "tp": "--tp",
    "pp": "--pp",
    "ep": "--ep",
    "cp": "--cp",
    "etp": "--etp",
    "dp": "--dp",
}


def _fraction(text: str) -> float:
    try:
        v = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (0.1 or 10%)") from None
    if not 0 <= v < 10:
        raise argparse.ArgumentTypeError(f"threshold {v} out of range")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def _sweep_item(text: str) -> str:
    if redact_text(text) != text:
        raise argparse.ArgumentTypeError("a value carries a credential or a signed URL; not accepted")
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not [v for v in values.split(",") if v.strip()]:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=V1,V2,... (e.g. micro_batch_size=1,2,4)")
    return text


def add_parser(sub):
    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.audit.defaults import DEVICE_DEFAULTS
    from vlmdata.audit.inputs import ALL_SOURCES, SOURCES
    from vlmdata.audit.model_config import PRESETS
    from vlmdata.audit.run_spec import RECOMPUTE, SEQ_POLICIES

    cpu, gpu = DEVICE_DEFAULTS["cpu"], DEVICE_DEFAULTS["cuda"]

    p = sub.add_parser(
        "audit",
        help="measure the mock-vs-real training throughput gap; exit 3 if misleading",
        description=(
            "Run one training workload (the built-in Qwen3-VL-MoE reference model with random weights, or --step)\n"
            "on mock, synthetic and real inputs through the same loader, explain the gap stage by stage and say\n"
            "whether the mock figure may be reported. Sources (--sources): real; synthetic = each real sample's\n"
            "synthetic twin (same sizes, bytes and token counts; paired with real step by step); imagefree = the real\n"
            "samples' own conversations without their images (paired); imagefree-fixed = fixed 16+256-token text;\n"
            "bridge-noise = Megatron Bridge's mock (one 256x256 noise image). Every shape is warmed before timing;\n"
            "sources are measured interleaved in rotating rounds until the intervals decide the verdict\n"
            "(or --max-steps / --budget-s). With no arguments: the embedded sample data on CPU, tiny preset.\n"
            "A measured step is one global step of Megatron Bridge's train_step: GBS/(MBS*DP) micro-batches of\n"
            "forward and backward, then one optimizer step; padded by Bridge's rule for the run's --tp/--pp/--ep\n"
            "(--seq-policy); --bridge-config and --model-config describe the user's run and model.\n"
            "GPU: --device cuda (preset h200, seq 4096, micro-batch 2, GBS 32, loader workers by CPU count);\n"
            "several GPUs: torchrun --nproc-per-node N -m vlmdata audit --device cuda ...\n"
            "`vlmdata audit compare --mock LOG --real LOG` gives the same verdict from two Megatron-LM /\n"
            "Megatron Bridge training logs."
        ),
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--real", help="real dataset: a vlmdata shard folder, a glob or a .tar (default: the embedded sample data)"
    )
    p.add_argument(
        "--profile",
        help="sample the synthetic source from this profile.json (not paired) instead of twinning the real samples",
    )
    p.add_argument(
        "--sources",
        default=",".join(SOURCES),
        help=f"comma-separated sources (default {','.join(SOURCES)}; also: "
        f"{', '.join(s for s in ALL_SOURCES if s not in SOURCES)}); real is required",
    )
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        help=f"reference model size (default {cpu['preset']} on CPU, {gpu['preset']} on CUDA)",
    )
    p.add_argument(
        "--model-config",
        metavar="CONFIG_JSON",
        help="take the model's shape from a Hugging Face Qwen3-VL / Qwen3-VL-MoE / Qwen2.5-VL config.json (or the "
        "checkpoint folder holding it); random weights, nothing downloaded",
    )
    p.add_argument(
        "--bridge-config",
        metavar="YAML",
        help="take the run's settings from a Megatron Bridge ConfigContainer YAML (micro and global batch, "
        "seq_length, TP/PP/EP/CP, freezing, recompute, packing); flags override it",
    )
    p.add_argument(
        "--slice-layers",
        type=positive_int,
        metavar="K",
        help="measure K decoder layers (at the true width, experts/EP per layer) and compose the step "
        "(default: the whole model if it fits the GPU, else 4)",
    )
    p.add_argument(
        "--global-batch-size",
        type=positive_int,
        help=f"samples per optimizer step over all data-parallel ranks (default {cpu['micro_batches']} micro-batches "
        f"per step on CPU, {gpu['micro_batches']} on CUDA)",
    )
    p.add_argument(
        "--seq-policy",
        choices=SEQ_POLICIES,
        help="padding: bridge (default: Bridge's rule for --tp/--pp/--ep: seq_length when PP>1 or EP>1, else a "
        "multiple of 128 then of lcm(TP,16)), pad128, max (seq_length), pack (in-batch packing)",
    )
    for flag, what in (
        ("--tp", "tensor"),
        ("--pp", "pipeline"),
        ("--ep", "expert"),
        ("--cp", "context"),
        ("--etp", "expert tensor"),
        ("--dp", "data"),
    ):
        p.add_argument(
            flag,
            type=positive_int,
            help=f"the run's {what}-parallel size (describes the run; default 1"
            + (", or the smallest the others allow" if flag == "--dp" else "")
            + (", or the tensor-parallel size" if flag == "--etp" else "")
            + ")",
        )
    for flag in ("--freeze-language-model", "--freeze-vision-model", "--freeze-vision-projection"):
        p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help="as Bridge's model field")
    p.add_argument("--recompute", choices=RECOMPUTE, help="activation recompute of the run (default none)")
    p.add_argument(
        "--attention",
        choices=("varlen", "sdpa"),
        default="varlen",
        help="reference model attention: varlen (packed variable-length flash kernels, default) or sdpa "
        "(transformers' per-image path)",
    )
    p.add_argument(
        "--link-gbps",
        type=float,
        default=200.0,
        help="per-GPU all-to-all bandwidth in GB/s for the modelled expert-parallel term (default 200)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        help="measure exactly this many global steps per source (sets --min-steps and --max-steps)",
    )
    p.add_argument(
        "--min-steps",
        type=positive_int,
        help="steps per source before stopping may be considered "
        "(default: one epoch of the real data, at most --max-steps)",
    )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        help=f"global steps per source at most (default {cpu['max_steps']} CPU / {gpu['max_steps']} CUDA)",
    )
    p.add_argument(
        "--budget-s",
        type=_seconds,
        help="stop measuring after this many seconds once --min-steps are "
        f"done, at a round's end (default {cpu['budget_s']:.0f} CPU / {gpu['budget_s']:.0f} CUDA)",
    )
    p.add_argument(
        "--block",
        type=positive_int,
        help=f"consecutive global steps of one source per round (default {cpu['block']} / {gpu['block']})",
    )
    p.add_argument(
        "--precision",
        type=_fraction,
        default=0.05,
        help="stop when every gap's 95%% interval is within this fraction of its ratio and decides the "
        "verdict (default 0.05)",
    )
    p.add_argument(
        "--warmup",
        type=non_negative_int,
        help="extra untimed training steps per source after its loader starts (default 0: every shape "
        "is warmed anyway, and the measured steps then start at the epoch's start)",
    )
    p.add_argument(
        "--seq-length",
        type=positive_int,
        help=f"the run's seq_length (default {cpu['seq_length']} CPU / {gpu['seq_length']} CUDA)",
    )
    p.add_argument(
        "--micro-batch-size",
        type=positive_int,
        help=f"samples per micro-batch and rank (default {cpu['micro_batch_size']})",
    )
    p.add_argument("--pad-to-max-length", action="store_true", help="the same as --seq-policy max")
    p.add_argument(
        "--num-workers",
        type=non_negative_int,
        help="loader DataLoader workers per source and rank (default 0 on CPU; on CUDA the rank's CPUs "
        "minus 2, split over the sources, 1-4)",
    )
    p.add_argument(
        "--loader-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra make_loader keyword (int/float/bool/str), repeatable",
    )
    p.add_argument(
        "--threshold",
        type=_fraction,
        default=0.10,
        help="MISLEADING when mock/real exceeds 1 + this (default 0.10; '10%%' works)",
    )
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    p.add_argument(
        "--logits",
        choices=("all", "loss"),
        help="lm_head over all tokens (Bridge; default on CUDA) or loss tokens only (default on CPU)",
    )
    p.add_argument(
        "--step",
        metavar="MODULE:FUNCTION",
        help="user workload: a callable taking a batch and running one training step",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the model, loaders, synthetic data and bootstrap")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's)")
    p.add_argument("-o", "--out", help="write report.json, report.md and report.html (and the synthetic twin) here")
    p.add_argument("--json", action="store_true", help="print the report (without per-step records) as JSON")
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        type=_sweep_item,
        help="run every configuration of a grid on every source and report which tuning decisions each "
        "mock gets wrong; repeatable (the grid is the product). Keys: micro_batch_size, "
        "freeze_vision (0/1), recompute (none/selective/full), parallel (ddp/fsdp, under torchrun); "
        "any key for --step (passed as keyword arguments)",
    )
    p.add_argument(
        "--memory-limit-gb",
        type=float,
        metavar="GB",
        help="with --sweep: configurations whose measured peak memory exceeds this do not fit (a smaller card)",
    )
    cs = p.add_subparsers(dest="audit_command", metavar="{compare}")
    c = cs.add_parser(
        "compare",
        help="verdict from two Megatron-LM / Bridge training logs",
        epilog=COMPARE_EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Read two training logs of one workload, a mock-data run and a real-data run: Megatron-LM or Megatron\n"
            "Bridge iteration lines ('iteration N/M | ... elapsed time per iteration (ms) ...'), or Bridge's own\n"
            "'Step Time : 4.65s GPU utilization: 123.4MODEL_TFLOP/s/GPU' lines, plus the configuration dump at the\n"
            "top of the log. Drop warm-up iterations and give the audit's verdict on TFLOP/s/GPU and samples/s (and\n"
            "tokens/s when seq_length is known), per iteration. Refuses (exit 2) logs whose global batch size,\n"
            "seq_length, GPU count or model differ, unless --allow-mismatch. Short runs (a 10-iteration quick run)\n"
            "work, but with fewer than five logged intervals after warm-up there is no confidence interval: UNDECIDED."
        ),
    )
    c.add_argument("--mock", required=True, metavar="LOG", help="training log of the mock-data run")
    c.add_argument("--real", required=True, metavar="LOG", help="training log of the real-data run")
    c.add_argument(
        "--warmup",
        type=non_negative_int,
        metavar="ITERATIONS",
        help="iterations to exclude (default: the first logged interval and the first 10%%, relaxed for short runs)",
    )
    c.add_argument(
        "--seq-length",
        type=positive_int,
        help="tokens per sample when a log does not print seq_length (the log's value wins)",
    )
    c.add_argument(
        "--threshold",
        type=_fraction,
        default=0.10,
        help="MISLEADING when mock/real exceeds 1 + this (default 0.10; '10%%' works)",
    )
    c.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare logs whose global batch size, seq_length, GPU count or model differ "
        "(default: refuse with exit 2)",
    )
    c.add_argument("-o", "--out", help="write report.json, report.md and report.html into this folder")
    c.add_argument("--json", action="store_true", help="print the report (without per-interval records) as JSON")
    c.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="accepted for symmetry: the table and the verdict are always printed",
    )
    return p


def _loader_options(args) -> dict:
    kw = {}
    for item in args.loader_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--loader-arg needs KEY=VALUE, got {item!r}")
        low = value.lower()
        if low in ("true", "false", "none"):
            kw[key] = {"true": True, "false": False, "none": None}[low]
        else:
            for cast in (int, float, str):
                try:
                    kw[key] = cast(value)
                    break
                except ValueError:
                    continue
    try:  # refused here, before anything runs: an unknown key or a bad value names the --loader-arg
        LoaderOptions().replace(**kw)
        check_loader_options(kw)
    except (OptionsError, AuditError) as e:
        raise UserError(f"--loader-arg: {str(e).replace('`', '')}") from None
    return kw


def config_from(args):
    """The ``AuditConfig`` of the command line: only what was given (the library fills in the defaults)."""
    import torch

    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.audit.config import AuditConfig

    check_device(args.device)  # a bad --device is one line, before anything is built
    check_paths(real=args.real, profile=args.profile)
    cuda = torch.device(args.device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA device is available")
    min_steps, max_steps, block = args.min_steps, args.max_steps, args.block
    if args.steps is not None:
        min_steps = max_steps = args.steps
        block = min(block or args.steps, args.steps)
    elif min_steps is not None and max_steps is not None and max_steps < min_steps:
        max_steps = min_steps
    if args.seq_policy is not None and args.pad_to_max_length and args.seq_policy != "max":
        raise UserError(f"--pad-to-max-length contradicts --seq-policy {args.seq_policy}")
    given = {
        k: getattr(args, k)
        for k in (
            "preset",
            "model_config",
            "bridge_config",
            "slice_layers",
            "seq_length",
            "micro_batch_size",
            "global_batch_size",
            "tp",
            "pp",
            "ep",
            "cp",
            "etp",
            "dp",
            "freeze_language_model",
            "freeze_vision_model",
            "freeze_vision_projection",
            "recompute",
            "budget_s",
            "logits",
        )
        if getattr(args, k, None) is not None
    }
    return AuditConfig(
        real=args.real,
        profile=args.profile,
        sources=tuple(s.strip() for s in args.sources.split(",") if s.strip()),
        device=args.device,
        seed=args.seed,
        step=args.step,
        attention=args.attention,
        seq_policy="max" if args.pad_to_max_length else args.seq_policy,
        link_gbps=args.link_gbps,
        num_workers=args.num_workers,
        loader_options=_loader_options(args),
        warmup=args.warmup,
        min_steps=min_steps,
        max_steps=max_steps,
        block=block,
        precision=args.precision,
        threshold=args.threshold,
        **given,
    )


def run(args) -> int:
    if getattr(args, "audit_command", None) == "compare":
        return run_compare(args)
    import torch

    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.audit.distributed import gather, init_distributed, shutdown
    from vlmdata.audit.report import build_report
    from vlmdata.audit.runner import run_audit
    from vlmdata.audit.user_step import reset_step_limit, set_step_limit

    cfg = config_from(args)
    if args.out:  # before measuring: -o can be written and replaces only an earlier audit's files
        check_out_dir(args.out, real=cfg.resolved_real(), profile=cfg.profile)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    info = init_distributed(cfg.device)
    step_limit = set_step_limit(
        cfg.measure_settings()["budget_s"], hard=True
    )  # no single --step call outlasts --budget-s
    main = info is None or info.is_main
    show_progress = main and not (args.quiet or args.json)
    try:

        def bar(total):
            return progress("audit: " + ", ".join(cfg.sources), total, unit="steps", quiet=not show_progress)

        build = lambda res: build_report(gather(res, info), threshold=args.threshold, seed=cfg.seed)  # noqa: E731
        try:
            if args.sweep:
                report = _sweep(cfg, args, info, build, bar, show_progress)
            else:
                report = build(run_audit(cfg, out_dir=args.out, dist=info, progress=bar))
        except AuditError as e:  # the one message, with this command's flags (vlmdata.cli.main prints it)
            raise UserError(cli_flags(str(e), PARAM_FLAGS)) from None
        report["wall_s"] = time.perf_counter() - t0
        if main:
            _emit(report, args)
        if info is not None:  # no rank exits before rank 0 has written (torchrun kills the others)
            import torch.distributed as dist

            dist.barrier()
    finally:
        shutdown(info)
        reset_step_limit(step_limit)
    if not main:
        return EXIT_OK  # rank 0 carries the verdict; torchrun then reports its code (as 1)
    return _exit_code(report["verdict"])


def _colour(v: dict) -> str:
    return {"MISLEADING": "bold red", "UNDECIDED": "bold yellow"}.get(v.get("status") or "", "bold green")


def _exit_code(v: dict | None) -> int:
    """0 OK (or no verdict), 3 MISLEADING, 4 UNDECIDED (EXIT_HELP)."""
    status = (v or {}).get("status")
    return EXIT_MISLEADING if status == "MISLEADING" else EXIT_UNDECIDED if status == "UNDECIDED" else EXIT_OK


def _sweep(cfg, args, info, build, bar, show_progress) -> dict:
    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.audit.decisions import label
    from vlmdata.audit.sweep import parse_sweep, run_sweep

    sweep = parse_sweep(args.sweep, user_step=bool(cfg.step), distributed=info is not None)

    def announce(i: int, n: int, values: dict) -> None:
        if show_progress:
            err.print(f"configuration {i + 1}/{n}: {label(values)}", highlight=False)

    return run_sweep(
        cfg,
        sweep,
        build=build,
        out_dir=args.out,
        dist=info,
        memory_limit_gb=args.memory_limit_gb,
        progress=bar,
        on_config=announce,
    )


def run_compare(args) -> int:
    if args.out:  # before reading: -o can be written and never replaces a log
        check_report_dir(args.out, [args.mock, args.real])
    try:
        report = compare_logs(
            args.mock,
            args.real,
            warmup=args.warmup,
            seq_length=args.seq_length,
            threshold=args.threshold,
            allow_mismatch=args.allow_mismatch,
        )
    except WorkloadMismatch as e:
        raise UserError(
            "the logs are of different workloads: "
            + "; ".join(f"{what} {a} (mock) vs {b} (real)" for what, a, b in e.differences)
            + "; compare two runs of one workload, or pass --allow-mismatch"
        ) from None
    except LogError as e:
        raise UserError(escape(str(e))) from None
    if args.out:
        from vlmdata.audit.report import write_report  # imports torch (audit.distributed): not at --help time

        paths = write_report(report, args.out)
    else:
        paths = None
    if args.json:
        print_json(
            {
                **report,
                "sources": {
                    k: {kk: vv for kk, vv in v.items() if kk != "records"} for k, v in report["sources"].items()
                },
            }
        )
    else:  # the table and the verdict, also with -q
        content = report_content(report)
        for label, text in content["lines"]:
            if label != "Note":
                out.print(f"[bold]{label}:[/] {escape(text)}", soft_wrap=True)
        for title, head, rows in content["tables"]:
            out.print(table(title, head, rows))
        v = report["verdict"]
        out.print(f"[{_colour(v)}]{escape(cli_flags(v['line'], PARAM_FLAGS))}[/]", soft_wrap=True)
        for k in v["knobs"][:3]:
            out.print(f"  - {k['message']}", soft_wrap=True, markup=False)
        for label, text in content["lines"]:
            if label == "Note":
                err.print(f"[yellow]note:[/] {escape(text)}", soft_wrap=True)
        if paths:
            out.print(f"report: {', '.join(paths.values())}", soft_wrap=True, markup=False)
    return _exit_code(report["verdict"])


def _emit(report: dict, args) -> None:
    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.audit.report import write_report

    if args.out:
        paths = write_report(report, args.out)
    if args.json:
        print_json(
            {
                **report,
                "sources": {
                    k: {kk: vv for kk, vv in v.items() if kk != "records"} for k, v in report["sources"].items()
                },
            }
            if "sources" in report
            else report
        )
        return
    if not getattr(args, "quiet", False):
        if report.get("kind") == "sweep":
            # imported when the command runs: `vlmdata --help` and this command's --help stay light
            from vlmdata.audit.report import decision_rows, sweep_rows

            for title, (head, rows) in (("configurations", sweep_rows(report)), ("decisions", decision_rows(report))):
                out.print(table(title, head, rows))
        else:
            out.print(_table(report))
    v = report["verdict"]
    if v:
        out.print(f"[{_colour(v)}]{escape(cli_flags(v['line'], PARAM_FLAGS))}[/]", soft_wrap=True)
        for k in (v.get("knobs") or [])[:3]:
            out.print(f"  - {k['message']}", soft_wrap=True, highlight=False)
    for name, st in (report.get("stragglers") or {}).items():
        if st["flagged"]:
            err.print(
                f"[yellow]straggler ranks on {name}:[/] {st['flagged']} "
                f"(visual-token imbalance {st['visual_imbalance']:.2f}x)"
            )
    if args.out:
        out.print(
            f"report: {', '.join(paths.values())}" + (f"  ({report['wall_s']:.0f} s)" if "wall_s" in report else ""),
            soft_wrap=True,
        )


def _table(report: dict) -> Table:
    v = report.get("verdict") or {}
    gaps = v.get("gaps", {})
    cfg = report.get("config", {})
    title = (
        "vlmdata audit compare"
        if report.get("kind") == "logs"
        else f"vlmdata audit: {report['workload']['name']} on {cfg.get('device')}, "
        f"micro-batch {cfg.get('micro_batch_size')} x {cfg.get('micro_batches')} per optimizer step (GBS "
        f"{cfg.get('global_batch_size')}), seq {cfg.get('seq_length')}, "
        f"{((report.get('run') or {}).get('run') or {}).get('padding_rule', '')}"
        + (f" x {report['world_size']} ranks" if report.get("world_size", 1) > 1 else "")
    )
    t = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_edge=False,
        caption="vs real: samples/s ratio; wait: data-wait share of step time; pad: padding share of tokens; "
        "non-pad tok: text + visual tokens",
    )
    cols = ("source", "steps", "step ms", "samples/s", "non-pad tok/s", "TFLOP/s", "vs real", "wait", "pad")
    for c in cols:
        t.add_column(c, justify="left" if c == "source" else "right", no_wrap=True)
    f = lambda x, fmt="{:.3g}": "-" if x is None else fmt.format(x)  # noqa: E731
    for name, src in report["sources"].items():
        s = src["summary"]
        if s is None:  # ran out of memory
            t.add_row(name, "0", "out of memory", *["-"] * 6)
            continue
        g = gaps.get(name, {}).get("samples_per_s")
        rel = "1" if name == "real" else ("-" if not g else f"{g['ratio']:.2f}x")
        t.add_row(
            name,
            str(s["steps"]),
            f"{s['step_ms']['median']:.0f}",
            f(s["rates"]["samples_per_s"]),
            f(s["rates"].get("nonpad_tokens_per_s")),
            f(s["rates"]["tflops"]),
            rel,
            f(s.get("data_wait_fraction"), "{:.1%}"),
            f(s["shape"].get("padding_fraction"), "{:.0%}"),
        )
    return t
