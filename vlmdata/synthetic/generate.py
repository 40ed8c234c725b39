"""Profile rows -> synthetic samples (images to the byte target, text to the exact token count).

:class:`ProfileGenerator` maps sample index ``i`` to a stored profile row and builds the sample:

- Row choice (joint sampling): rows are drawn *without replacement* in epochs of ``R`` (the
  number of stored rows): epoch ``e = i // R`` is a seeded permutation of the rows. So a run of
  ``R`` samples reproduces the profile's empirical joint distribution exactly (sizes, images per
  sample, text lengths and their correlations), and longer runs repeat it; a random draw with
  replacement would add a KS distance of about ``0.9/sqrt(R)`` for nothing.
- Images: every image row becomes a :class:`RowImage` (a :class:`~vlmdata.synthetic.images.SyntheticImage`) with
  the row's width, height, format, encoded bytes (the target, within 10%), JPEG quality estimate,
  chroma subsampling and progressive mode; greyscale rows (JPEG ``gray``, PNG ``L``) become a
  :class:`GrayImage`. Other formats (WebP, GIF, ...) and rare subsamplings are substituted by
  JPEG 4:2:0 (counted in :attr:`ProfileGenerator.substitutions`).
- Text: prompt and answer token counts are split over the row's turns and written by
  :class:`~vlmdata.synthetic.text.TextMaker` to the exact count with the profile's tokenizer.
- Content seeds mix (seed, row, image, variant) where ``variant`` is the epoch modulo
  ``variants`` (``variants=0``: a fresh image every epoch; ``1``: a row always gives the same
  bytes, as a real dataset repeats its images every epoch, which lets a pool serve repeats).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlmdata.dataset.schema import FORMAT_EXT, ImageInfo, Sample
from vlmdata.errors import OptionsError
from vlmdata.profile.document import profile_sha256, sample_rows, validate_profile
from vlmdata.profile.tokens import tokenizer_for_profile
from vlmdata.synthetic import pixels
from vlmdata.synthetic.images import ImageSpec, SyntheticImage, detail_for
from vlmdata.synthetic.jpeg import DEFAULT_QUALITY, SUBSAMPLINGS, Encoded, search_to_target
from vlmdata.synthetic.text import TextMaker

GRAY_MODES = ("L", "LA", "1", "I", "I;16", "F")
CAL_QUALITY_STEP = 5  # the size model is calibrated per quality bucket (each calibration costs ~34 encodes)


def cal_quality(q: int | None) -> int:
    """The calibration quality of a JPEG quality: the nearest multiple of ``CAL_QUALITY_STEP`` (5..95)."""
    q = q or DEFAULT_QUALITY
    return int(min(95, max(5, CAL_QUALITY_STEP * round(q / CAL_QUALITY_STEP))))


@dataclass(frozen=True)
class RowImage(SyntheticImage):
    """:class:`SyntheticImage` whose first ``detail`` guess comes from the size model of the
    nearest calibrated quality bucket (so a profile with 16 distinct qualities calibrates ~4
    buckets, not 16); the quality search then starts from the row's own quality."""

    def size_model_quality(self, quality: int) -> int:
        return cal_quality(quality) if self.fmt.upper() == "JPEG" else DEFAULT_QUALITY


@dataclass(frozen=True)
class GrayImage(ImageSpec):
    """A single-channel synthetic payload (greyscale JPEG or PNG): the luma of :func:`pixels.render`. Its fields
    are its own (no ``subsampling``: its content seed is a hash of them); its checks are ``ImageSpec``'s."""

    width: int
    height: int
    target_bytes: int
    progressive: bool = False
    fmt: str = "JPEG"
    quality: int | None = None
    tolerance: float = 0.10

    def encode(self, seed: int) -> Encoded:
        w, h = self.width, self.height
        q = self.quality or DEFAULT_QUALITY
        # luma carries nearly all of a render's bytes: the colour size model is a good first guess
        qc = cal_quality(q) if self.fmt.upper() == "JPEG" else DEFAULT_QUALITY
        d = detail_for(self.target_bytes / (w * h), self.fmt, qc, "4:2:0", self.progressive)

        def render(dd: float):
            return pixels.render(w, h, seed, dd).getchannel(0)

        return search_to_target(
            render(d),
            self.target_bytes,
            self.fmt,
            "4:4:4",
            self.progressive,
            self.tolerance,
            quality=q,
            detail=d,
            render=render,
        )


def spec_for_row(row: dict) -> tuple[RowImage | GrayImage, str | None]:
    """(spec, substitution note or None) for one profile image row."""
    fmt = str(row.get("format") or "JPEG").upper()
    w, h, nbytes = int(row["width"]), int(row["height"]), max(1, int(row["bytes"]))
    q = row.get("quality")
    q = int(q) if q else None
    prog = bool(row.get("progressive"))
    mode = row.get("mode") or "RGB"
    sub = row.get("subsampling")
    note = None
    if fmt == "MPO":
        fmt = "JPEG"
    if fmt not in ("JPEG", "PNG"):
        note = f"{fmt} -> JPEG 4:2:0"
        return RowImage(w, h, nbytes, "4:2:0", False, "JPEG", q), note
    if sub == "gray" or mode in GRAY_MODES:
        return GrayImage(w, h, nbytes, prog if fmt == "JPEG" else False, fmt, q), None
    if fmt == "PNG":
        return RowImage(w, h, nbytes, "4:2:0", False, "PNG", None), None
    if sub not in SUBSAMPLINGS:
        note = f"JPEG {sub} -> 4:2:0"
        sub = "4:2:0"
    return RowImage(w, h, nbytes, sub, prog, "JPEG", q), note


