"""Terminal output shared by the commands: progress, tables, JSON, one-line errors, exit codes.

Progress contract (``progress(...)``, a context manager yielding an ``Advance``: call it as
``advance(n=1)``; ``advance.set_description(text)`` and ``advance.set_total(n)`` change the label
and the total while it runs):

- stdout and stderr both terminals: a rich bar on stderr (description, bar, n/N, rate, elapsed, ETA;
  without a total: n, rate, elapsed);
- otherwise (CI, ``| tee``, a log file): plain lines on stderr, one every ``interval`` seconds
  (``$VLMDATA_PROGRESS_INTERVAL``, default 10; 0 = at every advance) even while nothing advances, and,
  when any was printed, a last one when the work ends normally (none after an error, so a failing
  command still prints its one error line; none for work shorter than the interval)::

      build: 1200/5000 samples (24%), 310/s, elapsed 0:03:52, ETA 0:12:15
      build: 1200 samples, 310/s, elapsed 0:03:52                  (no total known)
      build: done, 5000/5000 samples, 21.5/s, elapsed 0:03:52

- ``quiet``: nothing. Quiet hides progress only; commands always print their verdict and summary.

Progress goes to stderr so that stdout carries only results (tables, ``--json``).

Output contract (``guarded_streams``, which ``vlmdata.cli.main`` wraps every command in):

- every byte written to stdout or stderr is scrubbed of secrets first (``storage.redact_text``: URL
  credentials, signed-URL parameters, credential environment variables), whoever writes it (a command, a
  wrapper message echoing a raw argument, argparse, a warning, a traceback);
- a stream that cannot be written (``> /dev/full``, a closed pipe) raises ``OutputError`` / ``BrokenPipeError``,
  which ``main`` turns into one line (or silence for a closed pipe) instead of a traceback.

Tables (``out.print(table)`` on this module's consoles): headers and values are never cut. A table that fits
the width is printed as is; off a terminal the width is ``$COLUMNS`` when set, else unlimited (``| cat``, CI
logs get the whole table); a table wider than the width (a narrow terminal, ``COLUMNS=80``) is printed as
one block per row, ``header: value`` per line. Text off a terminal is not re-wrapped.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import IO, Callable, Iterable, Iterator

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from vlmdata.errors import VlmdataError
from vlmdata.storage import redact_text

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_MISLEADING, EXIT_UNDECIDED = 0, 1, 2, 3, 4
DEFAULT_INTERVAL_S = 10.0
MAX_INTERVAL_S = 86400.0


class UserError(VlmdataError):
    """A mistake in the user's input: printed as one line, exit code 2, no traceback."""


class OutputError(VlmdataError):
    """stdout or stderr cannot be written (a full disk, a device that refuses writes): one line, exit 2."""


# ----------------------------------------------------------------------------- guarded streams


class GuardedStream:
    """A text stream that scrubs every write with ``storage.redact_text`` and reports its own OS errors as
    ``OutputError`` (a closed pipe stays ``BrokenPipeError``); everything else is the wrapped stream's."""

    def __init__(self, stream, name: str):
        self.stream, self.name = stream, name

    def write(self, text: str) -> int:
        try:
            self.stream.write(redact_text(text) if text else text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"cannot write to {self.name}: {e.strerror or e}") from None
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"cannot write to {self.name}: {e.strerror or e}") from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextmanager
def guarded_streams() -> Iterator[None]:
    """Run a block with ``sys.stdout`` and ``sys.stderr`` wrapped in ``GuardedStream`` (restored after)."""
    old = sys.stdout, sys.stderr
    sys.stdout = old[0] if isinstance(old[0], GuardedStream) else GuardedStream(old[0], "stdout")
    sys.stderr = old[1] if isinstance(old[1], GuardedStream) else GuardedStream(old[1], "stderr")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old


