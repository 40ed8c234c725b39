"""Typed command-line values shared by the subcommands (argparse ``type=`` functions).

Each raises ``argparse.ArgumentTypeError`` with the offending text, so a bad value is reported as
``vlmdata CMD: error: argument --opt: <why>`` with that subcommand's usage (exit 2).
"""

from __future__ import annotations

import argparse


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """An integer > 0."""
    v = _int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def worker_counts(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers >= 0 (``"0,1,2"``); empty text gives ``()``."""
    out = []
    for part in text.split(","):
        if part.strip():
            try:
                out.append(non_negative_int(part.strip()))
            except argparse.ArgumentTypeError as e:
                raise argparse.ArgumentTypeError(f"{text!r}: {e} (expected worker counts such as 0,1,2)") from None
    return tuple(out)


SIZE_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def parse_size(text: str) -> int:
    """A byte count: ``512MiB``, ``1.5GB``, ``100k``, ``0`` (decimal k/M/G, binary Ki/Mi/Gi; a trailing B optional)."""
    t = text.strip().lower().rstrip("b")
    try:
        for u in sorted(SIZE_UNITS, key=len, reverse=True):
            if t.endswith(u):
                return int(float(t[: -len(u)]) * SIZE_UNITS[u])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 512MiB, 1GB, 0)") from None
