"""Readers for image-text sources; ``open_source`` picks one by ``--format`` or by looking."""

from __future__ import annotations

import os
from typing import Iterator

from .. import storage
from .base import SourceError, SourceItem
from .folder import iter_folder, iter_folder_url
from .hfdataset import is_hf_dir, iter_hf
from .jsonrecords import iter_json_source, sniff

FORMATS = ("folder", "llava", "messages", "hf")
DEFAULT_PROMPT = "Describe this image."


def _detect_url(path: str) -> str:
    if path.endswith((".json", ".jsonl")) and storage.isfile(path):
        fmt = sniff(path)
        if fmt:
            return fmt
        raise SourceError(f"{storage.redact(path)}: JSON records have neither 'conversations' (LLaVA) nor 'messages'; pass --format")
    if storage.isdir(path):
        return "folder"
    raise SourceError(f"{storage.redact(path)}: cannot tell the format of a remote source (expected a folder or "
                      ".json/.jsonl; Hugging Face datasets are read from local paths only); pass --format")


def detect_format(path: str) -> str:
    path = storage.local(path)
    if storage.is_url(path):
        return _detect_url(path)
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        return "hf" if is_hf_dir(path) else "folder"
    if path.endswith(".parquet"):
        return "hf"
    if path.endswith((".json", ".jsonl")):
        fmt = sniff(path)
        if fmt:
            return fmt
        raise SourceError(f"{path}: JSON records have neither 'conversations' (LLaVA) nor 'messages'; pass --format")
    raise SourceError(f"{path}: cannot tell the format (expected a folder, .json/.jsonl or .parquet); pass --format")


def open_source(path: str, fmt: str | None = None, *, image_root: str | None = None, prompt: str = DEFAULT_PROMPT,
                image_column: str | None = None, text_column: str | None = None,
                deferred: bool = False) -> tuple[str, Iterator[SourceItem]]:
    """(format, items) for a source path. Raises SourceError for a bad path or format.

    ``deferred``: items may carry unparsed records; call ``item.resolve()`` before using one."""
    if fmt is not None and fmt not in FORMATS:
        raise SourceError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    path = storage.local(path)
    if storage.is_url(path):
        try:
            found = storage.exists(path)
        except (storage.StorageError, OSError) as e:
            raise SourceError(f"{storage.redact(path)}: {e}") from None
        if not found:
            raise SourceError(f"{storage.redact(path)}: no such file or directory")
        fmt = fmt or detect_format(path)
        if fmt == "folder":
            return fmt, iter_folder_url(path, prompt)
        if fmt in ("llava", "messages"):
            return fmt, iter_json_source(path, fmt, image_root, deferred)
        raise SourceError(f"{storage.redact(path)}: --format {fmt} is read from local paths only")
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    fmt = fmt or detect_format(path)
    if fmt == "folder":
        if not os.path.isdir(path):
            raise SourceError(f"{path}: --format folder needs a directory")
        return fmt, iter_folder(path, prompt)
    if fmt in ("llava", "messages"):
        if not os.path.isfile(path):
            raise SourceError(f"{path}: --format {fmt} needs a JSON or JSONL file")
        return fmt, iter_json_source(path, fmt, image_root, deferred)
    return fmt, iter_hf(path, prompt, image_column, text_column)


__all__ = ["FORMATS", "SourceError", "SourceItem", "detect_format", "open_source"]
