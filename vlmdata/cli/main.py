"""The ``vlmdata`` command line: a thin layer over the Python API (one module per subcommand).

Start-up contract: ``vlmdata --help`` imports no command module; ``vlmdata CMD ...`` imports only
``vlmdata.cli.commands.CMD`` (each module keeps torch and transformers out of its import, so every
``--help`` stays fast).  The one-line summaries of the top-level help live in ``COMMANDS`` below.

Errors: a mistyped option prints the usage of the (sub)command it was given to, not the top-level
one; an invalid choice suggests the closest valid one.

Exit codes: 0 success, 1 a check failed (validate, compare), 2 usage or input error,
3 the audit found a misleading benchmark, 4 the audit could not decide (its intervals span a limit).

Every command runs inside ``console.guarded_streams()`` (every byte written is scrubbed of secrets; a
stdout that cannot be written is one line, not a traceback) and ``storage.redacting()`` (an exception
that escapes anyway carries no secret).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys

from rich.markup import escape

from vlmdata import __version__, storage
from vlmdata.cli.args import cli_flags
from vlmdata.cli.console import EXIT_USAGE, OutputError, UserError, fail, guarded_streams, silence
from vlmdata.errors import VlmdataError

# name -> one-line summary for `vlmdata --help` (each module's add_parser gives the same text as help=)
COMMANDS = {
    "build": "build WebDataset shards from real image-text data",
    "validate": "re-read every shard and check it",
    "inspect": "summary table of a dataset",
    "demo": "build, validate and inspect a small real dataset from offline photos",
    "profile": "measure a dataset's workload shape into a profile.json",
    "synth": "synthetic shards from a profile, or the mock data of today's benchmarks",
    "compare": "KS distances and medians of two datasets or profiles, PASS/FAIL per metric",
    "audit": "measure the mock-vs-real training throughput gap; exit 3 if misleading",
    "bench": "benchmarks (bench build|loader|synth)",
}
QUIET_HELP = "hide progress (the summary and any verdict are always printed)"


class Parser(argparse.ArgumentParser):
    """argparse with errors at the right level: a subcommand's unknown option is reported with that
    subcommand's usage, and an invalid choice names the closest valid one."""

    top_level = False

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if extras and not self.top_level:
            self.error("unrecognized arguments: " + " ".join(extras) + _suggest_options(self, extras))
        return ns, extras

    def error(self, message: str):
        """argparse's usage error (exit 2), its text scrubbed of secrets: it echoes the raw argument."""
        super().error(storage.redact_text(message))

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from {', '.join(choices)})")
        return super()._check_value(action, value)


def _suggest_options(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    known = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    for e in extras:
        if e.startswith("--"):
            close = difflib.get_close_matches(e.split("=", 1)[0], known, n=1)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named in argv (the first word that is not an option), if it is one."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser; only the subcommand named in ``argv`` (if any) is fully built (imported)."""
    p = Parser(
        prog="vlmdata",
        description=(
            "Real, synthetic and mock multimodal data for honest VLM throughput benchmarks in Megatron Bridge.\n"
            "Exit codes: 0 ok, 1 check failed, 2 usage/input error, 3 misleading benchmark (audit),\n"
            "4 undecided (audit: measure longer with --max-steps / --budget-s).\n"
            "`vlmdata COMMAND --help` for a command's options."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.top_level = True
    p.add_argument("--version", action="version", version=f"vlmdata {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _command_in(sys.argv[1:] if argv is None else argv)
    for name, summary in COMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=summary)  # a placeholder: its module is imported only when chosen
            continue
        mod = importlib.import_module(f"vlmdata.cli.commands.{name}")
        sp = mod.add_parser(sub)
        if not any("--quiet" in a.option_strings for a in sp._actions):
            sp.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command line; returns its exit code (module docstring)."""
    with guarded_streams():
        try:
            code = _main(argv)
            sys.stdout.flush()  # a full stdout shows here, inside the guard, not at interpreter exit
            return code
        except BrokenPipeError:  # the reader stopped reading (`| head`): not an error of this command
            silence(sys.stdout)
            return 0
        except OutputError as e:
            silence(sys.stdout)
            return fail(str(e))


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser(argv)
    args = p.parse_args(argv)
    if not getattr(args, "_run", None):
        p.print_help()
        return EXIT_USAGE
    try:
        with storage.redacting():
            return int(args._run(args) or 0)
    except (BrokenPipeError, OutputError):
        raise
    except UserError as e:  # already worded for the command line by the command
        return fail(str(e))
    except VlmdataError as e:  # every other user-facing error, caught here once: parameters shown as flags
        return fail(escape(cli_flags(storage.redact_text(e))))
    except KeyboardInterrupt:
        return fail("interrupted")
    except OSError as e:  # the environment, not the input: a full disk or a vanished file while writing results
        where = f"{e.filename}: " if e.filename else ""
        return fail(escape(f"{where}{e.strerror or e}"))


if __name__ == "__main__":
    sys.exit(main())
