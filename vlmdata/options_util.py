"""The value checks that the frozen options objects share (``ingest.options.BuildOptions``,
``loaders.options.LoaderOptions``, ...): each raises the caller's ``OptionsError`` subclass with a message that
names the parameter in backquotes (```max_count```), which the CLI shows as its flag (``cli.args.cli_flags``).

Depends on ``errors`` only.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

from vlmdata.errors import OptionsError


def at_least(name: str, value, low: int, error: type[Exception] = OptionsError, high: int | None = None) -> None:
    """``error`` unless ``value`` is an integer (not a bool) of at least ``low`` (and at most ``high``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise error(f"`{name}` must be an integer >= {low}, got {shown(value)}")
    if high is not None and value > high:
        raise error(f"`{name}` must be at most {high}, got {shown(value)}")


def shown(value) -> str:
    """A value for a message: at most 80 characters; an integer too long to print (4,300+ digits raise) by size."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >> 64:
        return f"an integer of {abs(value).bit_length()} bits"
    return repr(value)[:80]


def env_int(name: str, default: int, low: int = 0, error: type[Exception] = OptionsError) -> int:
    """The integer environment variable ``name`` (torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), else
    ``default``; ``error`` naming the variable when it is set to anything but an integer of at least ``low``
    (``WORLD_SIZE=abc`` was a ``ValueError`` traceback)."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < low:
        raise error(
            f"environment variable {name}={text[:40]!r} is not an integer >= {low} (unset it, or launch with torchrun)"
        )
    return value


def one_of(name: str, value, allowed: tuple, error: type[Exception] = OptionsError) -> None:
    """``error`` unless ``value`` is one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise error(f"`{name}` must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def known_names(given: Iterable[str], known: tuple[str, ...], what: str, error: type[Exception] = OptionsError) -> None:
    """``error`` naming each of ``given`` that is not in ``known``, with the closest known name where there is one.

    Args:
        given: the names a caller passed (``replace(**changes)``'s keys).
        known: the option names, in declaration order.
        what: the options' kind in the message ("build", "loader").
        error: the exception class to raise.
    """
    unknown = sorted(set(given) - set(known))
    if unknown:
        hints = [
            f"{u!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(u, known, 1)) else "")
            for u in unknown
        ]
        raise error(f"unknown {what} option {', '.join(hints)}; options: {', '.join(known)}")
