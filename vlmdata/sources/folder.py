"""A folder of images with caption sidecars: ``name.jpg`` + ``name.txt`` or ``name.json``, recursively."""

from __future__ import annotations

import json
import os
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
        try:
            if txt.exists():
                caption = txt.read_text(encoding="utf-8")
                if not caption.strip():
                    item.error = ("empty_caption", f"{txt.name} is empty")
                else:
                    item.conversation = caption_conversation(caption, prompt)
            elif js.exists():
                item.conversation = _json_sidecar(js, prompt)
            else:
                item.error = ("missing_caption", f"no {txt.name} or {js.name} beside the image")
        except UnicodeDecodeError as e:
            item.error = ("bad_caption", f"{txt.name} is not UTF-8 ({e.reason})")
        except json.JSONDecodeError as e:
            item.error = ("bad_json", f"{js.name}: {e}")
        except BadRecord as e:
            item.error = ("bad_record", f"{js.name}: {e}")
        yield item


def _json_sidecar(path: Path, prompt: str) -> list:
    doc = json.loads(path.read_text(encoding="utf-8"))
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
