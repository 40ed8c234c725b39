"""The two consoles (``out`` on stdout, ``err`` on stderr) and the tables and numbers the commands print.

Tables (``out.print(table)`` on this module's consoles): headers and values are never cut. A table that fits
the width is printed as is; off a terminal the width is ``$COLUMNS`` when set, else unlimited (``| cat``, CI
logs get the whole table); a table wider than the width (a narrow terminal, ``COLUMNS=80``) is printed as
one block per row, ``header: value`` per line. Text off a terminal is not re-wrapped.
"""

from __future__ import annotations

import os
from typing import Iterable

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


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
