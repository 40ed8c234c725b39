"""One image as a profile sees it: its row (size, format, mode, bytes, JPEG settings, visual tokens; header
only, no decode) and its full-decode time on this machine (thread CPU time, the fastest of a few decodes).
"""

from __future__ import annotations

import io
import os
import platform
import time

import numpy as np
import PIL
from PIL import Image, features

from vlmdata.dataset.images import jpeg_info
from vlmdata.qwen.spec import visual_tokens as qwen_visual_tokens


def image_row(data: bytes, spec, min_pixels: int, max_pixels: int) -> dict:
    """The profile row of one encoded image (header only, no decode). ValueError if unreadable."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h, fmt, mode = im.width, im.height, im.format or "?", im.mode
    except Exception as e:  # PIL raises many types for bad bytes
        raise ValueError(f"unreadable image: {e}") from None
    row = {
        "width": w,
        "height": h,
        "format": fmt,
        "mode": mode,
        "bytes": len(data),
        "quality": None,
        "subsampling": None,
        "progressive": False,
    }
    if fmt in ("JPEG", "MPO"):
        info = (
            jpeg_info(data) if fmt == "JPEG" else {"quality_estimate": None, "subsampling": None, "progressive": False}
        )
        row.update(quality=info["quality_estimate"], subsampling=info["subsampling"], progressive=info["progressive"])
    try:
        row["visual_tokens"] = qwen_visual_tokens(h, w, spec, min_pixels, max_pixels)
    except ValueError as e:  # aspect ratio above 200
        raise ValueError(f"image {w}x{h}: {e}") from None
    return row


def decoder_name() -> str:
    """The decoder that decode times are measured with (Pillow, and libjpeg-turbo when Pillow uses it)."""
    turbo = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    return f"PIL {PIL.__version__}" + (f" (libjpeg-turbo {turbo})" if turbo else "")


def decode_ms(data: bytes, repeats: int = 5) -> float:
    """Fastest of ``repeats`` full decodes (``Image.open`` + ``load``), thread-CPU milliseconds.
    The minimum is the estimate least disturbed by other work on a shared machine."""
    ts = []
    for _ in range(repeats):
        t = time.thread_time_ns()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
        ts.append(time.thread_time_ns() - t)
    return float(min(ts)) / 1e6


def _try_decode_ms(data: bytes, repeats: int) -> float | None:
    try:
        return decode_ms(data, repeats)
    except Exception:  # noqa: BLE001 - an image whose pixels do not decode is counted, not timed
        return None


def measure_decode(images: list[bytes], repeats: int = 5) -> dict:
    """Decode-time record of a list of encoded images: per-image ms, median, p10/p90, decoder.
    Images whose pixels fail to decode are left out and counted in ``failed``."""
    for data in images[:3]:  # warm up allocator and code paths
        _try_decode_ms(data, 1)
    timed = [_try_decode_ms(d, repeats) for d in images]
    ms = [t for t in timed if t is not None]
    rec = {
        "decoder": decoder_name(),
        "operation": "PIL Image.open + load (full decode, native mode)",
        "clock": "thread CPU time",
        "per_image": f"fastest of {repeats} decodes",
        "repeats": repeats,
        "images": len(ms),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
        "ms": [round(x, 4) for x in ms],
    }
    if len(ms) != len(timed):
        rec["failed"] = len(timed) - len(ms)
    if ms:
        a = np.array(ms)
        rec.update(
            median_ms=round(float(np.median(a)), 4),
            p10_ms=round(float(np.percentile(a, 10)), 4),
            p90_ms=round(float(np.percentile(a, 90)), 4),
            mean_ms=round(float(a.mean()), 4),
        )
    return rec
