"""Typed command-line values shared by the subcommands (argparse ``type=`` functions).

Each raises ``argparse.ArgumentTypeError`` with the offending text, so a bad value is reported as
``vlmdata CMD: error: argument --opt: <why>`` with that subcommand's usage (exit 2).
"""

from __future__ import annotations

import argparse
import math
import re


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


SIZE_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str) -> int:
    """A byte count: ``512MiB``, ``1.5GB``, ``100k``, ``0`` (decimal k/M/G/T, binary Ki/Mi/Gi/Ti; a trailing B
    optional); finite, between 0 and 4 EiB."""
    t = str(text).strip().lower().rstrip("b")
    mult = 1
    for u in sorted(SIZE_UNITS, key=len, reverse=True):
        if t.endswith(u):
            t, mult = t[: -len(u)], SIZE_UNITS[u]
            break
    try:
        value = float(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 512MiB, 1GB, 0)") from None
    if not math.isfinite(value) or value < 0 or value > 2**62:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size between 0 and 4 EiB")
    return int(value)


_PARAM = re.compile(r"`([a-z_]+)`")


def cli_flags(text: str, names: dict[str, str] | None = None) -> str:
    """A library message with its parameter names shown as the command's flags: the one place where
    parameters become flags.

    Args:
        text: the message; backquoted parameter names (```image_root```) become ``--image-root``.
        names: the command's bare parameter names and their flags (``{"seq_length": "--seq-length"}``),
            replaced where they appear as whole words (the audit's messages name its config fields).

    Returns:
        The message as the command line user should read it.
    """
    text = _PARAM.sub(lambda m: "--" + m.group(1).replace("_", "-"), str(text))
    if names:
        text = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: names[m.group(1)], text)
    return text
