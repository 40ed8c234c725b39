"""Image validity: the one rule that build, validate, profile and the loader share, on encoded bytes.

An image is **valid** when

1. Pillow identifies it as a format a shard stores (JPEG, PNG, WEBP, GIF, BMP, TIFF; MPO counts as
   JPEG) -> else ``unsupported_format`` or ``undecodable_image``;
2. ``1 <= width, height`` and ``width * height <= max_image_pixels`` (decompression bombs; default
   Pillow's own limit) -> else ``too_large``;
3. its aspect ratio ``max(w, h) / min(w, h)`` is at most ``MAX_ASPECT_RATIO`` (200: the Qwen-VL
   ``smart_resize`` of the HF processor and of qwen-vl-utils raises beyond it, so no Qwen-VL pipeline
   can train on it) -> else ``bad_aspect_ratio``;
4. it is complete: a JPEG has an end-of-image marker after its first start-of-scan (bytes after that
   marker, e.g. camera trailers or NUL padding, are allowed: decoders ignore them), a PNG has its
   ``IEND`` chunk, a WebP holds its whole RIFF payload -> else ``undecodable_image`` ("truncated ...");
5. at level ``"full"`` only: Pillow decodes every pixel without error -> else ``undecodable_image``.

``check_image(data, verify=...)`` applies the rule and returns an ``ImageCheck`` (format, size, EXIF
orientation) or raises ``ImageProblem(reason, detail)``; ``probe`` is the same returning a tuple. The
build checks at its ``verify`` level (default ``"header"``: rules 1-4, no pixel decode), ``validate``
at the level the dataset was built with unless asked for more, the profile and the loader decode (the
loader reports a failure of rule 5 as ``undecodable_image`` and a failure of rules 1-4 under the same
reason names as the build).

At level ``"header"`` a JPEG's or PNG's bytes before its pixel data are handed to Pillow's open (``_fast``), or,
for a plain header (only segments or chunks Pillow takes nothing from but the size, each in a form it accepts:
``_PLAIN``, ``_PLAIN_PNG``), read without it: an image Pillow refuses at open, as every reader would, is refused
here, never written to a shard, and its size and orientation are Pillow's. Not seen at this level: a PNG's eXIf
chunk after its pixel data in the middle of a ``Sparse`` read (a whole read finds it).

``data`` may be a ``Sparse`` read (the head of a file and its tail): then rule 4 is decided from the
tail when it can be, and ``NeedFullBytes`` is raised when it cannot (the caller reads the whole file
and checks again), so a header-level check gives the same answer as one on the whole file.

EXIF orientation is reported (``ImageCheck.orientation``, 1-8) because readers disagree on it (Hugging
Face ``datasets`` applies it, Pillow, Energon and Bridge's path do not); ``upright`` re-encodes an image
with its orientation applied so that every reader sees the same pixels (see docs/RELIABILITY.md).
"""

from __future__ import annotations

import io
import math
import warnings
import zlib
from dataclasses import dataclass

from PIL import Image, ImageOps, PngImagePlugin

from vlmdata.dataset.jpeg_facts import jpeg_info, quality_from_table  # noqa: F401  # re-exported: their home is jpeg_facts
from vlmdata.dataset.schema import FORMAT_EXT
from vlmdata.errors import OptionsError, VlmdataError

DEFAULT_MAX_IMAGE_PIXELS = 178_956_970  # Pillow's own bomb limit (2x its warning threshold)
MAX_ASPECT_RATIO = 200  # Qwen-VL smart_resize (HF and qwen-vl-utils) raises above this
TAIL_BYTES = 512  # how much of a file's end a header-level read takes (the whole file is read when it cannot decide)


