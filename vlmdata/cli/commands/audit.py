"""vlmdata audit [compare --mock LOG --real LOG]"""

from __future__ import annotations

import argparse
import time

from rich import box
from rich.markup import escape
from rich.table import Table

from vlmdata.audit.guard import check_device, check_out_dir, check_paths, check_report_dir
from vlmdata.audit.inputs import AuditError, check_loader_options, fit_seq_length
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

CPU_DEFAULTS = {
    "preset": "tiny",
    "warmup": 0,
    "seq_length": 2048,
    "micro_batch_size": 2,
    "min_steps": None,
    "max_steps": 60,
    "block": 3,
    "budget_s": 120.0,
}
GPU_DEFAULTS = {
    "preset": "h200",
    "warmup": 0,
    "seq_length": 4096,
    "micro_batch_size": 2,
    "min_steps": None,
    "max_steps": 180,
    "block": 5,
    "budget_s": 150.0,
}
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
    from vlmdata.audit.inputs import ALL_SOURCES, SOURCES

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
            "GPU: --device cuda (preset h200, seq 4096, micro-batch 2, loader workers by CPU count);\n"
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
        choices=("tiny", "small", "h200", "h200-large"),
        help="reference model size (default tiny on CPU, h200 on CUDA)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        help="measure exactly this many steps per source (sets --min-steps and --max-steps)",
    )
    p.add_argument(
        "--min-steps",
        type=positive_int,
        help="steps per source before stopping may be considered "
        "(default: one epoch of the real data, at most --max-steps)",
    )
    p.add_argument("--max-steps", type=positive_int, help="steps per source at most (default 60 CPU / 180 CUDA)")
    p.add_argument(
        "--budget-s",
        type=_seconds,
        help="stop measuring after this many seconds once --min-steps are "
        "done, at a round's end (default 120 CPU / 150 CUDA)",
    )
    p.add_argument("--block", type=positive_int, help="consecutive steps of one source per round (default 3 / 5)")
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
    p.add_argument("--seq-length", type=positive_int, help="loader seq_length (default 2048 CPU / 4096 CUDA)")
    p.add_argument("--micro-batch-size", type=positive_int, help="samples per step and rank (default 2)")
    p.add_argument(
        "--pad-to-max-length",
        action="store_true",
        help="pad every batch to --seq-length (Bridge's MoE/EP>1 Qwen3-VL step does this)",
    )
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
    if args.pad_to_max_length:
        kw["pad_to_max_length"] = True
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
    """The ``AuditConfig`` of the command line (device-dependent defaults filled in)."""
    import torch

    # imported when the command runs: `vlmdata --help` and this command's --help stay light
    from vlmdata.audit.runner import AuditConfig, default_real

    check_device(args.device)  # a bad --device is one line, before anything is built
    check_paths(real=args.real, profile=args.profile)
    cuda = torch.device(args.device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA device is available")
    d = GPU_DEFAULTS if cuda else CPU_DEFAULTS
    pick = lambda name: d[name] if getattr(args, name, None) is None else getattr(args, name)  # noqa: E731
    min_steps, max_steps = pick("min_steps"), pick("max_steps")
    if args.steps is not None:
        min_steps = max_steps = args.steps
    elif min_steps is not None and args.max_steps is None:
        max_steps = max(max_steps, min_steps)
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    block = pick("block")
    if args.steps is not None and args.block is None:
        block = min(block, args.steps)
    return AuditConfig(
        real=args.real,
        profile=args.profile,
        sources=sources,
        preset=pick("preset"),
        device=args.device,
        seed=args.seed,
        logits=args.logits,
        step=args.step,
        seq_length=args.seq_length or _fit_seq(args, d, default_real),
        micro_batch_size=pick("micro_batch_size"),
        num_workers=args.num_workers,
        loader_options=_loader_options(args),
        warmup=pick("warmup"),
        min_steps=min_steps,
        max_steps=max_steps,
        block=block,
        budget_s=pick("budget_s"),
        precision=args.precision,
        threshold=args.threshold,
    )


def _fit_seq(args, defaults: dict, default_real) -> int:
    """The device's default seq_length, raised to fit the real data's longest sample (noted on stderr)."""
    mbs = args.micro_batch_size or defaults["micro_batch_size"]
    real = args.real or default_real()
    seq = fit_seq_length(
        real, defaults["seq_length"], micro_batch_size=mbs, seed=args.seed, loader_options=_loader_options(args)
    )
    if seq != defaults["seq_length"] and not args.json:
        err.print(f"note: --seq-length {seq} (the default {defaults['seq_length']} is shorter than the longest sample)")
    return seq


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
    step_limit = set_step_limit(cfg.budget_s, hard=True)  # no single --step call outlasts --budget-s
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
        f"micro-batch {cfg.get('micro_batch_size')}, seq {cfg.get('seq_length')}"
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
