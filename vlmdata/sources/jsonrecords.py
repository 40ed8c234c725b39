"""LLaVA-style JSON/JSONL and Hugging Face ``messages`` JSONL (Megatron Bridge's DirectHFSFT layout).

LLaVA: ``{"id", "image": path | [paths], "conversations": [{"from": "human", "value": "<image>\\n..."}, ...]}``.
messages: ``{"messages": [{"role": "user", "content": [{"type": "image", "image": path}, {"type": "text", ...}]}]}``
or string contents with ``<image>`` placeholders and a top-level ``"images": [paths]``.
Image paths are relative to ``image_root`` (default: the JSON file's folder) and must stay inside it
unless ``allow_outside_root`` (``base.confine``). A UTF-8 byte-order mark is accepted; a JSONL line
longer than ``MAX_RECORD_BYTES`` is a ``bad_record`` skip; every JSON failure is a ``bad_json`` skip
(``schema.loads``).
"""

from __future__ import annotations

import os
from typing import Iterator

from vlmdata import storage
from vlmdata.dataset.schema import BadJSON, loads, safe_label
from vlmdata.sources.base import MAX_RECORD_BYTES, BadPath, ImageRef, SourceError, SourceItem, confine
from vlmdata.sources.text import BadRecord, from_turns

_BOM = b"\xef\xbb\xbf"


def _head(path: str) -> bytes:
    with storage.open(path, "rb") as f:
        head = f.read(4096)
    return head[len(_BOM) :] if head.startswith(_BOM) else head


def _lines(f, cap: int, chunk: int = 1 << 20) -> Iterator[bytes | None]:
    """The lines of a binary file object (any: local or fsspec), each at most ``cap`` bytes; a longer line
    is None (and skipped to its end without holding it in memory)."""
    buf = b""
    skipping = False
    while True:
        data = f.read(chunk)
        if not data:
            break
        buf += data
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[: nl + 1], buf[nl + 1 :]
            if skipping:
                skipping = False
                continue
            yield line if len(line) <= cap else None
        if not skipping and len(buf) > cap:
            yield None
            skipping, buf = True, b""
        elif skipping:
            buf = b""
    if buf and not skipping:
        yield buf if len(buf) <= cap else None


def iter_records(path: str, raw: bool = False) -> Iterator[tuple[str, object, str | None]]:
    """(input label, record or None, parse error) for a JSON array file or a JSONL file.

    With ``raw``, JSONL lines come back unparsed (bytes) for the caller to parse later."""
    name = storage.basename(path)
    if _head(path).lstrip().startswith(b"["):
        try:
            with storage.open(path, "rb") as f:
                records = loads(f.read())
        except BadJSON as e:
            raise SourceError(f"{storage.redact(path)}: {e}") from None
        if not isinstance(records, list):
            raise SourceError(f"{storage.redact(path)}: not a JSON array of records")
        for i, rec in enumerate(records):
            yield f"{name}[{i}]", rec, None
        return
    with storage.open(path, "rb") as f:
        for lineno, line in enumerate(_lines(f, MAX_RECORD_BYTES), 1):
            if line is None:
                yield f"{name}:{lineno}", None, f"line longer than {MAX_RECORD_BYTES} bytes"
                continue
            if lineno == 1 and line.startswith(_BOM):
                line = line[len(_BOM) :]
            if not line.strip():
                continue
            if raw:
                yield f"{name}:{lineno}", line, None
                continue
            try:
                yield f"{name}:{lineno}", loads(line), None
            except BadJSON as e:
                yield f"{name}:{lineno}", None, str(e)


def _llava(rec: dict, root: str, allow: bool) -> tuple[list, list[ImageRef]]:
    images = rec.get("image", rec.get("images"))
    images = [] if images is None else images if isinstance(images, list) else [images]
    paths: list[ImageRef] = [confine(p, root, allow) for p in images]
    return from_turns(rec.get("conversations"), len(paths), "from", "value"), paths