class ImageProblem(VlmdataError):
    """An image cannot go into a shard; ``reason`` is one of the accounting reasons."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class NeedFullBytes(Exception):
    """A ``Sparse`` read cannot decide completeness (or the header lies beyond the head): read it all."""


class Sparse(bytes):
    """The head of a file followed by its last bytes (``tail`` of them); ``size`` is the file's size.

    Offsets below ``head`` are file offsets; byte ``i >= head`` of this object is file offset
    ``size - (len(self) - i)``."""

    size: int
    head: int

    @classmethod
    def of(cls, head: bytes, tail: bytes, size: int) -> "Sparse":
        out = cls(head + tail)
        out.size, out.head = size, len(head)
        return out


@dataclass(frozen=True)
class ImageCheck:
    format: str  # PIL format name; MPO reported as JPEG
    width: int
    height: int
    orientation: int = 1  # EXIF orientation (1 = as stored)


_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_EXIF_ORIENTATION = 0x0112


# A "plain" JPEG header holds only these segments, each in a form Pillow's open accepts as it is (checked by
# ``_plain_segment``): what Pillow would read from it is its frame size and orientation 1 (no APP1: no EXIF, no
# XMP), so ``_fast`` reads them without Pillow; any other header goes to Pillow's open.
_PLAIN_SOF = frozenset((0xC0, 0xC1, 0xC2))  # baseline, extended, progressive
_PLAIN = _PLAIN_SOF | {0xC4, 0xDB, 0xDD, 0xDA, 0xFE, 0xE0}  # DHT, DQT, DRI, SOS, COM, APP0 (JFIF only)


def _plain_segment(marker: int, seg: bytes) -> bool:
    """Whether Pillow's open reads this segment without failing and without taking anything from it but the
    frame's size (``_PLAIN``)."""
    if marker == 0xE0:
        return seg[:5] == b"JFIF\0" and len(seg) >= 14
    if marker == 0xDB:  # quantization tables: Pillow refuses one cut short
        while seg:
            n = 1 + 64 * (1 if seg[0] < 16 else 2)
            if len(seg) < n:
                return False
            seg = seg[n:]
    if marker in _PLAIN_SOF:  # 8-bit, 1, 3 or 4 components, whole 3-byte component entries: what Pillow reads
        return len(seg) >= 6 and seg[0] == 8 and seg[5] in (1, 3, 4) and (len(seg) - 6) % 3 == 0
    return True


