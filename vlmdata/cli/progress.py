"""Progress of a long loop, on stderr: a rich bar for a person watching, plain lines for a log.

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

``phases(prefix)`` gives ``phase(name, detail)``, a context manager around one phase of a longer command (the
audit's model build, census, compile, warm-up): a line when it starts, on a terminal a spinner with the elapsed
time, off it a first line once it has run ``FIRST_LINE_S`` (quick phases and failures print nothing), a line
every ``interval`` seconds while it runs, and a line with its seconds when it ends::

    audit: model build (qwen3-vl-moe 5 of 48 decoder layers, 2.01B parameters on cpu) ...
    audit: model build: still running, 0:00:10
    audit: model build done in 0:00:14

Progress goes to stderr so that stdout carries only results (tables, ``--json``).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import IO, Callable, Iterator

from vlmdata.cli.streams import OutputError
from vlmdata.cli.terminal import err

DEFAULT_INTERVAL_S = 10.0
FIRST_LINE_S = 1.0  # a phase's first line off a terminal: after this long (quick phases and errors print none)
MAX_INTERVAL_S = 86400.0


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
    # rich.progress costs ~40 ms to import and only an interactive run draws a bar
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


def phases(
    prefix: str,
    quiet: bool = False,
    *,
    bar: bool | None = None,
    stream: IO[str] | None = None,
    interval: float | None = None,
) -> Callable:
    """``phase(name, detail="")``: a context manager reporting one phase (module docstring). Off a terminal the
    first line comes after ``FIRST_LINE_S`` (a phase that ends sooner, or fails, prints nothing: a failing command
    still prints its one error line), then one every ``interval`` seconds, and the end."""
    iv = _interval() if interval is None else interval

    @contextmanager
    def phase(name: str, detail: str = "") -> Iterator[None]:
        if quiet:
            yield
            return
        label = f"{prefix}: {name}" + (f" ({detail})" if detail else "")
        t0 = time.monotonic()
        if bar if bar is not None else interactive():
            with err.status(f"{label} ...", spinner="dots"):
                yield
            if time.monotonic() - t0 >= FIRST_LINE_S:
                err.print(f"{prefix}: {name} done in {clock(time.monotonic() - t0)}", highlight=False)
            return
        out = stream or sys.stderr
        stop, said = threading.Event(), [False]

        def say(text: str) -> None:
            try:
                out.write(text + "\n")
                out.flush()
                said[0] = True
            except (OSError, ValueError, OutputError):
                stop.set()

        def heartbeat() -> None:
            if stop.wait(min(FIRST_LINE_S, iv) if iv else FIRST_LINE_S):
                return
            say(f"{label} ...")
            while iv and not stop.wait(iv):
                say(f"{prefix}: {name}: still running, {clock(time.monotonic() - t0)}")

        t = threading.Thread(target=heartbeat, name="vlmdata-phase", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()
        if said[0]:
            say(f"{prefix}: {name} done in {clock(time.monotonic() - t0)}")

    return phase
