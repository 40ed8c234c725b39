"""Conversions of the common conversation layouts to vlmdata's canonical messages."""

from __future__ import annotations

import re

from vlmdata.dataset.schema import user_assistant
from vlmdata.errors import VlmdataError

ROLE_MAP = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "bot": "assistant",
    "model": "assistant",
}
IMAGE_TOKEN = re.compile(r"<image>")
DEFAULT_PROMPT = "Describe this image."  # the user turn of a caption-only sample (the one definition)


class BadRecord(VlmdataError, ValueError):
    pass


def split_placeholders(text: str) -> list[dict]:
    """'<image>\\nWhat is this?' -> [{"type":"image"}, {"type":"text","text":"What is this?"}]."""
    parts: list[dict] = []
    for i, chunk in enumerate(IMAGE_TOKEN.split(text)):
        if i:
            parts.append({"type": "image"})
        chunk = chunk.strip()
        if chunk:
            parts.append({"type": "text", "text": chunk})
    return parts


def from_turns(turns: object, n_images: int, role_key: str, text_key: str) -> list[dict]:
    """LLaVA ``from/value`` or plain ``role/content`` string turns, with ``<image>`` placeholders.

    With no placeholder at all and images present, the images go before the first user text
    (the LLaVA convention).
    """
    if not isinstance(turns, list) or not turns:
        raise BadRecord("no conversation turns")
    out = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or role_key not in t:
            raise BadRecord(f"turn {i} has no '{role_key}'")
        role = ROLE_MAP.get(str(t[role_key]).lower())
        if role is None:
            raise BadRecord(f"turn {i} has unknown role {t[role_key]!r}")
        value = t.get(text_key, "")
        if isinstance(value, list):
            out.append({"role": role, "content": content_parts(value)})
        elif isinstance(value, str):
            out.append({"role": role, "content": split_placeholders(value)})
        else:
            raise BadRecord(f"turn {i} content is neither text nor a list of parts")
    n_parts = sum(p["type"] == "image" for t in out for p in t["content"])
    if n_parts == 0 and n_images:
        first_user = next((t for t in out if t["role"] == "user"), None)
        if first_user is None:
            raise BadRecord("images but no user turn to attach them to")
        first_user["content"][:0] = [{"type": "image"} for _ in range(n_images)]
    elif n_parts != n_images:
        raise BadRecord(f"{n_parts} image placeholders but {n_images} images")
    return out


def content_parts(items: list) -> list[dict]:
    """HF messages content items -> canonical parts (image payload references are dropped here)."""
    parts = []
    for item in items:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, dict) and item.get("type") == "text":
            parts.append({"type": "text", "text": str(item.get("text", ""))})
        elif isinstance(item, dict) and item.get("type") == "image":
            parts.append({"type": "image"})
        else:
            raise BadRecord(f"content item {item!r:.60} is neither text nor image")
    return parts


def caption_conversation(caption: str, prompt: str, n_images: int = 1) -> list[dict]:
    """A caption-only sample's conversation: ``n_images`` images and ``prompt`` from the user, ``caption`` as the
    answer."""
    return user_assistant(prompt, caption.strip(), n_images)