def silence(stream) -> None:
    """Point a stream that cannot be written at /dev/null, so its buffered text can be flushed at exit
    (Python would otherwise print 'Exception ignored ...' and exit 120)."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


# ----------------------------------------------------------------------------- consoles


def _plain(console: Console, cell) -> str:
    if isinstance(cell, str):
        return console.render_str(cell).plain
    return cell.plain if isinstance(cell, Text) else str(cell)


class WholeConsole(Console):
    """A rich Console whose tables keep every header and value (module docstring: Tables)."""

    def available_width(self) -> int | None:
        """Columns to fit: ``$COLUMNS`` when set, else the terminal's; None (unlimited) off a terminal."""
        cols = os.environ.get("COLUMNS", "").strip()
        if cols.isdigit() and int(cols) > 0:
            return int(cols)
        return self.width if self.is_terminal else None

    def print(self, *objects, **kw) -> None:  # noqa: D102 - rich's signature
        if not any(isinstance(o, Table) for o in objects):
            if not self.is_terminal:
                kw.setdefault("soft_wrap", True)  # a log or a pipe: no re-wrapping
            super().print(*objects, **kw)
            return
        for o in objects:
            if isinstance(o, Table):
                self.print_table(o)
            else:
                self.print(o, **kw)

    def print_table(self, t: Table) -> None:
        """The whole table at its natural width when that fits, else one block per row."""
        natural = Measurement.get(self, self.options.update(width=1 << 16), t).maximum
        avail = self.available_width()
        if avail is None or natural <= avail:
            old = self._width
            self.width = max(natural, 1)
            try:
                super().print(t)
            finally:
                self._width = old
            return
        self.print_rows(t)

    def print_rows(self, t: Table) -> None:
        """One block per row: the first cell, then ``header: value`` lines (``key: value`` without headers)."""
        lines: list[str] = []
        if t.title:
            lines.append(_plain(self, t.title))
        cols = [[_plain(self, c) for c in col.cells] for col in t.columns]
        heads = [_plain(self, col.header) for col in t.columns]
        for r in range(t.row_count):
            cells = [col[r] if r < len(col) else "" for col in cols]
            if not t.show_header:
                lines.append("  " + (f"{cells[0]}: " if len(cells) > 1 else "") + "  ".join(cells[1:] or cells))
                continue
            lines.append(f"  {heads[0]}: {cells[0]}" if heads[0] else f"  {cells[0]}")
            lines += [f"    {h or '-'}: {v}" for h, v in zip(heads[1:], cells[1:])]
        if t.caption:
            lines.append(_plain(self, t.caption))
        for line in lines:
            super().print(line, markup=False, highlight=False, soft_wrap=True)


err = WholeConsole(stderr=True, highlight=False)
out = WholeConsole(highlight=False)


def fail(message: str) -> int:
    """Print ``error: message`` (secrets scrubbed) on stderr; returns the usage exit code."""
    try:
        err.print(f"[bold red]error:[/] {redact_text(message)}", soft_wrap=True)
    except (OSError, OutputError):
        pass  # stderr itself cannot be written: the exit code still says it
    return EXIT_USAGE


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


# ----------------------------------------------------------------------------- progress


