"""The ``bridge-noise`` mock: the mock data people benchmark with today, reproduced.

``bridge-noise`` follows Megatron Bridge's ``MockVLMSFTDatasetConfig``
(megatron/bridge/data/builders/mock_vlm_sft.py, 0.6; docs/bridge-contract.md): with
``rng = numpy.random.default_rng(random_seed)``, ``num_base_examples`` (1000) base examples are
made up front, each drawing in this order ``n = rng.integers(10, 30)`` (10..29 words;
``(10, 100)`` with in-batch packing), ``" ".join(rng.choice(VOCABULARY, size=n))`` and then
``num_images`` (1) images ``rng.integers(0, 256, (height, width, 3), uint8)`` of ``image_size``
(256x256) held in memory as PIL RGB images; the prompt is ``"Describe this image."`` after the
image part; sample ``i`` is base example ``i % num_base_examples`` (``DirectSFTDataset``). The
same seed gives the same words and pixels as Bridge's builder.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import numpy as np
from PIL import Image

from vlmdata.dataset.images import require_storable
from vlmdata.dataset.schema import ImageInfo, Sample
from vlmdata.errors import OptionsError
from vlmdata.profile.document import MAX_ROW_IMAGES
from vlmdata.sources.text import DEFAULT_PROMPT

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
# Bridge's mock prompt, "Describe this image.": vlmdata's caption-only prompt is the same words by design (one definition)
BRIDGE_PROMPT = DEFAULT_PROMPT
BRIDGE_IMAGE_SIZE = (256, 256)  # (width, height) as Bridge's config.image_size is unpacked
MAX_BASE_BYTES = 16 << 30  # the base examples' pixels held in memory (Bridge's default: 1000 x 256x256: 0.18 GiB)
BRIDGE_NUM_BASE_EXAMPLES = 1000


def check_image_size(image_size) -> None:
    """OptionsError unless ``image_size`` is (width, height) of an image vlmdata would store (at most
    ``dataset.images.DEFAULT_MAX_IMAGE_PIXELS`` pixels and an aspect ratio of ``MAX_ASPECT_RATIO``: the build's rule)."""
    if len(image_size) != 2 or min(image_size) <= 0:
        raise OptionsError(f"`image_size` must be two positive dimensions (width, height), got {image_size!r}")
    require_storable(image_size[0], image_size[1], "`image_size`")


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
        check_image_size(image_size)
        if num_images < 0:
            raise OptionsError(f"`num_images` must be >= 0, got {num_images}")
        if num_images > MAX_ROW_IMAGES:  # 10**6 ran out of memory
            raise OptionsError(f"`num_images` must be at most {MAX_ROW_IMAGES}, got {num_images}")
        if num_base_examples <= 0:
            raise OptionsError(f"`num_base_examples` must be > 0, got {num_base_examples}")
        held = int(num_base_examples) * int(num_images) * image_size[0] * image_size[1] * 3
        if held > MAX_BASE_BYTES:  # Bridge keeps its base examples in memory, and so does this mock
            raise OptionsError(
                f"`num_base_examples` x `num_images` x `image_size` = {num_base_examples} x {num_images} x "
                f"{image_size[0]}x{image_size[1]}: the base examples would hold {held / 2**30:.1f} GiB of pixels "
                f"in memory (at most {MAX_BASE_BYTES >> 30} GiB); lower one of them"
            )
        if not prompt:
            raise OptionsError("`prompt` must be a non-empty text")
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

    def describe(self) -> dict[str, Any]:
        return {
            "generator": "bridge-noise",
            "seed": self.seed,
            "image_size": list(self.image_size),
            "num_images": self.num_images,
            "num_base_examples": self.num_base_examples,
            "packing": self.packing,
            "stored_as": "PNG (zlib level 0, lossless)" if self.encoded else "PIL.Image in memory",
        }
