"""A folder of images with caption sidecars: ``name.jpg`` + ``name.txt`` or ``name.json``, recursively."""

from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path
from typing import Iterator

from .base import SourceItem
from .text import BadRecord, caption_conversation, from_turns

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}


def iter_folder(root: str, prompt: str) -> Iterator[SourceItem]:
    base = Path(root)
    paths = sorted(
        (Path(d) / f for d, _, files in os.walk(base) for f in files if Path(f).suffix.lower() in IMAGE_SUFFIXES),
        key=lambda p: p.relative_to(base).as_posix(),
    )
    for index, path in enumerate(paths):
        rel = path.relative_to(base).as_posix()
        item = SourceItem(index=index, input=rel, source_id=rel.rsplit(".", 1)[0], images=[str(path)])
        txt, js = path.with_suffix(".txt"), path.with_suffix(".json")
        _caption_item(item, prompt, txt.name, js.name,
                      (lambda t=txt: t.read_text(encoding="utf-8")) if txt.exists() else None,
                      (lambda j=js: json.loads(j.read_text(encoding="utf-8"))) if js.exists() else None)
        yield item


def _caption_item(item: SourceItem, prompt: str, txt_name: str, js_name: str, read_txt, read_json) -> None:
    """Fill ``item`` from its sidecar: the .txt caption if there is one (``read_txt``), else the .json
    (``read_json``), else a missing_caption skip; bad sidecars become skips with a reason."""
    try:
        if read_txt is not None:
            caption = read_txt()
            if not caption.strip():
                item.error = ("empty_caption", f"{txt_name} is empty")
            else:
                item.conversation = caption_conversation(caption, prompt)
        elif read_json is not None:
            item.conversation = _json_doc(read_json(), prompt)
        else:
            item.error = ("missing_caption", f"no {txt_name} or {js_name} beside the image")
    except UnicodeDecodeError as e:
        item.error = ("bad_caption", f"{txt_name} is not UTF-8 ({e.reason})")
    except json.JSONDecodeError as e:
        item.error = ("bad_json", f"{js_name}: {e}")
    except BadRecord as e:
        item.error = ("bad_record", f"{js_name}: {e}")


def _json_doc(doc, prompt: str) -> list:
    if isinstance(doc, str):
        doc = {"caption": doc}
    if not isinstance(doc, dict):
        raise BadRecord("sidecar is not an object")
    for k in ("conversations", "messages"):
        if k in doc:
            role_key, text_key = ("from", "value") if k == "conversations" else ("role", "content")
            return from_turns(doc[k], 1, role_key, text_key)
    for k in ("caption", "text", "alt", "txt"):
        if isinstance(doc.get(k), str):
            if not doc[k].strip():
                raise BadRecord("empty caption")
            return caption_conversation(doc[k], prompt)
    raise BadRecord("sidecar has none of caption/text/conversations/messages")


def iter_folder_url(root: str, prompt: str, batch: int = 256) -> Iterator[SourceItem]:
    """The same items as ``iter_folder`` for a folder on object storage (``s3://bucket/prefix``).

    One recursive listing gives the images and which sidecars exist; sidecars are fetched in
    concurrent batches. Items are identical to a local copy's except that images are URLs.
    """
    from .. import storage

    base = root.rstrip("/")
    files = storage.find(base)
    rel_of = {f: f[len(base) + 1:] for f in files if f.startswith(base + "/")}
    present = set(rel_of.values())
    images = sorted((r for r in present if posixpath.splitext(r)[1].lower() in IMAGE_SUFFIXES))
    for lo in range(0, len(images), batch):
        chunk = images[lo:lo + batch]
        want = []
        for rel in chunk:
            stem = posixpath.splitext(rel)[0]
            want += [f"{base}/{stem}{ext}" for ext in (".txt", ".json") if stem + ext in present]
        got = storage.cat_many(want) if want else {}
        for offset, rel in enumerate(chunk):
            stem = posixpath.splitext(rel)[0]
            txt_name, js_name = posixpath.basename(stem) + ".txt", posixpath.basename(stem) + ".json"
            item = SourceItem(index=lo + offset, input=rel, source_id=stem, images=[f"{base}/{rel}"])
            txt_url, js_url = f"{base}/{stem}.txt", f"{base}/{stem}.json"
            _caption_item(item, prompt, txt_name, js_name,
                          (lambda u=txt_url: _text(_fetched(got, u))) if stem + ".txt" in present else None,
                          (lambda u=js_url: json.loads(_text(_fetched(got, u)))) if stem + ".json" in present else None)
            yield item


def _text(data: bytes) -> str:
    """UTF-8 with universal newlines, exactly as ``Path.read_text`` reads a local sidecar."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _fetched(got: dict, url: str) -> bytes:
    v = got.get(url)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    from .. import storage

    return storage.cat(url)  # not in the batch answer (or an error there): one more try, errors propagate
