"""``ProfileOptions``: every setting of ``profile_dataset``, with its defaults and its checks.

Frozen and self-validating like ``LoaderOptions`` and ``BuildOptions``: a bad value raises ``ProfileError``
(naming the parameter) when the options are made; ``dataclasses.replace`` makes a checked copy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vlmdata.profile.document import ProfileError
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, SPECS
from vlmdata.sources.text import DEFAULT_PROMPT

DEFAULT_CAP = 20_000
DEFAULT_DECODE_IMAGES = 1000
MODELS = tuple(SPECS)


MAX_DECODE_REPEATS = 100  # decodes per timed image (the fastest is kept: a few suffice)


@dataclass(frozen=True)
class ProfileOptions:
    """The settings of one profile (checked when made: ``ProfileError`` names the first bad parameter)."""

    model: str = "qwen3-vl"
    min_pixels: int = BRIDGE_MIN_PIXELS
    max_pixels: int = BRIDGE_MAX_PIXELS
    tokenizer: str | None = None  # a local HF tokenizer folder; None: the Qwen tokenizer shipped offline
    cap: int = DEFAULT_CAP  # sample rows stored at most (reservoir)
    seed: int = 0  # reservoir seed (rows and decode subset)
    decode_images: int = DEFAULT_DECODE_IMAGES  # images timed (0: no decode timing)
    decode_repeats: int = 3
    format: str | None = None  # source format for non-shard inputs (default: detected)
    image_root: str | None = None
    prompt: str = DEFAULT_PROMPT  # the user turn of caption-only sources

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ``ProfileError`` naming the first bad parameter (run when the options are made)."""
        for name in ("min_pixels", "max_pixels", "cap", "seed", "decode_images", "decode_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProfileError(f"`{name}` must be an integer, got {v!r}")
        for name in ("tokenizer", "format", "image_root"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise ProfileError(f"`{name}` must be a path or None, got {type(v).__name__}")
        if not isinstance(self.prompt, str) or not isinstance(self.model, str):
            raise ProfileError("`prompt` and `model` must be strings")
        if self.model not in SPECS:
            raise ProfileError(f"unknown model {self.model!r}: `model` must be one of {', '.join(MODELS)}")
        if self.min_pixels <= 0 or self.max_pixels <= 0 or self.min_pixels > self.max_pixels:
            raise ProfileError(f"need 0 < `min_pixels` <= `max_pixels`, got {self.min_pixels} and {self.max_pixels}")
        if self.cap <= 0:
            raise ProfileError(f"`cap` must be positive, got {self.cap}")
        if self.decode_images < 0 or self.decode_repeats <= 0:
            raise ProfileError("`decode_images` must be >= 0 and `decode_repeats` > 0")
        if self.decode_repeats > MAX_DECODE_REPEATS:  # 10**8 timed 10**11 decodes
            raise ProfileError(f"`decode_repeats` must be at most {MAX_DECODE_REPEATS}, got {self.decode_repeats}")
        if self.seed < 0:  # numpy's seed: "expected non-negative integer", a traceback
            raise ProfileError(f"`seed` must be >= 0, got {self.seed}")
