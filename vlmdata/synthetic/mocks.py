"""The mock data people benchmark with today, reproduced: ``bridge-noise`` and ``imagefree``.

``bridge-noise`` follows Megatron Bridge's ``MockVLMSFTDatasetConfig``
(megatron/bridge/data/builders/mock_vlm_sft.py, 0.6; docs/bridge-contract.md): with
``rng = numpy.random.default_rng(random_seed)``, ``num_base_examples`` (1000) base examples are
made up front, each drawing in this order ``n = rng.integers(10, 30)`` (10..29 words;
``(10, 100)`` with in-batch packing), ``" ".join(rng.choice(VOCABULARY, size=n))`` and then
``num_images`` (1) images ``rng.integers(0, 256, (height, width, 3), uint8)`` of ``image_size``
(256x256) held in memory as PIL RGB images; the prompt is ``"Describe this image."`` after the
image part; sample ``i`` is base example ``i % num_base_examples`` (``DirectSFTDataset``). The
same seed gives the same words and pixels as Bridge's builder.

``imagefree`` is text only (no image part, no image file): text lengths follow a profile's rows
(prompt and answer tokens, turns) or fixed counts.
"""

from __future__ import annotations

import io
import threading

import numpy as np
from PIL import Image

from vlmdata.dataset.schema import ImageInfo, Sample
from vlmdata.profile.measure import get_tokenizer, profile_sha256, sample_rows, tokenizer_for_profile, validate_profile
from vlmdata.synthetic.generate import RowPicker, conversation, mix
from vlmdata.synthetic.names import BRIDGE_NOISE, IMAGEFREE, IMAGEFREE_FIXED, MOCKS  # noqa: F401  (re-exported)
from vlmdata.synthetic.text import TextMaker

# Verbatim from megatron/bridge/data/builders/mock_vlm_sft.py (_MOCK_RESPONSE_VOCABULARY): 110 words.
BRIDGE_VOCABULARY = tuple(
    (
        "the a is was are were have has had do does did will would could should "
        "may might can need to of in for on with at by from image shows depicts "
        "contains features displays large small red blue green bright dark light "
        "object scene background foreground color shape person animal building "
        "tree sky water ground left right top bottom center middle edge beautiful "
        "complex simple detailed abstract natural moving standing sitting running "
        "walking flying and or but so yet nor not very this that these those here "
        "there where when how what which who whom whose each every all both few "
        "many much some any no other another such"
    ).split()
)
BRIDGE_PROMPT = "Describe this image."
BRIDGE_IMAGE_SIZE = (256, 256)  # (width, height) as Bridge's config.image_size is unpacked
BRIDGE_NUM_BASE_EXAMPLES = 1000
IMAGEFREE_PROMPT_TOKENS = 16
IMAGEFREE_ANSWER_TOKENS = 256


def encode_noise_png(img: Image.Image) -> bytes:
    """Lossless PNG with zlib level 0 (stored blocks): the exact pixels, the cheapest standard decode."""
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=0)
    return buf.getvalue()


class BridgeNoise:
    """Megatron Bridge's mock VLM SFT examples (see the module docstring), generated lazily in
    Bridge's order and kept (like Bridge's list of base examples: ~197 KB of pixels per image)."""

    def __init__(
        self,
        seed: int = 0,
        *,
        image_size: tuple[int, int] = BRIDGE_IMAGE_SIZE,
        num_images: int = 1,
        num_base_examples: int = BRIDGE_NUM_BASE_EXAMPLES,
        prompt: str = BRIDGE_PROMPT,
        packing: bool = False,
        encoded: bool = False,
    ):
        if len(image_size) != 2 or min(image_size) <= 0:
            raise ValueError("image_size must be two positive dimensions")
        if num_images < 0 or num_base_examples <= 0 or not prompt:
            raise ValueError("need num_images >= 0, num_base_examples > 0 and a prompt")
        self.seed, self.image_size, self.num_images = int(seed), tuple(image_size), int(num_images)
        self.num_base_examples, self.prompt, self.packing, self.encoded = (
            int(num_base_examples),
            prompt,
            packing,
            encoded,
        )
        self._rng = np.random.default_rng(seed=self.seed)
        self._base: list[tuple[str, list]] = []
        self._lock = threading.Lock()

    def base_example(self, b: int) -> tuple[str, list]:
        """(answer, images) of base example ``b``; images are PIL images, or PNG bytes when ``encoded``."""
        with self._lock:
            while len(self._base) <= b:
                lo, hi = (10, 100) if self.packing else (10, 30)
                n = int(self._rng.integers(lo, hi))
                response = " ".join(self._rng.choice(BRIDGE_VOCABULARY, size=n))
                width, height = self.image_size
                imgs = [
                    Image.fromarray(
                        self._rng.integers(low=0, high=256, size=(height, width, 3), dtype=np.uint8), mode="RGB"
                    )
                    for _ in range(self.num_images)
                ]
                if self.encoded:
                    imgs = [encode_noise_png(im) for im in imgs]
                self._base.append((response, imgs))
            return self._base[b]

    def sample(self, i: int) -> Sample:
        answer, imgs = self.base_example(i % self.num_base_examples)
        content = [{"type": "image"} for _ in imgs] + [{"type": "text", "text": self.prompt}]
        conv = [
            {"role": "user", "content": content},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        ]
        w, h = self.image_size
        infos = [
            ImageInfo(f"{j}.png", w, h, "PNG", len(im) if isinstance(im, bytes) else 0) for j, im in enumerate(imgs)
        ]
        return Sample(
            key=f"s{i:09d}",
            conversation=conv,
            images=list(imgs),
            image_info=infos,
            source_id=f"bridge-mock-{i % self.num_base_examples}",
            synthetic=self.describe(),
        )

    def describe(self) -> dict:
        return {
            "generator": "bridge-noise",
            "seed": self.seed,
            "image_size": list(self.image_size),
            "num_images": self.num_images,
            "num_base_examples": self.num_base_examples,
            "packing": self.packing,
            "stored_as": "PNG (zlib level 0, lossless)" if self.encoded else "PIL.Image in memory",
        }


class ImageFree:
    """Text-only samples: a profile's text lengths (rows sampled like the profile generator) or fixed ones."""

    def __init__(
        self,
        seed: int = 0,
        tokenizer=None,
        *,
        profile: dict | None = None,
        prompt_tokens: int = IMAGEFREE_PROMPT_TOKENS,
        answer_tokens: int = IMAGEFREE_ANSWER_TOKENS,
    ):

        if prompt_tokens < 0 or answer_tokens < 1:
            raise ValueError("need prompt_tokens >= 0 and answer_tokens >= 1")
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

    def describe(self) -> dict:
        d = {"generator": "imagefree", "seed": self.seed}
        if self.profile_sha:
            d["profile"] = self.profile_sha
        else:
            d["prompt_tokens"], d["answer_tokens"] = self.rows[0][0], self.rows[0][1]
        return d
