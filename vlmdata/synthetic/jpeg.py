"""Encode to a target byte size, and read the encoder settings back from real JPEG bytes.

``encode_to_target`` searches the JPEG quality (integers 5..98) for an encoded size within
``tolerance`` of the target: it starts at a given or default quality, then steps by a secant on
log(size) over quality inside a shrinking bracket, so it usually needs 1 to 3 encodes. When no
quality reaches the target it changes the content: through ``render(detail)`` when the caller
can re-render (synthetic pixels), otherwise by blurring (too big) or sharpening (too small).
PNG is lossless, so its size can only move with the content; that search is best effort.

``jpeg_info`` estimates, from real bytes, the settings a synthetic twin should use: the IJG
quality whose scaled luma table is nearest to the file's (exact for libjpeg/Pillow files),
the chroma subsampling from the SOF sampling factors, and progressive coding.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image, ImageFilter

from vlmdata.errors import OptionsError

SUBSAMPLINGS = ("4:4:4", "4:2:2", "4:2:0")
Q_MIN, Q_MAX = 5, 98
DEFAULT_QUALITY = 90


@dataclass(frozen=True)
class Encoded:
    """One search's outcome: the bytes and how they were reached."""

    data: bytes
    quality: int | None  # None for PNG
    detail: float | None  # the content detail finally used (None: content left as given)
    encodes: int
    target: int

    @property
    def ratio(self) -> float:
        return len(self.data) / self.target


def encode(
    image: Image.Image,
    fmt: str = "JPEG",
    quality: int = DEFAULT_QUALITY,
    subsampling: str = "4:2:0",
    progressive: bool = False,
) -> bytes:
    """Encode once. JPEG from an RGB, L or YCbCr image (YCbCr skips the colour conversion)."""
    buf = io.BytesIO()
    if fmt.upper() in ("JPEG", "JPG"):
        if subsampling not in SUBSAMPLINGS:
            raise OptionsError(f"`subsampling` must be one of {SUBSAMPLINGS}, got {subsampling!r}")
        image.save(buf, "JPEG", quality=int(quality), subsampling=subsampling, progressive=bool(progressive))
    elif fmt.upper() == "PNG":
        (image.convert("RGB") if image.mode == "YCbCr" else image).save(buf, "PNG", compress_level=6)
    else:
        raise OptionsError(f"`fmt` must be JPEG or PNG, got {fmt!r}")
    return buf.getvalue()


def _as_image(pixels_or_image) -> Image.Image:
    if isinstance(pixels_or_image, Image.Image):
        return pixels_or_image
    a = np.asarray(pixels_or_image)
    if a.dtype != np.uint8:
        raise OptionsError(f"pixel arrays must be uint8, got {a.dtype}")
    return Image.fromarray(a)


def _within(size: int, target: int, tolerance: float) -> bool:
    return abs(size / target - 1.0) <= tolerance


def search_quality(
    image: Image.Image,
    target_bytes: int,
    subsampling: str = "4:2:0",
    progressive: bool = False,
    tolerance: float = 0.10,
    start: int = DEFAULT_QUALITY,
    max_encodes: int = 8,
) -> tuple[bytes, int, int]:
    """(bytes, quality, encodes): the closest size tried; it stops at once within half the
    tolerance, after a second encode within the tolerance, or when neighbouring qualities straddle
    the target."""
    tried: dict[int, int] = {}
    best: tuple[float, bytes, int] | None = None
    lo, hi = Q_MIN - 1, Q_MAX + 1  # sizes at lo are below target, at hi above (open bracket)
    q = min(max(int(start), Q_MIN), Q_MAX)
    log_t = math.log(target_bytes)
    while len(tried) < max_encodes:
        data = encode(image, "JPEG", q, subsampling, progressive)
        tried[q] = len(data)
        err = abs(math.log(len(data)) - log_t)
        if best is None or err < best[0]:
            best = (err, data, q)
        # done when within half the tolerance, or within it after a second try
        if _within(len(data), target_bytes, tolerance / 2) or (
            len(tried) >= 2 and _within(len(best[1]), target_bytes, tolerance)
        ):
            break
        if len(data) < target_bytes:
            lo = max(lo, q)
        else:
            hi = min(hi, q)
        if hi - lo <= 1:
            break  # neighbouring qualities straddle the target (or a limit is reached)
        # secant on log(size) over quality from the two nearest tried points; else a typical slope
        pts = sorted(tried, key=lambda k: abs(k - q))[:2]
        slope = 0.04 + 0.01 * max(0, q - 85)
        if len(pts) == 2 and pts[0] != pts[1]:
            s = (math.log(tried[pts[0]]) - math.log(tried[pts[1]])) / (pts[0] - pts[1])
            if s > 1e-3:
                slope = s
        nq = q + round((log_t - math.log(len(data))) / slope)
        nq = min(max(nq, lo + 1), hi - 1)
        if nq in tried:  # step to the untried neighbour toward the target
            nq = q + (1 if len(data) < target_bytes else -1)
            if nq in tried or not lo < nq < hi:
                break
        q = nq
    assert best is not None
    return best[1], best[2], len(tried)


