"""Terminal output shared by the commands: progress bars, tables, JSON, one-line errors."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

err = Console(stderr=True, highlight=False)
out = Console(highlight=False)

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_MISLEADING = 0, 1, 2, 3


class UserError(Exception):
    """A mistake in the user's input: printed as one line, exit code 2, no traceback."""


def fail(message: str) -> int:
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return EXIT_USAGE


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def progress(description: str, total: int | None = None, quiet: bool = False) -> Iterator:
    """Yields ``advance(n)``; draws a bar on stderr unless quiet (or stderr is not a terminal)."""
    if quiet:
        yield lambda n=1: None
        return
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=err, transient=True) as p:
        task = p.add_task(description, total=total)
        yield lambda n=1: p.advance(task, n)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)
