"""vlmdata audit [compare --mock LOG --real LOG]: the arguments, the ``AuditConfig`` they make (only what was
given: the library fills in every default), one library call (``audit.session.run_session``, or
``audit.logs.compare_logs``), the report printed (``cli.report_view``)."""

from __future__ import annotations

import argparse

from vlmdata.audit.analysis.decisions import label
from vlmdata.audit.analysis.verdict import DEFAULT_THRESHOLD
from vlmdata.audit.logs import compare_logs
from vlmdata.audit.report import write_report
from vlmdata.audit.settings.config import LOGITS, AuditConfig
from vlmdata.audit.settings.guard import check_report_dir
from vlmdata.audit.settings.model_config import ATTENTION, COMPILE_PARTS, PRESETS
from vlmdata.audit.settings.run_spec import PARALLEL_FIELDS, RECOMPUTE, SEQ_POLICIES
from vlmdata.audit.sources.registry import ALL_SOURCES, SOURCES
from vlmdata.cli import args as cli_args
from vlmdata.cli.args import fraction, key_value, non_negative_int, positive_int, positive_seconds, sweep_item
from vlmdata.cli.audit_help import COMPARE_DESCRIPTION, COMPARE_EXIT_HELP, COMPARE_HELP, DESCRIPTION, EXIT_HELP, HELP
from vlmdata.cli.console import EXIT_OK, EXIT_USAGE, UserError, err, phases, print_json, progress
from vlmdata.cli.report_view import exit_code, show_plan, show_report

GIVEN = (  # AuditConfig fields whose flag carries the value as it is (None: not given)
    *("real", "profile", "device", "seed", "step", "preset", "model_config", "bridge_config", "slice_layers"),
    *("attention", "compile", "logits", "seq_length", "micro_batch_size", "global_batch_size", *PARALLEL_FIELDS),
    *("freeze_language_model", "freeze_vision_model", "freeze_vision_projection", "recompute", "link_gbps", "gpus"),
    *("manual_gc", "manual_gc_interval", "benchmark_config", "expert_imbalance", "repeat_margin"),
    *("num_workers", "warmup", "budget_s", "precision", "threshold"),
)


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
    p.add_argument("--gpus", type=positive_int, metavar="N", help=HELP["gpus"])
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
    p.add_argument("--plan", action="store_true", help=HELP["plan"])
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
    shown = not (args.quiet or args.json)
    phase = phases("audit", quiet=not shown)
    with phase("start-up", "loading torch, transformers and the audit"):
        # the measuring stack (torch, the model, the loaders): imported when an audit runs, not by `audit --help`
        from vlmdata.audit.phases.session import plan_only, run_session

    if args.plan:
        plan = plan_only(cfg, threads=args.threads)
        print_json(plan) if args.json else show_plan(plan)
        return EXIT_OK if (plan.get("measured") or {}).get("fits", True) else EXIT_USAGE

    def bar(total):
        return progress("audit: " + ", ".join(cfg.sources), total, unit="steps", quiet=not shown)

    def announce(i: int, n: int, values: dict) -> None:
        if shown:
            err.print(f"configuration {i + 1}/{n}: {label(values)}", highlight=False)

    sweep = {"sweep": args.sweep, "memory_limit_gb": args.memory_limit_gb}
    shows = {"progress": bar, "on_config": announce, "phase": phase, "on_plan": show_plan if shown else None}
    s = run_session(cfg, out_dir=args.out, threads=args.threads, **shows, **sweep)
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
