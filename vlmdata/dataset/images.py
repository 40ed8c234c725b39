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

At level ``"header"`` JPEG and PNG headers are read without Pillow where Pillow would read them the same way
(a frame it opens, markers and tables it accepts; a PNG's chunks before its pixel data are handed to Pillow
itself): an image every reader would refuse at open is refused here, never written to a shard.

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
from dataclasses import dataclass
from typing import Literal

from PIL import Image, ImageOps
from PIL.JpegImagePlugin import MARKER as _PIL_JPEG_MARKERS

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


def _exif_orientation(app1: bytes) -> int:
    """Orientation tag of an APP1 ``Exif\\0\\0`` payload (1 when absent or unreadable)."""
    if not app1.startswith(b"Exif\0\0") or len(app1) < 14:
        return 1
    t = app1[6:]
    orders: dict[bytes, Literal["little", "big"]] = {b"II": "little", b"MM": "big"}
    order = orders.get(t[:2])
    if order is None or int.from_bytes(t[2:4], order) != 42:  # not a TIFF header: Pillow reads no EXIF
        return 1
    ifd = int.from_bytes(t[4:8], order)
    if ifd + 2 > len(t):
        return 1
    n = int.from_bytes(t[ifd : ifd + 2], order)
    for k in range(min(n, 512)):
        e = ifd + 2 + 12 * k
        if e + 12 > len(t):
            break
        if int.from_bytes(t[e : e + 2], order) == _EXIF_ORIENTATION:
            kind, count = int.from_bytes(t[e + 2 : e + 4], order), int.from_bytes(t[e + 4 : e + 8], order)
            if kind not in (3, 4) or count != 1:  # not one SHORT or LONG: Pillow reads no orientation from it
                return 1
            v = int.from_bytes(t[e + 8 : e + (10 if kind == 3 else 12)], order)
            return v if 1 <= v <= 8 else 1
    return 1


def _jpeg_walk(data: bytes, limit: int) -> tuple[int, int, int, int] | None:
    """(width, height, orientation, position of the first SOS or of the end of the walk) from the markers
    before the entropy-coded data, within ``data[:limit]``; None when the walk fails or leaves the limit
    before the frame header."""
    i, n = 2, min(len(data), limit)
    size = None
    orientation = 1
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if 0xFF00 | marker not in _PIL_JPEG_MARKERS:  # Pillow refuses it ("no marker found"): let Pillow say so
            return None
        if marker == 0xD8 or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        seg = int.from_bytes(data[i + 2 : i + 4], "big")
        if seg < 2 or (i + 2 + seg <= n and not _pillow_reads_segment(marker, data[i + 4 : i + 2 + seg])):
            return None
        if marker == 0xE1 and size is None and i + 2 + seg <= n:
            o = _exif_orientation(data[i + 4 : i + 2 + seg])
            orientation = o if orientation == 1 else orientation
        if marker in _SOF:
            if size is not None or i + 10 > n or seg < 8 or data[i + 4] != 8 or data[i + 9] not in (1, 3, 4):
                return None  # a second frame, cut, or one Pillow cannot open (12-bit, odd components): Pillow decides
            h = int.from_bytes(data[i + 5 : i + 7], "big")
            w = int.from_bytes(data[i + 7 : i + 9], "big")
            if not (w and h):
                return None
            size = (w, h)
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            return (*size, orientation, i) if size else None
        i += 2 + seg
    return (*size, orientation, i) if size else None


def _fast(data: bytes) -> tuple[str, int, int, int, int] | None:
    """(format, width, height, orientation, position after which the end marker must lie) or None."""
    limit = data.head if isinstance(data, Sparse) else len(data)
    if data[:3] == b"\xff\xd8\xff":
        walk = _jpeg_walk(data, limit)
        return ("JPEG", *walk) if walk else None
    if data[:8] == _PNG_SIG and data[12:16] == b"IHDR" and len(data) >= 24:
        end = _png_header_end(data, limit)
        if end is None:  # the chunks before the pixel data leave the read: Pillow on the whole file
            return None
        # Pillow opens a PNG by reading every chunk before the first IDAT (CRCs, IHDR's mode, compressed text
        # and ICC profiles under its size cap, EXIF): that part is small, so Pillow itself decides rule 1 on it
        img = _pillow_open(data[:end])
        # an eXIf chunk before the pixel data is in info (getexif would decode the pixels to look after them)
        return ("PNG", *img.size, _orientation(img) if "exif" in img.info else 1, 8)
    return None


def _png_header_end(data: bytes, limit: int) -> int | None:
    """Offset just past the first IDAT chunk's length and type (all Pillow's open reads), or None when the chunk
    walk leaves ``data[:limit]`` first."""
    i = 8
    while i + 8 <= limit:
        if data[i + 4 : i + 8] == b"IDAT":
            return i + 8
        i += 12 + int.from_bytes(data[i : i + 4], "big")
    return None


def _pillow_reads_segment(marker: int, seg: bytes) -> bool:
    """False for a JPEG segment Pillow's open refuses (a quantization table cut short, a JFIF header too short
    for its version and density)."""
    if marker == 0xDB:
        while seg:
            n = 1 + 64 * (1 if seg[0] < 16 else 2)
            if len(seg) < n:
                return False
            seg = seg[n:]
    elif marker == 0xE0 and seg.startswith(b"JFIF"):
        return len(seg) >= 7
    return True


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


def _orientation(img: Image.Image) -> int:
    """EXIF orientation as Pillow reads it (1 when absent, broken or out of range)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Corrupt EXIF data": a broken EXIF block is not a broken image
            o = int(img.getexif().get(_EXIF_ORIENTATION, 1) or 1)
    except Exception:  # noqa: BLE001
        return 1
    return o if 1 <= o <= 8 else 1


def _find_after(data: bytes, needle: bytes, after: int) -> bool | None:
    """Whether ``needle`` occurs at a file offset > ``after``; None when a Sparse read cannot tell."""
    if not isinstance(data, Sparse):
        return data.find(needle, after + 1) >= 0
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
        after = walk[3] if walk else 0
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