def encode_to_target(
    pixels_or_image,
    target_bytes: int,
    fmt: str = "JPEG",
    subsampling: str = "4:2:0",
    progressive: bool = False,
    tolerance: float = 0.10,
    *,
    quality: int | None = None,
    render: Callable[[float], Image.Image] | None = None,
    detail: float = 1.0,
    max_rounds: int = 4,
) -> tuple[bytes, int | None]:
    """Encode ``pixels_or_image`` (uint8 array or PIL image) to about ``target_bytes``.

    Returns ``(bytes, quality)`` (quality None for PNG). ``render`` (optional) re-renders the
    content at another ``detail`` (starting at ``detail``) when quality alone cannot reach the
    target. Best effort: the result may miss the tolerance (check ``len(bytes) / target``).
    """
    res = search_to_target(
        pixels_or_image,
        target_bytes,
        fmt,
        subsampling,
        progressive,
        tolerance,
        quality=quality,
        render=render,
        detail=detail,
        max_rounds=max_rounds,
    )
    return res.data, res.quality


def search_to_target(
    pixels_or_image,
    target_bytes: int,
    fmt: str = "JPEG",
    subsampling: str = "4:2:0",
    progressive: bool = False,
    tolerance: float = 0.10,
    *,
    quality: int | None = None,
    render: Callable[[float], Image.Image] | None = None,
    detail: float = 1.0,
    max_rounds: int = 4,
    detail_gain: float = 0.5,
) -> Encoded:
    """:func:`encode_to_target` with the whole outcome (:class:`Encoded`).

    ``detail_gain`` is the assumed d log(bytes) / d log(detail) for the first content step.
    """
    if target_bytes <= 0:
        raise OptionsError(f"`target_bytes` must be positive, got {target_bytes}")
    image = _as_image(pixels_or_image)
    is_png = fmt.upper() == "PNG"
    encodes, d, blur = 0, float(detail), 0.0
    best: Encoded | None = None
    prev: tuple[float, int] | None = None  # (log content knob, size) of the previous round
    q = quality or DEFAULT_QUALITY
    for _ in range(max_rounds):
        if is_png:
            data, qq, n = encode(image, "PNG"), None, 1
        else:
            data, qq, n = search_quality(image, target_bytes, subsampling, progressive, tolerance, start=q)
        encodes += n
        cand = Encoded(data, qq, d if render else None, encodes, target_bytes)
        if best is None or abs(math.log(cand.ratio)) < abs(math.log(best.ratio)):
            best = cand
        if _within(len(data), target_bytes, tolerance):
            break
        # change the content: log(size) ~ gain * log(detail); the gain is re-estimated by secant
        knob = math.log(d) if render else -blur
        gain = detail_gain
        if prev is not None and knob != prev[0]:
            g = (math.log(len(data)) - math.log(prev[1])) / (knob - prev[0])
            if g > 0.05:
                gain = g
        prev = (knob, len(data))
        step = (math.log(target_bytes) - math.log(len(data))) / gain
        if qq is not None:
            q = qq
        if render is not None:  # at least ~one rung of pixels' detail ladder, at most 3 octaves
            d = d * math.exp(math.copysign(min(max(abs(step), 0.18), 2.0), step))
            image = render(d)
        else:
            image, blur = _refilter(_as_image(pixels_or_image), blur, step)
            if image is None:
                break
    assert best is not None
    return best


def _refilter(original: Image.Image, blur: float, step: float) -> tuple[Image.Image | None, float]:
    """Blur (negative knob) or sharpen the original to move its size by about ``step`` (log)."""
    blur = blur - step  # knob is -blur: a positive step (need more bytes) lowers the blur
    if abs(blur) < 0.05:
        return original, 0.0
    if blur > 0:
        return original.filter(ImageFilter.GaussianBlur(min(blur, 20.0))), blur
    return original.filter(ImageFilter.UnsharpMask(radius=2, percent=int(min(-blur, 5.0) * 100), threshold=0)), blur
