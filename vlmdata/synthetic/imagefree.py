"""The ``imagefree`` mock: text only (no image part, no image file), text lengths from a profile's rows (prompt and
answer tokens, turns; rows sampled like the profile generator) or fixed counts (``mocks.IMAGEFREE_PROMPT_TOKENS``,
``mocks.IMAGEFREE_ANSWER_TOKENS``: the ``imagefree-fixed`` view).
"""

from __future__ import annotations

from typing import Any

from vlmdata.dataset.schema import Sample
from vlmdata.errors import OptionsError
from vlmdata.profile.document import MAX_ROW_TOKENS, load_profile, profile_sha256, sample_rows, validate_profile
from vlmdata.profile.tokens import get_tokenizer, tokenizer_for_profile
from vlmdata.synthetic.generate import RowPicker, conversation, mix
from vlmdata.synthetic.mocks import IMAGEFREE_ANSWER_TOKENS, IMAGEFREE_PROMPT_TOKENS
from vlmdata.synthetic.text import TextMaker


class ImageFree:
    """Text-only samples: a profile's text lengths (rows sampled like the profile generator) or fixed ones.

    ``profile``: a profile document or the path of one; ``tokenizer``: counts the tokens (default: the profile's,
    else the shipped Qwen tokenizer)."""

    def __init__(
        self,
        seed: int = 0,
        tokenizer=None,
        *,
        profile=None,
        prompt_tokens: int = IMAGEFREE_PROMPT_TOKENS,
        answer_tokens: int = IMAGEFREE_ANSWER_TOKENS,
    ):
        if isinstance(profile, (str, bytes)) or hasattr(profile, "__fspath__"):
            # load_profile is annotated str: a PathLike works there, a bytes path fails there
            profile = load_profile(profile)  # pyright: ignore[reportArgumentType]
        if prompt_tokens < 0:
            raise OptionsError(f"`prompt_tokens` must be >= 0, got {prompt_tokens}")
        if answer_tokens < 1:
            raise OptionsError(f"`answer_tokens` must be >= 1, got {answer_tokens}")
        for name, n in (("prompt_tokens", prompt_tokens), ("answer_tokens", answer_tokens)):
            if n > MAX_ROW_TOKENS:  # 10**8 ran out of memory
                raise OptionsError(f"`{name}` must be at most {MAX_ROW_TOKENS}, got {n}")
        self.seed = int(seed)
        self.profile_sha = None
        if profile is not None:
            validate_profile(profile)
            rows = sample_rows(profile)
            self.rows = [(int(r["prompt_tokens"]), int(r["answer_tokens"]), max(1, int(r["turns"]))) for r in rows]
            self.profile_sha = profile.get("_sha256") or profile_sha256(
                {k: v for k, v in profile.items() if not k.startswith("_")}
            )
            tok = tokenizer if tokenizer is not None else tokenizer_for_profile(profile)
        else:
            self.rows = [(int(prompt_tokens), int(answer_tokens), 1)]
            tok = tokenizer if tokenizer is not None else get_tokenizer(None)
        self.text = TextMaker(tok)
        self.pick = RowPicker(len(self.rows), self.seed)

    def sample(self, i: int) -> Sample:
        row, _ = self.pick(i)
        p, a, turns = self.rows[row]
        ps = self.text.split(p, turns)
        ans = self.text.split(max(a, turns), turns)
        prompts = [self.text.make(n, mix(self.seed, i, 1, t)) for t, n in enumerate(ps)]
        answers = [self.text.make(n, mix(self.seed, i, 2, t)) for t, n in enumerate(ans)]
        conv = conversation(prompts, answers, 0)
        for turn in conv:  # a user turn needs some content
            if not turn["content"]:
                turn["content"] = [{"type": "text", "text": ""}]
        return Sample(key=f"s{i:09d}", conversation=conv, source_id=f"imagefree-{row}", synthetic=self.describe())

    def describe(self) -> dict[str, Any]:
        d = {"generator": "imagefree", "seed": self.seed}
        if self.profile_sha:
            d["profile"] = self.profile_sha
        else:
            d["prompt_tokens"], d["answer_tokens"] = self.rows[0][0], self.rows[0][1]
        return d
