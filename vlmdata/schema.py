"""The sample schema: one image-text sample as it lives in a shard (see docs/FORMAT.md).

A sample is a conversation in the Hugging Face ``messages`` schema whose ``{"type": "image"}``
parts refer, in reading order, to the sample's images. Images keep their original encoded bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SAMPLE_SCHEMA = "vlmdata.sample/1"
ROLES = ("system", "user", "assistant")
FORMAT_EXT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tiff", "MPO": "jpg"}
IMAGE_EXTS = frozenset(FORMAT_EXT.values()) | {"jpeg"}


@dataclass
class ImageInfo:
    """What a shard records about one image (its bytes live in a file of their own)."""

    file: str  # "0.jpg": the suffix after "KEY."
    width: int
    height: int
    format: str  # PIL format name
    bytes: int

    def to_json(self) -> dict:
        return {"file": self.file, "width": self.width, "height": self.height, "format": self.format, "bytes": self.bytes}


@dataclass
class Sample:
    """One sample: conversation, images (encoded bytes, in order) and provenance."""

    key: str
    conversation: list[dict]
    images: list[bytes] = field(default_factory=list)
    image_info: list[ImageInfo] = field(default_factory=list)
    source_id: str = ""
    synthetic: dict | None = None  # None for real data; the generator's description for synthetic

    def meta(self) -> dict:
        """The ``KEY.json`` document."""
        return {
            "schema": SAMPLE_SCHEMA,
            "key": self.key,
            "source_id": self.source_id,
            "conversation": self.conversation,
            "images": [i.to_json() for i in self.image_info],
            "synthetic": self.synthetic,
        }

    def files(self) -> list[tuple[str, bytes]]:
        """Tar members of this sample, in write order: JSON first, then images in order."""
        out = [(f"{self.key}.json", dumps(self.meta()))]
        out += [(f"{self.key}.{info.file}", data) for info, data in zip(self.image_info, self.images)]
        return out


def dumps(obj: Any) -> bytes:
    """Canonical JSON: sorted keys, compact, UTF-8; the same object always gives the same bytes."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def user_assistant(prompt: str, answer: str, n_images: int, images_first: bool = True) -> list[dict]:
    """A single-turn conversation with ``n_images`` image parts in the user turn."""
    parts = [{"type": "image"} for _ in range(n_images)]
    text = [{"type": "text", "text": prompt}] if prompt else []
    content = parts + text if images_first else text + parts
    return [
        {"role": "user", "content": content},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def count_image_parts(conversation: list[dict]) -> int:
    return sum(
        1
        for turn in conversation
        for part in (turn.get("content") if isinstance(turn.get("content"), list) else [])
        if isinstance(part, dict) and part.get("type") == "image"
    )


def conversation_texts(conversation: list[dict]) -> list[tuple[str, str]]:
    """(role, text) for every text part, in order."""
    out = []
    for turn in conversation:
        for part in turn.get("content", []):
            if part.get("type") == "text":
                out.append((turn["role"], part["text"]))
    return out


def check_conversation(conversation: Any) -> str | None:
    """The problem with a conversation, or None when it is well formed and has an answer."""
    if not isinstance(conversation, list) or not conversation:
        return "conversation is not a non-empty list"
    for i, turn in enumerate(conversation):
        if not isinstance(turn, dict) or turn.get("role") not in ROLES:
            return f"turn {i} has no valid role"
        content = turn.get("content")
        if not isinstance(content, list):
            return f"turn {i} content is not a list of parts"
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
                return f"turn {i} has a part that is neither text nor image"
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                return f"turn {i} has a text part without a string"
    if not any(t["role"] == "assistant" and any(p["type"] == "text" and p["text"].strip() for p in t["content"])
               for t in conversation):
        return "no non-empty assistant answer"
    return None


def check_meta(meta: Any, key: str, files: dict[str, int]) -> list[str]:
    """Problems of a ``KEY.json`` document against the schema and the files present (name -> size)."""
    if not isinstance(meta, dict):
        return ["json is not an object"]
    problems = []
    if meta.get("schema") != SAMPLE_SCHEMA:
        problems.append(f"schema is {meta.get('schema')!r}, expected {SAMPLE_SCHEMA!r}")
    if meta.get("key") != key:
        problems.append(f"key field {meta.get('key')!r} differs from tar key {key!r}")
    problem = check_conversation(meta.get("conversation"))
    if problem:
        problems.append(problem)
    images = meta.get("images")
    if not isinstance(images, list):
        return problems + ["images is not a list"]
    if not problem and count_image_parts(meta["conversation"]) != len(images):
        problems.append(f"{count_image_parts(meta['conversation'])} image parts but {len(images)} images")
    for i, info in enumerate(images):
        name = info.get("file") if isinstance(info, dict) else None
        if name != f"{i}.{str(name).rsplit('.', 1)[-1]}":
            problems.append(f"image {i} file name {name!r} is not '{i}.<ext>'")
        elif name not in files:
            problems.append(f"image file {key}.{name} missing")
        elif files[name] != info.get("bytes"):
            problems.append(f"image {name}: {files[name]} bytes, json says {info.get('bytes')}")
    extra = set(files) - {"json"} - {i.get("file") for i in images if isinstance(i, dict)}
    if extra:
        problems.append(f"unexpected files {sorted(extra)}")
    return problems
