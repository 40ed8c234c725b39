"""``ProfileOptions``: every setting of ``profile_dataset``, with its defaults and its checks.

Frozen and self-validating like ``LoaderOptions`` and ``BuildOptions``: a bad value raises ``ProfileError``
(naming the parameter) when the options are made; ``dataclasses.replace`` makes a checked copy (a source option,
``format=``, changes that field of ``source``). How a source input is read is ``source``, the same
``sources.SourceRequest`` ``BuildOptions.source`` holds, handed whole to ``sources.open_source``: a profile reads a
source exactly as the build does (format, image root, prompt, columns, images outside the root).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from vlmdata.profile.document import ProfileError
from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, SPECS
from vlmdata.sources.request import HoldsSource, SourceOptionsError, SourceRequest, folded

DEFAULT_CAP = 20_000
DEFAULT_DECODE_IMAGES = 1000
MODELS = tuple(SPECS)


MAX_DECODE_REPEATS = 100  # decodes per timed image (the fastest is kept: a few suffice)


@dataclass(frozen=True, init=False)
class ProfileOptions(HoldsSource):
    """The settings of one profile (checked when made: ``ProfileError`` names the first bad parameter).

    ``source`` is how a source input (not shards) is read, a ``sources.SourceRequest`` handed whole to
    ``sources.open_source``; its fields are also accepted as keywords (``ProfileOptions(format="llava")``),
    applied on top of ``source``, and read through as properties (``opts.image_root``).
    """

    model: str
    min_pixels: int
    max_pixels: int
    tokenizer: str | None  # a local HF tokenizer folder; None: the Qwen tokenizer shipped offline
    cap: int  # sample rows stored at most (reservoir)
    seed: int  # reservoir seed (rows and decode subset)
    decode_images: int  # images timed (0: no decode timing)
    decode_repeats: int
    source: SourceRequest  # how a source input is read (format None: detected)

    def __init__(
        self,
        model: str = "qwen3-vl",
        min_pixels: int = BRIDGE_MIN_PIXELS,
        max_pixels: int = BRIDGE_MAX_PIXELS,
        tokenizer: str | None = None,
        cap: int = DEFAULT_CAP,
        seed: int = 0,
        decode_images: int = DEFAULT_DECODE_IMAGES,
        decode_repeats: int = 3,
        source: SourceRequest | None = None,
        **source_options: Any,
    ) -> None:
        given = dict(model=model, min_pixels=min_pixels, max_pixels=max_pixels, tokenizer=tokenizer, cap=cap)
        given.update(seed=seed, decode_images=decode_images, decode_repeats=decode_repeats)
        for name, value in given.items():
            object.__setattr__(self, name, value)
        try:
            object.__setattr__(self, "source", folded(source, **source_options))
        except SourceOptionsError as e:
            raise ProfileError(str(e)) from None
        self.check()

    def check(self) -> None:
        """Raise ``ProfileError`` naming the first bad parameter (run when the options are made)."""
        for name in ("min_pixels", "max_pixels", "cap", "seed", "decode_images", "decode_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProfileError(f"`{name}` must be an integer, got {v!r}")
        if self.tokenizer is not None and not isinstance(self.tokenizer, (str, os.PathLike)):
            raise ProfileError(f"`tokenizer` must be a path or None, got {type(self.tokenizer).__name__}")
        if not isinstance(self.source, SourceRequest):
            raise ProfileError(f"`source` must be a SourceRequest, got {type(self.source).__name__}")
        if not isinstance(self.model, str):
            raise ProfileError("`model` must be a string")
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