def _messages(rec: dict, root: str, allow: bool) -> tuple[list, list[ImageRef]]:
    msgs = rec.get("messages")
    if not isinstance(msgs, list):
        raise BadRecord("no 'messages' list")
    paths: list[ImageRef] = []
    if any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in msgs):
        for m in msgs:
            for item in m["content"] if isinstance(m, dict) and isinstance(m.get("content"), list) else []:
                if isinstance(item, dict) and item.get("type") == "image":
                    ref = item.get("image", item.get("path", item.get("url")))
                    paths.append(confine(ref, root, allow))
    top = rec.get("images") or []
    paths += [confine(p, root, allow) for p in (top if isinstance(top, list) else [top])]
    return from_turns(msgs, len(paths), "role", "content"), paths


def _fill(item: SourceItem, rec: object, fmt: str, root: str, allow_outside_root: bool = False) -> None:
    """Parse (if still bytes) and convert one record into ``item``."""
    if isinstance(rec, bytes):
        try:
            rec = loads(rec)
        except BadJSON as e:
            item.error = ("bad_json", str(e))
            return
    if not isinstance(rec, dict):
        item.error = ("bad_record", "record is not a JSON object")
        return
    item.source_id = safe_label(rec.get("id", item.input), 200)
    try:
        item.conversation, item.images = (_llava if fmt == "llava" else _messages)(rec, root, allow_outside_root)
    except BadPath as e:
        item.error = (e.reason, e.detail)
    except BadRecord as e:
        item.error = ("bad_record", safe_label(e, 300))


def iter_json_source(
    path: str, fmt: str, image_root: str | None, deferred: bool = False, allow_outside_root: bool = False
) -> Iterator[SourceItem]:
    """Items of a LLaVA or messages JSON/JSONL file. ``deferred``: JSONL lines are parsed later, by
    ``SourceItem.resolve()`` (in build workers), so enumerating stays cheap."""
    root = storage.local(image_root) if image_root else storage.dirname(path)
    if not storage.is_url(root):
        root = os.path.abspath(root)
    for index, (label, rec, err) in enumerate(iter_records(path, raw=deferred)):
        item = SourceItem(index=index, input=safe_label(label))
        if err is not None:
            item.error = ("bad_json", err)
        elif deferred:
            item.pending = (_fill, (rec, fmt, root, allow_outside_root))
        else:
            _fill(item, rec, fmt, root, allow_outside_root)
        yield item


_UTF16_32 = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}
SNIFF_LINES = 1000  # JSONL lines looked at for the first record before the format is called unknown


def sniff(path: str) -> str | None:
    """'llava' or 'messages' from the first record of a JSON/JSONL file; None when the records parse but have
    neither key. SourceError naming the real cause when the file cannot be read as JSON records: not UTF-8
    (UTF-16 or UTF-32: say so), a JSON array that does not parse (truncated, a bad byte: the parser's
    position), or JSONL whose first lines are none of them JSON objects (the first line's error)."""
    shown = storage.redact(path)
    try:
        with storage.open(path, "rb") as f:
            raw = f.read(4)
    except OSError as e:
        raise SourceError(f"{shown}: cannot read ({e.strerror or e})") from None
    for bom, enc in _UTF16_32.items():
        if raw.startswith(bom):
            raise SourceError(
                f"{shown}: the file is {enc} encoded; vlmdata reads UTF-8 JSON (convert it, e.g. iconv -t UTF-8)"
            )
    first_error = None
    try:
        for n, (label, rec, err) in enumerate(iter_records(path)):
            if isinstance(rec, dict):
                return "llava" if "conversations" in rec else "messages" if "messages" in rec else None
            if first_error is None:
                first_error = f"{label}: " + (err or f"a JSON {type(rec).__name__}, not an object (a record)")
            if n >= SNIFF_LINES:
                break
    except SourceError:
        raise  # a JSON array that does not parse: its own message says where
    except (OSError, storage.StorageError) as e:
        raise SourceError(f"{shown}: cannot read ({storage.redact_text(e)})") from None
    if first_error is not None:
        raise SourceError(f"{shown}: no JSON record found ({first_error})")
    return None
