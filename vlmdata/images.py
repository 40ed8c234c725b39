"""Image probing and checks on encoded bytes: format, size, decompression bombs, truncation.

The build keeps original bytes. ``probe`` reads the header only; ``verify="full"`` also decodes.
Truncation of JPEG and PNG is caught without decoding by checking the end-of-image marker.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image

from .schema import FORMAT_EXT

DEFAULT_MAX_IMAGE_PIXELS = 178_956_970  # Pillow's own bomb limit (2x its warning threshold)


class ImageProblem(Exception):
    """An image cannot go into a shard; ``reason`` is one of the accounting reasons."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_PNG_SIG = b"\x89PNG\r\n\x1a\n"


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the first SOF marker, or None when the marker walk fails."""
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        seg = int.from_bytes(data[i + 2:i + 4], "big")
        if marker in _SOF:
            if i + 9 > n:
                return None
            h = int.from_bytes(data[i + 5:i + 7], "big")
            w = int.from_bytes(data[i + 7:i + 9], "big")
            return (w, h) if w and h else None
        if seg < 2:
            return None
        i += 2 + seg
    return None


def fast_header(data: bytes) -> tuple[str, int, int] | None:
    """Format and size of baseline JPEG and PNG without Pillow; None means: ask Pillow."""
    if data[:3] == b"\xff\xd8\xff":
        size = _jpeg_size(data)
        return ("JPEG", *size) if size else None
    if data[:8] == _PNG_SIG and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        return ("PNG", w, h) if w and h else None
    return None


def probe(data: bytes, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, verify: str = "header") -> tuple[str, int, int]:
    """Return (format, width, height) of encoded image bytes or raise ImageProblem.

    verify: "header" (parse header, check end marker) or "full" (decode every pixel too).
    JPEG and PNG headers are parsed directly (fast); other formats, and anything the fast parser
    does not understand, go through Pillow.
    """
    if not data:
        raise ImageProblem("undecodable_image", "empty file")
    fast = fast_header(data) if verify == "header" else None
    if fast is not None:
        fmt, w, h = fast
        _check_size_and_end(data, fmt, w, h, max_image_pixels)
        return fast
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            fmt, (w, h) = img.format, img.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageProblem("too_large", f"decompression bomb: {e}") from None
    except Image.UnidentifiedImageError:
        raise ImageProblem("undecodable_image", "not a recognised image format") from None
    except Exception as e:  # PIL raises many types for garbage input
        raise ImageProblem("undecodable_image", f"not a readable image ({type(e).__name__}: {e})") from None
    if fmt not in FORMAT_EXT:
        raise ImageProblem("unsupported_format", f"image format {fmt} is not supported")
    _check_size_and_end(data, fmt, w, h, max_image_pixels)
    if verify == "full":
        try:
            img.load()
        except Exception as e:
            raise ImageProblem("undecodable_image", f"decode failed ({type(e).__name__}: {e})") from None
    return fmt, w, h


def _check_size_and_end(data: bytes, fmt: str, w: int, h: int, max_image_pixels: int) -> None:
    if w * h > max_image_pixels:
        raise ImageProblem("too_large", f"{w}x{h} = {w * h} pixels exceeds the limit of {max_image_pixels}")
    if w < 1 or h < 1:
        raise ImageProblem("undecodable_image", f"degenerate size {w}x{h}")
    if fmt in ("JPEG", "MPO") and not data.rstrip(b"\0").endswith(b"\xff\xd9"):
        raise ImageProblem("undecodable_image", "truncated JPEG (no end-of-image marker)")
    if fmt == "PNG" and b"IEND" not in data[-16:]:
        raise ImageProblem("undecodable_image", "truncated PNG (no IEND chunk)")


def reencode(data: bytes, max_pixels: int, quality: int = 95) -> tuple[bytes, str, int, int]:
    """Downscale an image above ``max_pixels`` (aspect kept) and re-encode it.

    JPEG stays JPEG (same chroma subsampling where Pillow can keep it); other formats become PNG,
    or JPEG when they have no alpha. Returns (bytes, format, width, height).
    """
    img = Image.open(io.BytesIO(data))
    w, h = img.size
    scale = (max_pixels / (w * h)) ** 0.5
    nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
    while nw * nh > max_pixels:
        nw, nh = max(1, nw - 1), max(1, round((nw - 1) * h / w))
    src_fmt = img.format
    if src_fmt in ("JPEG", "MPO"):
        img.draft("RGB", (nw, nh))
    img = img.resize((nw, nh), Image.Resampling.LANCZOS) if img.size != (nw, nh) else img
    out = io.BytesIO()
    if src_fmt in ("JPEG", "MPO") or img.mode in ("RGB", "L"):
        img = img.convert("RGB") if img.mode not in ("RGB", "L") else img
        img.save(out, "JPEG", quality=quality, optimize=False)
        fmt = "JPEG"
    else:
        img.save(out, "PNG")
        fmt = "PNG"
    return out.getvalue(), fmt, nw, nh
