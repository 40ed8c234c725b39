"""LLaVA-style JSON/JSONL and Hugging Face ``messages`` JSONL (Megatron Bridge's DirectHFSFT layout).

LLaVA: ``{"id", "image": path | [paths], "conversations": [{"from": "human", "value": "<image>\\n..."}, ...]}``.
messages: ``{"messages": [{"role": "user", "content": [{"type": "image", "image": path}, {"type": "text", ...}]}]}``
or string contents with ``<image>`` placeholders and a top-level ``"images": [paths]``.
Image paths are relative to ``image_root`` (default: the JSON file's folder).
"""

from __future__ import annotations

import json
import os
from typing import Iterator

from .. import storage
from .base import SourceError, SourceItem
from .text import BadRecord, from_turns


def iter_records(path: str, raw: bool = False) -> Iterator[tuple[str, object, str | None]]:
    """(input label, record or None, parse error) for a JSON array file or a JSONL file.

    With ``raw``, JSONL lines come back unparsed (bytes) for the caller to parse later."""
    name = storage.basename(path)
    with storage.open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        try:
            with storage.open(path, "r", encoding="utf-8") as f:
                records = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SourceError(f"{storage.redact(path)}: not valid JSON ({e})") from None
        for i, rec in enumerate(records):
            yield f"{name}[{i}]", rec, None
        return
    with storage.open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if raw:
                yield f"{name}:{lineno}", line, None
                continue
            try:
                yield f"{name}:{lineno}", json.loads(line), None
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                yield f"{name}:{lineno}", None, str(e)


def _resolve(ref: object, root: str) -> str:
    if not isinstance(ref, str) or not ref:
        raise BadRecord(f"image reference {ref!r:.60} is not a path")
    if ref.startswith("file://"):
        ref = ref[7:]
    if "://" in ref:
        if storage.protocol(ref) in storage.OBJECT_STORES:
            return ref  # object storage (credentials from the environment)
        raise BadRecord(f"remote image {storage.redact(ref)!r:.80} (only local files and object storage are read)")
    if storage.is_url(root):
        return ref if os.path.isabs(ref) else storage.join(root, ref)
    return ref if os.path.isabs(ref) else os.path.join(root, ref)


def _llava(rec: dict, root: str) -> tuple[list, list[str]]:
    images = rec.get("image", rec.get("images"))
    images = [] if images is None else images if isinstance(images, list) else [images]
    paths = [_resolve(p, root) for p in images]
    return from_turns(rec.get("conversations"), len(paths), "from", "value"), paths


def _messages(rec: dict, root: str) -> tuple[list, list[str]]:
    msgs = rec.get("messages")
    if not isinstance(msgs, list):
        raise BadRecord("no 'messages' list")
    paths: list[str] = []
    if any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in msgs):
        for m in msgs:
            for item in m.get("content") if isinstance(m, dict) and isinstance(m.get("content"), list) else []:
                if isinstance(item, dict) and item.get("type") == "image":
                    ref = item.get("image", item.get("path", item.get("url")))
                    paths.append(_resolve(ref, root))
    top = rec.get("images") or []
    paths += [_resolve(p, root) for p in (top if isinstance(top, list) else [top])]
    return from_turns(msgs, len(paths), "role", "content"), paths


def _fill(item: SourceItem, rec: object, fmt: str, root: str) -> None:
    """Parse (if still bytes) and convert one record into ``item``."""
    if isinstance(rec, bytes):
        try:
            rec = json.loads(rec)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            item.error = ("bad_json", str(e))
            return
    if not isinstance(rec, dict):
        item.error = ("bad_record", "record is not a JSON object")
        return
    item.source_id = str(rec.get("id", item.input))
    try:
        item.conversation, item.images = (_llava if fmt == "llava" else _messages)(rec, root)
    except BadRecord as e:
        item.error = ("bad_record", str(e))


def iter_json_source(path: str, fmt: str, image_root: str | None, deferred: bool = False) -> Iterator[SourceItem]:
    """Items of a LLaVA or messages JSON/JSONL file. ``deferred``: JSONL lines are parsed later, by
    ``SourceItem.resolve()`` (in build workers), so enumerating stays cheap."""
    root = storage.local(image_root) if image_root else storage.dirname(path)
    for index, (label, rec, err) in enumerate(iter_records(path, raw=deferred)):
        item = SourceItem(index=index, input=label)
        if err is not None:
            item.error = ("bad_json", err)
        elif deferred:
            item.pending = (_fill, (rec, fmt, root))
        else:
            _fill(item, rec, fmt, root)
        yield item


def sniff(path: str) -> str | None:
    """'llava' or 'messages' from the first record of a JSON/JSONL file, else None."""
    try:
        for _, rec, _err in iter_records(path):
            if isinstance(rec, dict):
                return "llava" if "conversations" in rec else "messages" if "messages" in rec else None
    except (SourceError, OSError):
        return None
    return None
