"""The sample schema: one image-text sample as it lives in a shard (see docs/FORMAT.md).

A sample is a conversation in the Hugging Face ``messages`` schema whose ``{"type": "image"}``
parts refer, in reading order, to the sample's images. Images keep their original encoded bytes.

Text rules shared by build, validate, loader and profile (``conversation_problem``): every text is
valid Unicode (no unpaired surrogate, no NUL) and never contains a chat control token (``<|name|>``,
e.g. ``<|im_end|>`` or ``<|image_pad|>``): such text would inject turns or image slots into the
tokenised sample in any reader that does not escape it (Megatron Bridge's collate does not), so the
build skips it (reason ``control_token``) and validate reports it; the vlmdata loader additionally
tokenises text as plain text, so a control token in text never becomes the control token id.

``key_runs`` writes a list of sample keys compactly as runs ``[first_key, count]`` of keys that count up
by one (``s000000007``, ``s000000008``, ...; the manifest stores each shard's keys that way) and
``expand_key_runs`` reads them back.

``loads`` is the one JSON parser for untrusted input: every failure (syntax, encoding, nesting too
deep, an integer too long to convert) is a ``BadJSON`` (a ValueError) with a one-line message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from vlmdata.errors import VlmdataError
from vlmdata.qwen.spec import CONTROL_TOKEN

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
        return {
            "file": self.file,
            "width": self.width,
            "height": self.height,
            "format": self.format,
            "bytes": self.bytes,
        }


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


class BadJSON(VlmdataError, ValueError):
    """Untrusted JSON that cannot be used: syntax, encoding, nesting depth, integer length."""


def loads(data: bytes | str) -> Any:
    """``json.loads`` for untrusted input.

    Args:
        data: JSON text or UTF-8 bytes (a byte-order mark is allowed).

    Returns:
        The parsed value; BadJSON (one line) for any failure, never RecursionError or another ValueError."""
    try:
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data).decode("utf-8-sig")
        return json.loads(data)
    except UnicodeDecodeError as e:
        raise BadJSON(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise BadJSON(f"not valid JSON ({e.msg}: line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise BadJSON("JSON nested too deeply") from None
    except ValueError as e:  # an integer over sys.get_int_max_str_digits() digits
        if "integer string conversion" in str(e):
            raise BadJSON("not usable JSON (an integer with too many digits)") from None
        raise BadJSON(f"not usable JSON ({str(e).splitlines()[0][:120]})") from None


def safe_label(text: Any, limit: int = 500) -> str:
    """``text`` as printable, UTF-8-encodable provenance: bytes of a non-UTF-8 file name (surrogate escapes)
    as ``\\xNN``, other unpaired surrogates as ``\\uNNNN``, control characters backslash-escaped; cut to
    ``limit`` characters."""
    s = str(text)
    if len(s) > limit:
        s = s[:limit] + "..."
    if s.isprintable():  # the common case (surrogates and controls are not printable; space is)
        return s
    out = []
    for c in s:
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        elif c != " " and not c.isprintable():
            out.append(c.encode("unicode_escape").decode("ascii"))
        else:
            out.append(c)
    return "".join(out)


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(text: str) -> tuple[str, str] | None:
    """(reason, detail) when a text part breaks the text rules (module docstring), else None."""
    if _SURROGATE.search(text):
        return "bad_text", "text is not valid Unicode (unpaired surrogate)"
    if "\0" in text:
        return "bad_text", "text contains a NUL character"
    m = CONTROL_TOKEN.search(text)
    if m:
        return "control_token", f"text contains the chat control token {m.group(0)!r}"
    return None


_NUM_KEY = re.compile(r"^(.*?)(\d+)$")


def _nth_key(first: str, n: int) -> str | None:
    m = _NUM_KEY.match(first)
    if not m:
        return None
    prefix, digits = m.groups()
    return f"{prefix}{int(digits) + n:0{len(digits)}d}"


def key_runs(keys: list[str]) -> list[list]:
    """Keys as runs ``[first_key, count]`` of keys counting up by one (see the module docstring).

    Args:
        keys: sample keys in order.

    Returns:
        The runs; ``expand_key_runs(key_runs(keys), len(keys)) == keys`` for any keys."""
    runs: list[list] = []
    for k in keys:
        if runs and _nth_key(runs[-1][0], runs[-1][1]) == k:
            runs[-1][1] += 1
        else:
            runs.append([k, 1])
    return runs


def expand_key_runs(runs: list, limit: int) -> list[str] | None:
    """The keys of ``key_runs`` output (at most ``limit``); None when ``runs`` is malformed."""
    out: list[str] = []
    if not isinstance(runs, list):
        return None
    for run in runs:
        if not (
            isinstance(run, list)
            and len(run) == 2
            and isinstance(run[0], str)
            and isinstance(run[1], int)
            and not isinstance(run[1], bool)
            and run[1] >= 1
            and len(out) + run[1] <= limit
        ):
            return None
        first, n = run
        if n > 1 and _NUM_KEY.match(first) is None:
            return None
        out += [first] + [_nth_key(first, i) for i in range(1, n)]
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
        for part in (turn["content"] if isinstance(turn.get("content"), list) else [])
        if isinstance(part, dict) and part.get("type") == "image"
    )


def conversation_problem(conversation: Any) -> tuple[str, str] | None:
    """(reason, detail) for a conversation that breaks the schema or the text rules, or None when it is
    well formed and has a non-empty answer. Reasons: ``bad_record``, ``empty_caption``, ``bad_text``,
    ``control_token``."""
    if not isinstance(conversation, list) or not conversation:
        return "bad_record", "conversation is not a non-empty list"
    for i, turn in enumerate(conversation):
        if not isinstance(turn, dict) or turn.get("role") not in ROLES:
            return "bad_record", f"turn {i} has no valid role"
        content = turn.get("content")
        if not isinstance(content, list):
            return "bad_record", f"turn {i} content is not a list of parts"
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
                return "bad_record", f"turn {i} has a part that is neither text nor image"
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    return "bad_record", f"turn {i} has a text part without a string"
                bad = text_problem(part["text"])
                if bad:
                    return bad[0], f"turn {i}: {bad[1]}"
    if not any(
        t["role"] == "assistant" and any(p["type"] == "text" and p["text"].strip() for p in t["content"])
        for t in conversation
    ):
        return "empty_caption", "no non-empty assistant answer"
    return None


def check_conversation(conversation: Any) -> str | None:
    """The problem with a conversation (see ``conversation_problem``), or None."""
    bad = conversation_problem(conversation)
    return bad[1] if bad else None


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
        if (
            not isinstance(name, str)
            or name != f"{i}.{name.rsplit('.', 1)[-1]}"
            or name.rsplit(".", 1)[-1] not in IMAGE_EXTS
        ):
            problems.append(f"image {i} file name {safe_label(name, 60)!r} is not '{i}.<image ext>'")
        elif name not in files:
            problems.append(f"image file {key}.{name} missing")
        elif files[name] != info.get("bytes"):
            problems.append(f"image {name}: {files[name]} bytes, json says {safe_label(info.get('bytes'), 40)}")
    extra = (
        set(files)
        - {"json"}
        - {i.get("file") for i in images if isinstance(i, dict) and isinstance(i.get("file"), str)}
    )
    if extra:
        problems.append(f"unexpected files {sorted(safe_label(x, 60) for x in extra)}")
    return problems
