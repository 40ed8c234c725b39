"""Terminal output shared by the commands: exit codes, one-line errors, JSON, and (re-exported from the modules
that hold them) progress, tables and the guarded streams. Commands import all of it from here.

- ``cli.progress``: ``progress(...)`` (a rich bar on a terminal, plain lines every ``interval`` seconds
  otherwise, nothing when quiet; always on stderr, so stdout carries only results), ``phases(prefix)`` (one
  line per phase of a longer command, a heartbeat while it runs), ``Advance``, ``clock``;
- ``cli.terminal``: the consoles ``out`` / ``err`` (``WholeConsole``: tables never cut a header or a value),
  ``table``, ``counts``, ``human_bytes``;
- ``cli.streams``: ``guarded_streams`` (every byte written is scrubbed of secrets; a stream that cannot be
  written raises ``OutputError``), ``silence``.
"""

from __future__ import annotations

import json
import sys

from vlmdata.cli.progress import DEFAULT_INTERVAL_S, MAX_INTERVAL_S, Advance, clock, interactive, phases, progress
from vlmdata.cli.streams import GuardedStream, OutputError, guarded_streams, silence
from vlmdata.cli.terminal import WholeConsole, counts, err, human_bytes, out, table
from vlmdata.errors import VlmdataError
from vlmdata.storage import redact_text

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_MISLEADING, EXIT_UNDECIDED = 0, 1, 2, 3, 4


class UserError(VlmdataError):
    """A mistake in the user's input: printed as one line, exit code 2, no traceback."""


def fail(message: str) -> int:
    """Print ``error: message`` (secrets scrubbed) on stderr; returns the usage exit code."""
    try:
        err.print(f"[bold red]error:[/] {redact_text(message)}", soft_wrap=True)
    except (OSError, OutputError):
        pass  # stderr itself cannot be written: the exit code still says it
    return EXIT_USAGE


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


__all__ = [
    "DEFAULT_INTERVAL_S",
    "EXIT_FAIL",
    "EXIT_MISLEADING",
    "EXIT_OK",
    "EXIT_UNDECIDED",
    "EXIT_USAGE",
    "MAX_INTERVAL_S",
    "Advance",
    "GuardedStream",
    "OutputError",
    "UserError",
    "WholeConsole",
    "clock",
    "counts",
    "err",
    "fail",
    "guarded_streams",
    "human_bytes",
    "interactive",
    "out",
    "phases",
    "print_json",
    "progress",
    "silence",
    "table",
]
