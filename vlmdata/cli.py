"""The ``vlmdata`` command line: a thin layer over the Python API (one module per subcommand).

Exit codes: 0 success, 1 a check failed (validate, compare), 2 usage or input error,
3 the audit found a misleading benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .console import EXIT_USAGE, UserError, fail

COMMANDS = ["build", "validate", "inspect", "demo", "profile", "synth", "compare", "audit", "bench"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vlmdata", description=(
        "Real, synthetic and mock multimodal data for honest VLM throughput benchmarks in Megatron Bridge.\n"
        "Exit codes: 0 ok, 1 check failed, 2 usage/input error, 3 misleading benchmark (audit)."),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        mod = importlib.import_module(f"vlmdata.commands.{name}")
        sp = mod.add_parser(sub)
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars or tables")
        sp.set_defaults(_run=mod.run)
    return p


class _Parser(argparse.ArgumentParser):
    pass


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not getattr(args, "_run", None):
        p.print_help()
        return EXIT_USAGE
    try:
        return int(args._run(args) or 0)
    except UserError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        return fail("interrupted")


if __name__ == "__main__":
    sys.exit(main())
