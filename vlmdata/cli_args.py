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