def mix(*parts: int) -> int:
    """A 63-bit seed from integers (stable across runs and platforms)."""
    h = hashlib.blake2b(repr(tuple(int(p) for p in parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


def conversation(prompts: list[str], answers: list[str], n_images: int) -> list[dict]:
    """Turns of (user, assistant); the images open the first user turn; empty prompts are left out."""
    conv = []
    for t, (p, a) in enumerate(zip(prompts, answers)):
        content = [{"type": "image"} for _ in range(n_images if t == 0 else 0)]
        if p:
            content.append({"type": "text", "text": p})
        conv.append({"role": "user", "content": content})
        conv.append({"role": "assistant", "content": [{"type": "text", "text": a}]})
    return conv


class RowPicker:
    """Sample index -> stored row: seeded permutations, one per epoch (see the module docstring)."""

    def __init__(self, n_rows: int, seed: int):
        if n_rows <= 0:
            raise OptionsError("a profile with no rows: nothing to sample from")
        self.n, self.seed = n_rows, int(seed)
        self._perms: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def __call__(self, i: int) -> tuple[int, int]:
        """(row, epoch) of sample ``i``."""
        e, p = divmod(int(i), self.n)
        with self._lock:
            perm = self._perms.get(e)
            if perm is None:
                perm = np.random.default_rng([self.seed & 0xFFFFFFFF, e, 0x5EED]).permutation(self.n)
                if len(self._perms) > 4:
                    self._perms.clear()
                self._perms[e] = perm
        return int(perm[p]), e


class ProfileGenerator:
    """Builds sample ``i`` of the synthetic twin of a profile (thread-safe, deterministic)."""

    def __init__(self, profile: dict, seed: int = 0, tokenizer=None, *, variants: int = 0, sha256: str | None = None):

        validate_profile(profile)
        self.profile = profile
        self.seed = int(seed)
        self.variants = int(variants)
        if self.variants < 0:
            raise OptionsError(f"`variants` must be >= 0, got {self.variants}")
        self.rows = sample_rows(profile)
        self.sha256 = (
            sha256
            or profile.get("_sha256")
            or profile_sha256({k: v for k, v in profile.items() if not k.startswith("_")})
        )
        self.tok = tokenizer if tokenizer is not None else tokenizer_for_profile(profile)
        self.text = TextMaker(self.tok)
        self.pick = RowPicker(len(self.rows), self.seed)
        self.specs: list[list] = []
        self.substitutions: dict[str, int] = {}
        for r in self.rows:
            specs = []
            for im in r["images"]:
                spec, note = spec_for_row(im)
                if note:
                    self.substitutions[note] = self.substitutions.get(note, 0) + 1
                specs.append(spec)
            self.specs.append(specs)

    def image_items(self, i: int) -> list[tuple]:
        """``(spec, content seed)`` for the images of sample ``i``."""
        row, epoch = self.pick(i)
        variant = epoch % self.variants if self.variants else epoch
        return [(spec, mix(self.seed, row, j, variant)) for j, spec in enumerate(self.specs[row])]

    def texts(self, i: int) -> tuple[list[str], list[str]]:
        row, _ = self.pick(i)
        r = self.rows[row]
        turns = max(1, int(r["turns"]))
        ps = self.text.split(int(r["prompt_tokens"]), turns)
        ans = self.text.split(max(int(r["answer_tokens"]), turns), turns)  # an answer needs a token per turn
        prompts = [self.text.make(n, mix(self.seed, i, 1, t)) for t, n in enumerate(ps)]
        answers = [self.text.make(n, mix(self.seed, i, 2, t)) for t, n in enumerate(ans)]
        return prompts, answers

    def sample(self, i: int, images: list) -> Sample:
        """Sample ``i`` with its images already generated (bytes, in ``image_items`` order)."""
        row, _ = self.pick(i)
        prompts, answers = self.texts(i)
        infos = []
        for j, (spec, data) in enumerate(zip(self.specs[row], images)):
            fmt = spec.fmt.upper()
            infos.append(ImageInfo(f"{j}.{FORMAT_EXT[fmt]}", spec.width, spec.height, fmt, len(data)))
        return Sample(
            key=f"s{i:09d}",
            conversation=conversation(prompts, answers, len(images)),
            images=list(images),
            image_info=infos,
            source_id=f"profile-row-{row}",
            synthetic={"generator": "profile", "seed": self.seed, "profile": self.sha256, "row": row},
        )

    def describe(self) -> dict[str, Any]:
        return {
            "generator": "profile",
            "seed": self.seed,
            "profile": self.sha256,
            "rows": len(self.rows),
            "variants": self.variants,
            "substitutions": dict(sorted(self.substitutions.items())),
        }
