"""``SourceRequest``: every option of how a source is read, one frozen object that checks itself.

A request names the format (None: detected), where relative image paths of records point (``image_root``), the
user turn of caption-only samples (``prompt``), the image and text columns of a Hugging Face dataset, and whether
records may point to images outside the source root (``allow_outside_root``). Each format's reader uses the
options it needs (``sources.formats``).

Contract:

- ``open_source(path, request)`` takes it whole; ``BuildOptions.source`` and ``ProfileOptions.source`` hold one
  and hand it over unchanged, so a new way of reading a source is one field here (and what reads it) and reaches
  ``build``, ``profile_dataset`` and both CLI commands (``cli.args.add_source_args``) at once.
- Made only through its checks: a bad value raises ``SourceOptionsError`` (an ``OptionsError`` and a
  ``SourceError``) naming the field in backquotes; ``replace(**changes)`` is a checked copy that refuses unknown
  names. A ``pathlib.Path`` image root is kept as its text. Nothing here touches the file system: whether the
  image root is a folder, and whether the format is registered, is checked when the source is opened.
- ``folded(request, **options)``: the older keyword form (``format=``, ``image_root=``, ...) applied on top of a
  request; what options objects and ``open_source`` use to keep those keywords working.
- ``HoldsSource``: the base that reads the request's fields through as properties of an options object
  (``BuildOptions(...).image_root``).
- ``ReadRequest`` is what a format's reader is handed: the request plus ``deferred`` (the caller parses records
  itself: ``item.resolve()``), which is how a caller consumes items, not how the source is read.

Depends on ``dataset.schema`` (what a plain-text prompt is), ``sources.base``, ``sources.text`` and ``errors``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from vlmdata.dataset.schema import conversation_problem
from vlmdata.errors import OptionsError
from vlmdata.options_util import known_names
from vlmdata.sources.base import SourceError
from vlmdata.sources.text import DEFAULT_PROMPT


class SourceOptionsError(SourceError, OptionsError):
    """A ``SourceRequest`` value is of the wrong type or out of range; the message names the field."""


@dataclass(frozen=True)
class SourceRequest:
    """How a source is read (checked when made: ``SourceOptionsError`` names the first bad field).

    Attributes:
        format: a registered format (``sources.FORMATS``); None: detected from the path.
        image_root: where relative image paths of JSON records point (None: the JSON file's folder).
        prompt: the user turn of caption-only samples (plain text, no control tokens).
        image_column: the image column of a Hugging Face dataset (None: guessed).
        text_column: its text or conversation column (None: guessed).
        allow_outside_root: read image paths of records that lie outside the source root (the image root for
            JSON sources, the dataset folder for Hugging Face path cells); default: skip them as outside_root.
    """

    format: str | None = None
    image_root: str | None = None
    prompt: str = DEFAULT_PROMPT
    image_column: str | None = None
    text_column: str | None = None
    allow_outside_root: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.image_root, os.PathLike):  # a Path is a path: kept as its text
            object.__setattr__(self, "image_root", os.fspath(self.image_root))
        for name in ("format", "image_root", "image_column", "text_column"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise SourceOptionsError(f"`{name}` must be a string or None, got {type(v).__name__}")
        if not isinstance(self.allow_outside_root, bool):
            raise SourceOptionsError(f"`allow_outside_root` must be True or False, got {self.allow_outside_root!r}")
        if not isinstance(self.prompt, str) or conversation_problem(
            [
                {"role": "user", "content": [{"type": "text", "text": self.prompt}]},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            ]
        ):
            raise SourceOptionsError("`prompt` must be plain text (no control tokens such as <|im_end|>)")

    def replace(self, **changes: Any) -> SourceRequest:
        """A checked copy with ``changes`` applied; an unknown name raises ``SourceOptionsError`` naming it."""
        known_names(changes, names(), "source", SourceOptionsError)
        return dataclasses.replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """Every field and its value (for manifests and JSON)."""
        return {name: getattr(self, name) for name in names()}


@dataclass(frozen=True)
class ReadRequest(SourceRequest):
    """What a format's reader is handed: the request, and ``deferred`` (items may carry unparsed records; the
    caller calls ``item.resolve()`` before using one)."""

    deferred: bool = False


class HoldsSource:
    """A base for options objects that hold a ``source: SourceRequest``: its fields read through as properties
    (``opts.image_root`` is ``opts.source.image_root``), the older flat form docs and callers use."""

    source: SourceRequest

    @property
    def format(self) -> str | None:
        return self.source.format

    @property
    def image_root(self) -> str | None:
        return self.source.image_root

    @property
    def prompt(self) -> str:
        return self.source.prompt

    @property
    def image_column(self) -> str | None:
        return self.source.image_column

    @property
    def text_column(self) -> str | None:
        return self.source.text_column

    @property
    def allow_outside_root(self) -> bool:
        return self.source.allow_outside_root


def names() -> tuple[str, ...]:
    """The fields of ``SourceRequest``, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(SourceRequest))


def folded(request: SourceRequest | None = None, **options: Any) -> SourceRequest:
    """``request`` (default ``SourceRequest()``) with the keyword ``options`` applied on top (checked).

    Raises:
        SourceOptionsError: an unknown option name, or a bad value (naming it).
    """
    if request is not None and not isinstance(request, SourceRequest):
        raise SourceOptionsError(f"`source` must be a SourceRequest, got {type(request).__name__}")
    return (request if request is not None else SourceRequest()).replace(**options)


__all__ = ["HoldsSource", "ReadRequest", "SourceOptionsError", "SourceRequest", "folded", "names"]
