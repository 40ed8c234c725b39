"""Text of an exact token length: real-looking English words, counted with the real tokenizer.

:class:`TextMaker` writes sentences from a fixed list of common English words (capitalised
sentence starts, commas, full stops) and trims or extends them token by token until the
tokenizer gives exactly the target count (``add_special_tokens=False``, the same count
``vlmdata profile`` records per text part). Deterministic for ``(target, seed)`` and a tokenizer.

How: each word's token count with a leading space is known up front, so a first draft lands
near the target; then the draft is encoded once and corrected (drop the last word, or append
one-token words) until the count is exact, usually in one or two encodes. Byte-level BPE
tokenizers such as Qwen's pre-split on spaces and punctuation, so appending a word adds exactly
its own tokens, and the loop converges; it gives up with ``ValueError`` after ``max_rounds``.
"""

from __future__ import annotations

import threading

import numpy as np

from vlmdata.errors import OptionsError

# Common English words, the kind captions and instructions are made of.
WORDS = """
the a an of and to in on with at by for from as is are was were be been has have had this that these those
it its there here which who what where when how while after before over under above below between behind
near next into onto through across around along against among toward without within
man woman person people child children boy girl baby player group crowd team family friend couple
dog cat horse bird cow sheep elephant giraffe zebra bear animal fish duck
car truck bus train bicycle motorcycle boat plane airplane vehicle road street highway bridge tunnel
building house home kitchen room bathroom bedroom office window door wall floor roof ceiling table chair
couch bed desk shelf counter sink mirror lamp clock screen computer laptop keyboard phone camera book
paper sign letter word picture photo image painting poster menu page text number chart graph diagram
tree grass flower plant leaf forest field garden park mountain hill river lake ocean sea beach sand
water snow rain sky cloud sun light shadow night day morning evening city town village market shop
food plate bowl cup glass bottle pizza sandwich cake fruit apple banana orange bread coffee tea
shirt jacket coat hat dress shoes bag umbrella helmet uniform glasses
red blue green yellow white black brown gray orange purple pink dark bright light colorful
large small big little tall short long wide narrow old young new modern ancient empty full busy quiet
open closed clean wooden metal plastic stone glass soft hard smooth rough round square flat
left right top bottom front back side center middle edge corner background foreground distance
standing sitting walking running riding holding looking watching playing eating drinking wearing
carrying pulling pushing driving flying swimming smiling talking reading writing waiting parked
covered filled surrounded lined stacked placed shown visible seen taken made
several many some few two three four five each every both other another various different similar
very quite rather slightly mostly partly clearly nearly almost also still just only even
appears seems looks shows depicts contains features displays includes suggests indicates describes
scene view shot close distant detail part area section space surface pattern shape color style
question answer reason example result information description caption summary document report
first second third last next final main important possible likely simple complex natural human
because although however therefore while since unless until whether
""".split()

_END = "."
_COMMA = ","


class TextMaker:
    """Exact-token-count text for one tokenizer (thread-safe; counts cached per word)."""

    def __init__(self, tokenizer, words: list[str] | None = None):
        self.tok = tokenizer
        self.words = sorted(set(words or WORDS))
        ids = self._encode_batch([" " + w for w in self.words])
        self.cost = np.array([len(i) for i in ids], dtype=np.int64)
        self.one = [w for w, c in zip(self.words, self.cost) if c == 1]  # single-token words
        if not self.one:
            raise OptionsError("`tokenizer` splits every word of the word list into several tokens")
        self._lock = threading.Lock()

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return self.tok(texts, add_special_tokens=False)["input_ids"]

    def count(self, text: str) -> int:
        """Tokens of ``text`` (no special tokens)."""
        return len(self.tok(text, add_special_tokens=False)["input_ids"]) if text else 0

    def count_batch(self, texts: list[str]) -> list[int]:
        return [len(i) for i in self._encode_batch(texts)] if texts else []

    @staticmethod
    def _join(words: list[str]) -> str:
        """Sentence case: capitalise the first word and every word after a full stop."""
        parts, cap = [], True
        for w in words:
            parts.append(w[:1].upper() + w[1:] if cap else w)
            cap = w.endswith(_END)
        return " ".join(parts)

    def make(self, target: int, seed: int, max_rounds: int = 64) -> str:
        """A text of exactly ``target`` tokens (``""`` for 0), deterministic for (target, seed)."""
        if target < 0:
            raise OptionsError(f"`target` must be >= 0, got {target}")
        if target == 0:
            return ""
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFFFFFF, 0x7E47])
        words = self._draft_fast(target, rng)
        for _ in range(max_rounds):
            text = self._join(words)
            n = self.count(text)
            if n == target:
                return text
            if n > target:
                if len(words) > 1:
                    words.pop()
                else:  # one word too long for the target: fall back to one-token words
                    words = [self.one[int(rng.integers(len(self.one)))]]
            else:
                words.extend(self.one[int(rng.integers(len(self.one)))] for _ in range(target - n))
        raise ValueError(f"could not reach exactly {target} tokens after {max_rounds} rounds")

    def _draft_fast(self, target: int, rng: np.random.Generator) -> list[str]:
        # word indices drawn in bulk; cumulative cost (+1 token per punctuation mark) picks the cut
        k = max(4, int(target * 1.2) + 4)
        idx = rng.integers(len(self.words), size=k)
        gaps = rng.integers(6, 18, size=k // 6 + 2)
        ends = np.zeros(k, dtype=bool)
        pos = np.cumsum(gaps) - 1  # a full stop after every 6-17 words
        ends[pos[pos < k]] = True
        commas = (rng.random(k) < 0.06) & ~ends
        cost = self.cost[idx] + ends + commas
        cum = np.cumsum(cost)
        m = int(np.searchsorted(cum, target, side="left")) + 1  # words until the costs reach target
        while m > k:  # very long targets with multi-token words: draw more
            extra = rng.integers(len(self.words), size=k)
            idx = np.concatenate([idx, extra])
            ends = np.concatenate([ends, np.zeros(k, dtype=bool)])
            commas = np.concatenate([commas, np.zeros(k, dtype=bool)])
            cum = np.cumsum(self.cost[idx] + ends + commas)
            k = len(idx)
            m = int(np.searchsorted(cum, target, side="left")) + 1
        out = []
        for i in range(min(m, k)):
            w = self.words[int(idx[i])]
            if ends[i]:
                w += _END
            elif commas[i]:
                w += _COMMA
            out.append(w)
        if out and not out[-1].endswith(_END) and len(out) > 3:
            out[-1] = out[-1].rstrip(_COMMA) + _END
        return out

    def split(self, total: int, parts: int) -> list[int]:
        """``total`` tokens split over ``parts`` text parts as evenly as possible (sum exact)."""
        parts = max(1, parts)
        base, extra = divmod(total, parts)
        return [base + (1 if i < extra else 0) for i in range(parts)]
