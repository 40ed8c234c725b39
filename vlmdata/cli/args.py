"""Typed command-line values shared by the subcommands (argparse ``type=`` functions).

Each raises ``argparse.ArgumentTypeError`` with the offending text, so a bad value is reported as
``vlmdata CMD: error: argument --opt: <why>`` with that subcommand's usage (exit 2).
"""

from __future__ import annotations

import argparse
import math
import re

from vlmdata.audit.settings.fields import SETTINGS
from vlmdata.errors import VlmdataError
from vlmdata.storage import redact_text


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


def fraction(text: str) -> float:
    """A fraction, ``0.1`` or ``10%``, in [0, 10)."""
    try:
        v = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (0.1 or 10%)") from None
    if not 0 <= v < 10:
        raise argparse.ArgumentTypeError(f"threshold {v} out of range")
    return v


def positive_seconds(text: str) -> float:
    """A number of seconds > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def memory_limit_gb(text: str) -> float:
    """GB of GPU memory, or a card's name (``vlmdata.audit.analysis.cards.CARDS``: h100, h200, b200, ...)."""
    # the audit's registry of cards, imported by the one flag that reads it (other commands start without it)
    from vlmdata.audit.analysis.cards import memory_limit

    try:
        return memory_limit(text)
    except VlmdataError as e:
        raise argparse.ArgumentTypeError(str(e).replace("`memory_limit_gb` ", "")) from None


def sweep_item(text: str) -> str:
    """``KEY=V1,V2,...`` with no credential in it (the library parses the values)."""
    if redact_text(text) != text:
        raise argparse.ArgumentTypeError("a value carries a credential or a signed URL; not accepted")
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not [v for v in values.split(",") if v.strip()]:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=V1,V2,... (e.g. micro_batch_size=1,2,4)")
    return text


def key_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, value): true/false/none, else an int, a float or the text (the library checks it)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"needs KEY=VALUE, got {redact_text(text)!r}")
    low = value.lower()
    if low in ("true", "false", "none"):
        return key, {"true": True, "false": False, "none": None}[low]
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            continue
    return key, value


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
# library parameters whose flag is not ``--`` + the name with dashes (every command's; the one map ``cli_flags`` uses):
# the audit's, from its settings table (``vlmdata.audit.settings.fields``)
PARAM_FLAGS = {s.name: s.flag for s in SETTINGS if s.flag is not None and s.dest != s.name}


def cli_flags(text: str, names: dict[str, str] | None = None) -> str:
    """A library message with its parameter names shown as the command's flags: the one place where
    parameters become flags (``vlmdata.cli.main`` applies it to every ``VlmdataError``).

    Args:
        text: the message; backquoted parameter names (```image_root```) become ``--image-root``, or the flag
            ``PARAM_FLAGS`` names (```loader_options``` -> ``--loader-arg``).
        names: more parameter -> flag pairs (on top of ``PARAM_FLAGS``).

    Returns:
        The message as the command line user should read it.
    """
    flags = {**PARAM_FLAGS, **(names or {})}
    return _PARAM.sub(lambda m: flags.get(m.group(1), "--" + m.group(1).replace("_", "-")), str(text))
