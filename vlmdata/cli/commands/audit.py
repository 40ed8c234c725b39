"""vlmdata audit [compare --mock LOG --real LOG]: the arguments, the ``AuditConfig`` they make (only what was
given: the library fills in every default; a setting's flag and help come from ``audit.settings.fields``), one library call (``audit.session.run_session``, or
``audit.logs.compare_logs``), the report printed (``cli.report_view``)."""

from __future__ import annotations

import argparse

from vlmdata.audit.analysis.decisions import label
from vlmdata.audit.analysis.verdict import DEFAULT_THRESHOLD
from vlmdata.audit.logs import compare_logs
from vlmdata.audit.report import write_report
from vlmdata.audit.settings.config import LOGITS, AuditConfig
from vlmdata.audit.settings.fields import FIELDS, SETTINGS
from vlmdata.audit.settings.guard import check_report_dir
from vlmdata.audit.settings.model_config import ATTENTION, COMPILE_PARTS, PRESETS
from vlmdata.audit.settings.run_spec import PARALLEL_FIELDS, RECOMPUTE, SEQ_POLICIES
from vlmdata.audit.sources.registry import ALL_SOURCES, SOURCES
from vlmdata.cli import args as cli_args
from vlmdata.cli.args import fraction, key_value, non_negative_int, positive_int, positive_seconds, sweep_item
from vlmdata.cli.audit_help import COMPARE_DESCRIPTION, COMPARE_EXIT_HELP, COMPARE_HELP, DESCRIPTION, EXIT_HELP, HELP
from vlmdata.cli.console import EXIT_OK, EXIT_USAGE, UserError, err, phases, print_json, progress
from vlmdata.cli.report_view import exit_code, show_plan, show_report

_SHAPED = ("sources", "seq_policy", "min_steps", "max_steps", "block")  # settings config_from shapes itself
GIVEN = tuple(  # AuditConfig fields whose flag carries the value as it is (None: not given): settings.fields
    s.name for s in SETTINGS if s.config and s.dest == s.name and s.name not in _SHAPED
)


def _add(p, name: str, **kw) -> None:
    """The flag of setting ``name`` with its help (both from ``settings.fields``)."""
    s = FIELDS[name]
    p.add_argument(s.flag, help=HELP[str(s.dest)], **kw)


def _run_arguments(p) -> None:
    """The model and the user's run."""
    other = ", ".join(s for s in ALL_SOURCES if s not in SOURCES)  # the registry as it is now
    for name in ("real", "profile", "sources"):
        p.add_argument(FIELDS[name].flag, help=HELP[name].replace("{other}", other))
    _add(p, "preset", choices=tuple(PRESETS))
    _add(p, "model_config", metavar="CONFIG_JSON")
    _add(p, "bridge_config", metavar="YAML")
    _add(p, "slice_layers", type=positive_int, metavar="K")
    _add(p, "global_batch_size", type=positive_int)
    _add(p, "seq_policy", choices=SEQ_POLICIES)
    for name in PARALLEL_FIELDS:
        _add(p, name, type=positive_int)
    _add(p, "gpus", type=positive_int, metavar="N")
    for name in ("freeze_language_model", "freeze_vision_model", "freeze_vision_projection"):
        _add(p, name, action=argparse.BooleanOptionalAction, default=None)
    _add(p, "recompute", choices=RECOMPUTE)
    _add(p, "manual_gc", action=argparse.BooleanOptionalAction, default=None)
    _add(p, "manual_gc_interval", type=non_negative_int, metavar="N")
    _add(p, "attention", choices=ATTENTION)
    _add(p, "compile", choices=COMPILE_PARTS)
    _add(p, "link_gbps", type=float)
    _add(p, "benchmark_config", metavar="YAML")
    kv = {"action": "append", "default": [], "type": key_value, "metavar": "KEY=VALUE"}
    _add(p, "benchmark", **kv)
    _add(p, "expert_imbalance", type=float, metavar="B")
    _add(p, "repeat_margin", type=fraction)
    _add(p, "seq_length", type=positive_int)
    _add(p, "micro_batch_size", type=positive_int)
    p.add_argument("--pad-to-max-length", action="store_true", help="the same as --seq-policy max")


def _measure_arguments(p) -> None:
    """How it is measured, on which device, and where the report goes."""
    p.add_argument("--steps", type=positive_int, help=HELP["steps"])
    for name in ("min_steps", "max_steps", "block"):
        _add(p, name, type=positive_int)
    _add(p, "budget_s", type=positive_seconds)
    _add(p, "precision", type=fraction)
    _add(p, "warmup", type=non_negative_int)
    _add(p, "num_workers", type=non_negative_int)
    _add(p, "loader_options", action="append", default=[], type=key_value, metavar="KEY=VALUE")
    _add(p, "threshold", type=fraction)
    _add(p, "device")
    _add(p, "logits", choices=LOGITS)
    _add(p, "step", metavar="MODULE:FUNCTION")
    _add(p, "seed", type=int)
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
    from vlmdata.cli import STARTED  # the command's start: the budget counts from it

    if args.plan:
        plan = plan_only(cfg, threads=args.threads, sweep=args.sweep, memory_limit_gb=args.memory_limit_gb)
        print_json(plan) if args.json else show_plan(plan)
        return EXIT_OK if (plan.get("measured") or {}).get("fits", True) else EXIT_USAGE

    def bar(total):
        return progress("audit: " + ", ".join(cfg.sources), total, unit="steps", quiet=not shown)

    def announce(i: int, n: int, values: dict) -> None:
        if shown:
            err.print(f"configuration {i + 1}/{n}: {label(values)}", highlight=False)

    sweep = {"sweep": args.sweep, "memory_limit_gb": args.memory_limit_gb}
    shows = {"progress": bar, "on_config": announce, "phase": phase, "on_plan": show_plan if shown else None}
    s = run_session(cfg, out_dir=args.out, threads=args.threads, started=STARTED, **shows, **sweep)
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