def _jpeg_walk(data: bytes, limit: int) -> tuple[int, int, int, bool] | None:
    """(width, height, end of the start-of-scan segment, plain) from the marker segments before the entropy-coded
    data, within ``data[:limit]`` (plain: ``_PLAIN``, one frame); None when the walk fails or leaves the limit
    before the scan."""
    i, n = 2, min(len(data), limit)
    size, plain = None, True
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            plain = False
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            i += 2
            plain = False
            continue
        seg = int.from_bytes(data[i + 2 : i + 4], "big")
        if seg < 2 or i + 2 + seg > n:
            return None
        if marker in _SOF:
            plain = plain and size is None
            if size is None and seg >= 7:
                size = (int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big"))
        plain = plain and marker in _PLAIN and _plain_segment(marker, data[i + 4 : i + 2 + seg])
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            return (*size, i + 2 + seg, plain) if size else None
        i += 2 + seg
    return None


def _fast(data: bytes) -> tuple[str, int, int, int, int] | None:
    """(format, width, height, orientation, position after which the end marker must lie) from the header bytes
    alone, or None (a ``Sparse`` read then needs the whole file; whole bytes go the Pillow path).

    Pillow itself opens the bytes before the pixel data (a JPEG's segments up to its start of scan, a PNG's chunks
    up to its first IDAT), so what it refuses at open is refused here, and the orientation is the one Pillow reads
    (EXIF, a PNG's raw profile, XMP); a plain JPEG header (``_PLAIN``: what Pillow reads of it is its size) and an
    image past Pillow's own pixel limit (``max_image_pixels`` raised above it) are sized from their header,
    orientation 1. A PNG's eXIf chunk after its pixel data sends whole bytes to the Pillow path; a ``Sparse`` read
    looks for one in its tail only."""
    limit = data.head if isinstance(data, Sparse) else len(data)
    if data[:3] == b"\xff\xd8\xff":
        walk = _jpeg_walk(data, limit)
        if walk is None:
            return None
        w, h, end, plain = walk
        if (plain and w and h) or _past_pillow_limit(w, h):
            return ("JPEG", w, h, 1, end - 1)
        img = _pillow_open(data[:end] if isinstance(data, Sparse) else data)
        if img.format not in ("JPEG", "MPO"):
            return None
        return ("JPEG", *img.size, _orientation(img), end - 1)
    if data[:8] == _PNG_SIG and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        if _past_pillow_limit(w, h):
            return ("PNG", w, h, 1, 8)
        end = _png_header_end(data, limit)
        if end is None:  # the chunks before the pixel data leave the read
            return None
        # an eXIf chunk after the pixel data (a Sparse read: in the rest of its head or its tail): Pillow reads it
        # by decoding the image, the Pillow path
        if data.find(b"eXIf", end) >= 0:
            return None
        if w and h and _plain_png(data, end):
            return ("PNG", w, h, 1, 8)
        img = _pillow_open(data[:end])
        # the base class's getexif reads what open put in info (eXIf, raw profile, XMP) without decoding pixels
        return ("PNG", *img.size, _orientation(img, Image.Image.getexif), 8)
    return None


# A "plain" PNG header: before its pixel data only these chunks (name -> the least length Pillow reads without
# failing), every CRC right and IHDR's mode one Pillow opens: what Pillow reads of it is its size, orientation 1
_PLAIN_PNG = {b"IHDR": 13, b"PLTE": 0, b"pHYs": 9, b"sRGB": 1, b"gAMA": 4}
# the (bit depth, colour type) pairs Pillow opens: its private table (a Pillow without it: no header is plain)
_PNG_MODES = frozenset(getattr(PngImagePlugin, "_MODES", {}))


def _plain_png(data: bytes, end: int) -> bool:
    """Whether the chunks before the first IDAT (which starts at ``end - 8``) are plain (``_PLAIN_PNG``)."""
    i = 8
    while i + 8 < end:
        n, kind = int.from_bytes(data[i : i + 4], "big"), data[i + 4 : i + 8]
        body = data[i + 8 : i + 8 + n]
        least = _PLAIN_PNG.get(kind)
        if least is None or n < least or zlib.crc32(kind + body) != int.from_bytes(data[i + 8 + n : i + 12 + n], "big"):
            return False
        if kind == b"IHDR" and (i != 8 or (body[8], body[9]) not in _PNG_MODES or body[11] != 0):
            return False
        i += 12 + n
    return True


def _past_pillow_limit(w: int, h: int) -> bool:
    """Whether Pillow's open would refuse ``w`` x ``h`` as a decompression bomb (twice ``MAX_IMAGE_PIXELS``)."""
    limit = Image.MAX_IMAGE_PIXELS
    return limit is not None and w * h > 2 * limit


def _png_header_end(data: bytes, limit: int) -> int | None:
    """Offset just past the first IDAT chunk's length and type (all Pillow's open reads), or None when the chunk
    walk leaves ``data[:limit]`` first."""
    i = 8
    while i + 8 <= limit:
        if data[i + 4 : i + 8] == b"IDAT":
            return i + 8
        i += 12 + int.from_bytes(data[i : i + 4], "big")
    return None


def _pillow_open(data: bytes) -> Image.Image:
    """``Image.open`` with its failures as ImageProblem (rules 1 and 2 as Pillow applies them)."""
    try:
        with warnings.catch_warnings():
            # the pixel limit is max_image_pixels (rule 2, checked by the caller), not Pillow's warning threshold,
            # so that a header read and a Pillow read of the same image agree
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            # Pillow's open reads a JPEG's EXIF for its DPI: a broken EXIF block is not a broken image (its
            # orientation reads as 1, ``_orientation``), and its warning is noise on every build and validate
            warnings.filterwarnings("ignore", "Corrupt EXIF data", UserWarning)
            return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        raise ImageProblem("too_large", f"decompression bomb: {e}") from None
    except Image.UnidentifiedImageError:
        raise ImageProblem("undecodable_image", "not a recognised image format") from None
    except Exception as e:  # noqa: BLE001 - PIL raises many types for garbage input
        raise ImageProblem("undecodable_image", f"not a readable image ({type(e).__name__}: {e})") from None


def _orientation(img: Image.Image, getexif=None) -> int:
    """EXIF orientation as Pillow reads it (1 when absent, broken or out of range); ``getexif``: the method to call
    (default the image's own)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Corrupt EXIF data": a broken EXIF block is not a broken image
            exif = getexif(img) if getexif is not None else img.getexif()
            o = int(exif.get(_EXIF_ORIENTATION, 1) or 1)
    except Exception:  # noqa: BLE001
        return 1
    return o if 1 <= o <= 8 else 1


def _find_after(data: bytes, needle: bytes, after: int) -> bool | None:
    """Whether ``needle`` occurs at a file offset > ``after``; None when a Sparse read cannot tell."""
    if not isinstance(data, Sparse):
        return data.rfind(needle, after + 1) >= 0  # from the end: where an end marker is, no scan of the pixels
    if data.find(needle, after + 1, data.head) >= 0:
        return True
    tail_start = data.size - (len(data) - data.head)  # file offset of the first tail byte
    j = data.find(needle, data.head)
    while j >= 0:
        if tail_start + (j - data.head) > after:
            return True
        j = data.find(needle, j + 1)
    raise NeedFullBytes()


def _check_complete(data: bytes, fmt: str, after: int) -> None:
    if fmt in ("JPEG", "MPO"):
        if not _find_after(data, b"\xff\xd9", after):
            raise ImageProblem("undecodable_image", "truncated JPEG (no end-of-image marker after the scan data)")
    elif fmt == "PNG":
        if not _find_after(data, b"\0\0\0\0IEND", max(after, 8)):
            raise ImageProblem("undecodable_image", "truncated PNG (no IEND chunk)")
    elif fmt == "WEBP" and data[:4] == b"RIFF":
        need = int.from_bytes(data[4:8], "little") + 8
        have = data.size if isinstance(data, Sparse) else len(data)
        if need > have:
            raise ImageProblem("undecodable_image", f"truncated WebP ({have} of {need} bytes)")


def check_dimensions(w: int, h: int, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> None:
    """Rules 2 and 3 on a width and height: ImageProblem when they break them."""
    if w < 1 or h < 1:
        raise ImageProblem("undecodable_image", f"degenerate size {w}x{h}")
    if w * h > max_image_pixels:
        raise ImageProblem("too_large", f"{w}x{h} = {w * h} pixels exceeds the limit of {max_image_pixels}")
    if max(w, h) / min(w, h) > MAX_ASPECT_RATIO:
        raise ImageProblem(
            "bad_aspect_ratio",
            f"{w}x{h}: aspect ratio {max(w, h) / min(w, h):.0f} is above "
            f"{MAX_ASPECT_RATIO} (Qwen-VL processors reject it)",
        )


def require_storable(w: int, h: int, what: str) -> None:
    """``OptionsError`` unless a ``w`` x ``h`` image passes rules 2 and 3 at the default pixel limit (the images
    a generator is asked to make: ``what`` names them in the message)."""
    try:
        check_dimensions(w, h)
    except ImageProblem:
        raise OptionsError(
            f"{what} {w}x{h}: at most {DEFAULT_MAX_IMAGE_PIXELS:,} pixels and an aspect ratio of "
            f"{MAX_ASPECT_RATIO} (the image validity rule of vlmdata build)"
        ) from None


def check_image(data: bytes, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, verify: str = "header") -> ImageCheck:
    """Apply the validity rule (module docstring) at level ``verify``.

    Args:
        data: the encoded image (all of it, or a ``Sparse`` head-and-tail read).
        max_image_pixels: rule 2's limit.
        verify: "header" (rules 1-4) or "full" (1-5).

    Returns:
        ImageCheck(format, width, height, orientation). Raises ImageProblem(reason, detail), or NeedFullBytes
        for a ``Sparse`` read that cannot be decided.
    """
    if verify not in ("header", "full"):
        raise OptionsError(f"`verify` must be 'header' or 'full', not {verify!r}")
    if not data:
        raise ImageProblem("undecodable_image", "empty file")
    fast = _fast(data) if verify == "header" else None
    if fast is not None:
        fmt, w, h, orientation, after = fast
        check_dimensions(w, h, max_image_pixels)
        _check_complete(data, fmt, after)
        return ImageCheck(fmt, w, h, orientation)
    if isinstance(data, Sparse):
        raise NeedFullBytes()
    img = _pillow_open(data)
    fmt, (w, h) = img.format, img.size
    if fmt not in FORMAT_EXT:
        raise ImageProblem("unsupported_format", f"image format {fmt} is not supported")
    check_dimensions(w, h, max_image_pixels)
    after = 0
    if fmt in ("JPEG", "MPO"):
        walk = _jpeg_walk(data, len(data))
        after = walk[2] - 1 if walk else 0
    _check_complete(data, fmt, after)
    orientation = _orientation(img)
    if verify == "full":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                img.load()
        except Exception as e:  # noqa: BLE001
            raise ImageProblem("undecodable_image", f"decode failed ({type(e).__name__}: {e})") from None
    return ImageCheck("JPEG" if fmt == "MPO" else fmt, w, h, orientation)


def probe(
    data: bytes, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, verify: str = "header"
) -> tuple[str, int, int]:
    """(format, width, height) of encoded image bytes under the validity rule, or ImageProblem.

    verify: "header" (rules 1-4) or "full" (also decode every pixel). MPO is reported as JPEG.
    """
    c = check_image(data, max_image_pixels=max_image_pixels, verify=verify)
    return c.format, c.width, c.height


def _fit(w: int, h: int, max_pixels: int) -> tuple[int, int]:
    """The largest (w', h') with the aspect ratio of (w, h) (to within one pixel), both >= 1 and
    w' * h' <= max_pixels."""
    scale = math.sqrt(max_pixels / (w * h))
    nw, nh = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
    while nw * nh > max_pixels:  # rounding up to 1 on a thin side: shorten the long side
        if nw >= nh:
            nw = max(1, nw - 1)
        else:
            nh = max(1, nh - 1)
    return nw, nh


def _encode(img: Image.Image, src_fmt: str | None, quality: int) -> tuple[bytes, str]:
    out = io.BytesIO()
    if src_fmt in ("JPEG", "MPO") or img.mode in ("RGB", "L"):
        img = img.convert("RGB") if img.mode not in ("RGB", "L") else img
        img.save(out, "JPEG", quality=quality, optimize=False)
        return out.getvalue(), "JPEG"
    img.save(out, "PNG")
    return out.getvalue(), "PNG"


def reencode(data: bytes, max_pixels: int, quality: int = 95) -> tuple[bytes, str, int, int]:
    """Downscale an image above ``max_pixels`` (aspect ratio kept, no side below 1 pixel) and re-encode it,
    with its EXIF orientation applied (the result carries none, so every reader sees the same pixels).

    JPEG stays JPEG; other formats become PNG, or JPEG when they have no alpha.
    Returns (bytes, format, width, height).
    """
    if max_pixels < 1:
        raise OptionsError(f"`max_pixels` must be at least 1, got {max_pixels}")
    img = Image.open(io.BytesIO(data))
    src_fmt = img.format
    img = ImageOps.exif_transpose(img) or img
    w, h = img.size
    nw, nh = _fit(w, h, max_pixels) if w * h > max_pixels else (w, h)
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.Resampling.LANCZOS)
    out, fmt = _encode(img, src_fmt, quality)
    return out, fmt, nw, nh


def upright(data: bytes, quality: int = 95) -> tuple[bytes, str, int, int]:
    """The image with its EXIF orientation applied, re-encoded (JPEG stays JPEG at ``quality``; other
    formats as ``reencode``). Returns (bytes, format, width, height)."""
    img = Image.open(io.BytesIO(data))
    src_fmt = img.format
    img = ImageOps.exif_transpose(img) or img
    out, fmt = _encode(img, src_fmt, quality)
    return out, fmt, img.width, img.height