def clock(seconds: float) -> str:
    """``H:MM:SS`` for a duration in seconds."""
    s = int(max(seconds, 0) + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _rate_text(rate: float | None, unit: str) -> str:
    if not rate:
        return f"- {unit}/s"
    return f"{rate:,.0f} {unit}/s" if rate >= 100 else f"{rate:.1f} {unit}/s" if rate >= 10 else f"{rate:.2f} {unit}/s"


class Advance:
    """What ``progress`` yields: ``advance(n=1)`` counts ``n`` more items done."""

    def __init__(self, description: str, total: int | None, unit: str):
        self.description, self.total, self.unit = description, total, unit
        self.n = 0
        self.start = time.monotonic()
        self._on_change: Callable[[], None] | None = None

    def __call__(self, n: int = 1) -> None:
        self.n += n
        if self._on_change:
            self._on_change()

    def set_description(self, text: str) -> None:
        """Change the label (the source or stage now running)."""
        self.description = text
        if self._on_change:
            self._on_change()

    def set_total(self, total: int | None) -> None:
        """Set or change the total once it is known (ETA appears with it)."""
        self.total = total
        if self._on_change:
            self._on_change()

    def line(self, done: bool = False, now: float | None = None) -> str:
        """One plain progress line: description, n/N unit (percent), rate, elapsed, ETA."""
        elapsed = (time.monotonic() if now is None else now) - self.start
        rate = self.n / elapsed if elapsed > 0 and self.n else None
        count = f"{self.n}/{self.total} {self.unit}" if self.total else f"{self.n} {self.unit}"
        parts = [
            f"{self.description}: "
            + ("done, " if done else "")
            + count
            + (f" ({self.n / self.total:.0%})" if self.total and not done else ""),
            _rate_text(rate, self.unit.split()[-1] if self.unit else "items"),
            f"elapsed {clock(elapsed)}",
        ]
        if self.total and not done:
            left = self.total - self.n
            parts.append(f"ETA {clock(left / rate)}" if rate and left >= 0 else "ETA -")
        return ", ".join(parts)


def interactive() -> bool:
    """True when both stdout and stderr are terminals (a person watching: draw a bar)."""
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _interval() -> float:
    """``$VLMDATA_PROGRESS_INTERVAL`` when it is a number of seconds in [0, 86400], else the default (10)."""
    try:
        v = float(os.environ.get("VLMDATA_PROGRESS_INTERVAL", DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return v if math.isfinite(v) and 0.0 <= v <= MAX_INTERVAL_S else DEFAULT_INTERVAL_S


@contextmanager
def progress(
    description: str,
    total: int | None = None,
    quiet: bool = False,
    *,
    unit: str = "items",
    bar: bool | None = None,
    stream: IO[str] | None = None,
    interval: float | None = None,
) -> Iterator[Advance]:
    """Report progress of a loop; yields ``advance(n=1)`` (an ``Advance``).

    Args:
        description: the source or stage, e.g. ``"build"``, ``"audit: real"``.
        total: items expected, or None when unknown (then: count, rate and elapsed, no ETA).
        quiet: report nothing.
        unit: what an item is ("samples", "steps"), shown after the count and in the rate.
        bar: force the rich bar (True) or plain lines (False); default: bar when interactive().
        stream: where plain lines go (default stderr).
        interval: seconds between plain lines (default ``$VLMDATA_PROGRESS_INTERVAL`` or 10; 0 = at
            every advance).

    Returns:
        A context manager yielding the ``Advance``.
    """
    adv = Advance(description, total, unit)
    if quiet:
        yield adv
        return
    if bar if bar is not None else interactive():
        with _rich_bar(adv) as a:
            yield a
        return
    iv = _interval() if interval is None else interval
    iv = min(iv, MAX_INTERVAL_S) if math.isfinite(iv) and iv >= 0 else DEFAULT_INTERVAL_S
    with _plain_lines(adv, stream or sys.stderr, iv) as a:
        yield a


@contextmanager
def _plain_lines(adv: Advance, stream: IO[str], interval: float) -> Iterator[Advance]:
    lock = threading.Lock()
    last = [time.monotonic()]
    printed = [False]
    broken = [False]

    def emit(done: bool = False) -> None:
        with lock:
            last[0] = time.monotonic()
            if broken[0]:
                return
            try:
                stream.write(adv.line(done) + "\n")
                stream.flush()
            except (OSError, ValueError, OutputError):  # stderr full or closed: progress stops, the work goes on
                broken[0] = True
                return
            printed[0] = True

    def on_change() -> None:
        if time.monotonic() - last[0] >= interval:
            emit()

    stop = threading.Event()

    def heartbeat() -> None:  # a line every interval even while a long step runs (no dead air)
        while not stop.wait(max(interval, 0.05) / 2 if interval else 1.0):
            if interval and time.monotonic() - last[0] >= interval:
                emit()

    adv._on_change = on_change
    t = threading.Thread(target=heartbeat, name="vlmdata-progress", daemon=True)
    t.start()
    try:
        yield adv
    finally:
        stop.set()
        t.join()
        adv._on_change = None
    if printed[0]:
        emit(done=True)


@contextmanager
def _rich_bar(adv: Advance) -> Iterator[Advance]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(_rate_text(task.speed, adv.unit.split()[-1] if adv.unit else "items"))

    def columns():
        if adv.total:
            return [
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(adv.unit),
                TaskProgressColumn(),
                Rate(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            ]
        return [
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.completed:.0f} " + adv.unit),
            Rate(),
            TimeElapsedColumn(),
        ]

    with Progress(*columns(), console=err, transient=True) as p:
        task = p.add_task(adv.description, total=adv.total)

        def on_change() -> None:
            p.update(task, completed=adv.n, description=adv.description, total=adv.total)

        adv._on_change = on_change
        try:
            yield adv
        finally:
            adv._on_change = None


# ----------------------------------------------------------------------------- tables and numbers


def counts(mapping: dict | None, empty: str = "none") -> str:
    """``{"missing_file": 31, "bad_image": 2}`` -> ``"missing_file 31, bad_image 2"`` (largest first)."""
    if not mapping:
        return empty
    return ", ".join(f"{k} {v}" for k, v in sorted(mapping.items(), key=lambda kv: (-_num(kv[1]), str(kv[0]))))


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def table(title: str | None, head: list[str] | None, rows: Iterable[Iterable], *, left: int = 1) -> Table:
    """A rich table; the first ``left`` columns left-aligned, the rest right-aligned; ``head=None``: no header."""
    rows = [[str(c) for c in r] for r in rows]
    width = max((len(r) for r in rows), default=len(head or []))
    t = Table(
        title=title, show_header=head is not None, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False
    )
    for i in range(width):
        name = head[i] if head else ""
        t.add_column(name, justify="left" if i < left else "right", min_width=len(name))
    for r in rows:
        t.add_row(*r)
    return t


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)
