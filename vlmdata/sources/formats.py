"""The input formats, one registry (``FORMATS``): what each reads, how it is recognised, what its fingerprint covers.

A format is registered with a reader, ``read(path, request) -> Iterator[SourceItem]`` (``request``: the
``SourceRequest`` given to ``open_source``, handed over as a ``ReadRequest``: ``sources/request.py``), and
optionally a detector, ``detect(path) -> name or None`` (several formats may share one: the JSON detector names
llava or messages). ``open_source``, ``detect_format`` and ``source_fingerprint`` (``sources/__init__.py``) read
only this registry, and ``vlmdata build --format`` / ``vlmdata profile --format`` offer its names; so adding a
format is its reader module plus one ``register_format(Format(...))`` here, and its test.

Registered: ``folder`` (images + caption sidecars, local or object storage), ``llava`` and ``messages``
(JSON/JSONL, local or object storage), ``hf`` (a local Hugging Face dataset: ``save_to_disk`` or parquet).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterator

from vlmdata import storage
from vlmdata.registry import Registry
from vlmdata.sources.base import SourceError, SourceItem
from vlmdata.sources.folder import IMAGE_SUFFIXES, UNSUPPORTED_IMAGE_SUFFIXES, iter_folder
from vlmdata.sources.hfdataset import is_hf_dir, iter_hf
from vlmdata.sources.jsonrecords import iter_json_source, sniff
from vlmdata.sources.request import ReadRequest


@dataclass(frozen=True)
class Format:
    """One registered input format.

    Attributes:
        name: what ``format`` (``--format``) names it by.
        description: what a path of this format is, for messages ("an image folder").
        read: ``read(path, request) -> Iterator[SourceItem]``.
        detect: ``detect(path) -> format name or None`` for a path whose format was not given (None: never
            detected); detectors are asked in ``priority`` order, highest first.
        priority: a format that claims part of another's paths ranks above it (hf: some folders; the JSON
            detector: a file is asked about before a folder, one look-up on object storage).
        needs: what a local path of this format must be, ("dir" or "file", how messages say it), or None.
        remote: it reads fsspec URLs (object storage) as well as local paths.
        members: a folder's fingerprint covers the files with these suffixes (None: every file).
        hashed: ... and hashes the bytes of those with these suffixes (at most 64 MiB each).
    """

    name: str
    description: str
    read: Callable[[str, ReadRequest], Iterator[SourceItem]]
    detect: Callable[[str], str | None] | None = None
    priority: int = 0
    needs: tuple[str, str] | None = None
    remote: bool = False
    members: frozenset[str] | None = None
    hashed: tuple[str, ...] = ()


JSON_FILE = ("file", "a JSON or JSONL file")
FORMATS: Registry[Format] = Registry("format", "format", SourceError)


def register_format(fmt: Format, *, replace: bool = False) -> Format:
    """Add ``fmt`` to ``FORMATS`` (module docstring)."""
    return FORMATS.register(fmt.name, fmt, replace=replace)


def detectors() -> list[Callable[[str], str | None]]:
    """The distinct detectors of the registered formats, highest priority first."""
    out: list[Callable[[str], str | None]] = []
    for f in sorted(FORMATS.entries(), key=lambda f: -f.priority):
        if f.detect is not None and f.detect not in out:
            out.append(f.detect)
    return out


# ----------------------------------------------------------------------------- the built-in formats


def _is_folder(path: str) -> str | None:
    return "folder" if storage.isdir(path) else None


def _is_hf(path: str) -> str | None:
    if storage.is_url(path):
        return None  # Hugging Face datasets are read from local paths only
    if os.path.isdir(path):
        return "hf" if is_hf_dir(path) else None
    return "hf" if path.endswith(".parquet") else None


def _json_kind(path: str) -> str | None:
    """llava or messages from the first record of a JSON/JSONL file (SourceError when it has neither key)."""
    if not path.endswith((".json", ".jsonl")) or os.path.isdir(path) or not storage.isfile(path):
        return None
    fmt = sniff(path)
    if fmt:
        return fmt
    raise SourceError(
        f"{storage.redact(path)}: JSON records have neither 'conversations' (LLaVA) nor 'messages'; set `format`"
    )


def _read_folder(path: str, req: ReadRequest) -> Iterator[SourceItem]:
    return iter_folder(path, req.prompt)


def _read_llava(path: str, req: ReadRequest) -> Iterator[SourceItem]:
    return iter_json_source(path, "llava", req.image_root, req.deferred, req.allow_outside_root)


def _read_messages(path: str, req: ReadRequest) -> Iterator[SourceItem]:
    return iter_json_source(path, "messages", req.image_root, req.deferred, req.allow_outside_root)


def _read_hf(path: str, req: ReadRequest) -> Iterator[SourceItem]:
    return iter_hf(path, req.prompt, req.image_column, req.text_column, req.allow_outside_root, req.image_root)


register_format(
    Format(
        "folder",
        "an image folder",
        _read_folder,
        _is_folder,
        needs=("dir", "a directory"),
        remote=True,
        members=frozenset(IMAGE_SUFFIXES | UNSUPPORTED_IMAGE_SUFFIXES | {".txt", ".json"}),
    )
)
register_format(Format("llava", "LLaVA JSON", _read_llava, _json_kind, priority=1, needs=JSON_FILE, remote=True))
register_format(
    Format("messages", "messages JSON", _read_messages, _json_kind, priority=1, needs=JSON_FILE, remote=True)
)
register_format(
    Format("hf", "a Hugging Face dataset", _read_hf, _is_hf, priority=2, hashed=(".json", ".arrow", ".parquet"))
)
