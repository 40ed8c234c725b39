"""The header-level check reads what Pillow reads: size, orientation and refusal are Pillow's own, on whole bytes
and on a build's Sparse (head + tail) read. The cases are a review's reproducers of the header parser's
disagreements with Pillow (orientation stored as LONG/SLONG/two values, in XMP, in a second EXIF block or after the
frame; APP segments Pillow cannot read; a PNG's eXIf after its pixel data; sizes past Pillow's own limit)."""

import io
import struct
import zlib

import pytest
from PIL import Image

from vlmdata.dataset.images import ImageProblem, NeedFullBytes, Sparse, check_image

HEAD, TAIL = 8192, 512


def _jpeg(**kw) -> bytes:
    b = io.BytesIO()
    Image.new(kw.pop("mode", "RGB"), (40, 30), "red").save(b, "JPEG", **kw)
    return b.getvalue()


def _segments(segs) -> bytes:
    return b"".join(bytes([0xFF, m]) + struct.pack(">H", len(p) + 2) + p for m, p in segs)


def _after_soi(j: bytes, segs) -> bytes:
    return j[:2] + _segments(segs) + j[2:]


def _after_sof(j: bytes, segs) -> bytes:
    k = j.index(b"\xff\xc0")
    k += 2 + struct.unpack(">H", j[k + 2 : k + 4])[0]
    return j[:k] + _segments(segs) + j[k:]


def _exif(tag_type: int, count: int, value: bytes) -> bytes:
    ifd = b"MM" + struct.pack(">HI", 42, 8) + struct.pack(">H", 1) + struct.pack(">HHI", 0x112, tag_type, count)
    return b"Exif\0\0" + ifd + value + struct.pack(">I", 0)


def _six(kind: int) -> bytes:
    return struct.pack(">HH", 6, 0) if kind in (3, 8) else struct.pack(">I", 6)


XMP6 = b"http://ns.adobe.com/xap/1.0/\x00" + b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
BASE = _jpeg()


def _frame_entry_cut(j: bytes) -> bytes:
    """The frame header one byte longer: its last component entry is cut (Pillow's open fails reading it)."""
    k = j.index(b"\xff\xc0")
    n = struct.unpack(">H", j[k + 2 : k + 4])[0]
    return j[: k + 2] + struct.pack(">H", n + 1) + j[k + 4 : k + 2 + n] + b"\x00" + j[k + 2 + n :]


JPEGS = {
    "plain": BASE,
    "frame entry cut": _frame_entry_cut(BASE),
    "progressive": _jpeg(progressive=True),
    "cmyk": _jpeg(mode="CMYK"),
    "gray": _jpeg(mode="L"),
    "short 6": _after_soi(BASE, [(0xE1, _exif(3, 1, _six(3)))]),
    "short, two values": _after_soi(BASE, [(0xE1, _exif(3, 2, struct.pack(">HH", 6, 6)))]),
    "sshort": _after_soi(BASE, [(0xE1, _exif(8, 1, _six(8)))]),
    "long": _after_soi(BASE, [(0xE1, _exif(4, 1, _six(4)))]),
    "slong": _after_soi(BASE, [(0xE1, _exif(9, 1, _six(9)))]),
    "two exif, 1 then 6": _after_soi(
        BASE, [(0xE1, _exif(3, 1, _six(3)[:0] + struct.pack(">HH", 1, 0))), (0xE1, _exif(3, 1, _six(3)))]
    ),
    "xmp 6": _after_soi(BASE, [(0xE1, XMP6)]),
    "exif after the frame": _after_sof(BASE, [(0xE1, _exif(3, 1, _six(3)))]),
    "adobe cut": _after_soi(BASE, [(0xEE, b"Adobe")]),
    "icc cut": _after_soi(BASE, [(0xE2, b"ICC_PROFILE\0")]),
    "photoshop cut": _after_soi(BASE, [(0xED, b"Photoshop 3.0\x00" + b"8BIM\x03\xed")]),
    "jfif cut": _after_soi(BASE[:2] + BASE[20:], [(0xE0, b"JFIF\0\x01")]),
    "quantization table cut after a long comment": _after_sof(BASE, [(0xFE, b"c" * 9000), (0xDB, b"\x00abc")]),
}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(before=b"", after=b"", size=(40, 30)) -> bytes:
    b = io.BytesIO()
    Image.new("RGB", size, "red").save(b, "PNG")
    p = b.getvalue()
    idat, iend = p.index(b"IDAT") - 4, p.index(b"IEND") - 4
    return p[:idat] + before + p[idat:iend] + after + p[iend:]


EXIF6 = _exif(3, 1, _six(3))[6:]
PNGS = {
    "plain": _png(),
    "exif before the pixels": _png(before=_chunk(b"eXIf", EXIF6)),
    "exif after the pixels": _png(after=_chunk(b"eXIf", EXIF6)),
    "xmp": _png(before=_chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + XMP6[29:])),
}


def _answer(data: bytes, verify: str):
    try:
        c = check_image(data, verify=verify)
    except ImageProblem as e:
        return ("refused", e.reason)
    return (c.format, c.width, c.height, c.orientation)


def _pillow(data: bytes):
    """What the Pillow path says (``verify="full"``): the reference."""
    return _answer(data, "full")


def _header(data: bytes):
    return _answer(data, "header")


def _sparse(data: bytes) -> bytes:
    return Sparse.of(data[:HEAD], data[-TAIL:], len(data)) if len(data) > HEAD + TAIL else data


@pytest.mark.parametrize("name", [*JPEGS, *(f"png {n}" for n in PNGS)])
def test_the_header_check_says_what_pillow_says(name):
    data = PNGS[name[4:]] if name.startswith("png ") else JPEGS[name]
    want = _pillow(data)
    assert _header(data) == want
    try:
        got = _header(_sparse(data))
    except NeedFullBytes:  # the caller reads the whole file: the answer above
        return
    assert got == want


def test_the_orientations_pillow_reads_are_read():
    for name in ("short 6", "short, two values", "sshort", "long", "slong", "xmp 6", "exif after the frame"):
        assert _header(JPEGS[name])[3] == 6, name
    assert _header(JPEGS["two exif, 1 then 6"])[3] == 1  # Pillow reads the first EXIF block
    assert _header(PNGS["exif after the pixels"])[3] == 6 and _header(PNGS["xmp"])[3] == 6


def test_segments_pillow_cannot_read_are_refused_and_a_cut_beyond_the_head_is_read_whole():
    for name in ("adobe cut", "icc cut", "photoshop cut", "jfif cut", "frame entry cut"):
        assert _header(JPEGS[name])[0] == "refused", name
    late = JPEGS["quantization table cut after a long comment"]
    assert _header(late)[0] == "refused"
    with pytest.raises(NeedFullBytes):  # its head ends before the scan: not decided from the head
        check_image(_sparse(late), verify="header")


def test_a_raised_pixel_limit_holds_past_pillows_own():
    ihdr = struct.pack(">IIBBBBB", 20000, 10000, 8, 0, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"\0" * 100))
        + _chunk(b"IEND", b"")
    )
    c = check_image(png, max_image_pixels=300_000_000)
    assert (c.format, c.width, c.height) == ("PNG", 20000, 10000)
    with pytest.raises(ImageProblem, match="exceeds the limit"):
        check_image(png)


def test_mutated_headers_get_pillows_answer_both_ways(monkeypatch):
    """Random byte changes in plain JPEG and PNG headers (the paths that do not ask Pillow): the header check
    accepts exactly what the Pillow path accepts, with the same size and orientation, and refuses what it refuses
    (a review found a frame header whose component entries Pillow cannot read accepted)."""
    import random

    from vlmdata.dataset import images

    def outcome(d: bytes, fast: bool):
        if not fast:
            monkeypatch.setattr(images, "_fast", lambda x: None)
        try:
            return _header(d)
        finally:
            monkeypatch.undo()

    def enc(fmt, size=(40, 30), **kw):
        b = io.BytesIO()
        Image.new("RGB", size, (200, 30, 30)).save(b, fmt, **kw)
        return b.getvalue()

    seeds = [enc("JPEG"), enc("JPEG", progressive=True), enc("PNG"), enc("PNG", size=(16, 9)), enc("PNG", dpi=(72, 72))]
    rng = random.Random(11)
    for _ in range(2000):
        d = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            d[rng.randrange(2, min(len(d), 300))] = rng.randrange(256)
        got, want = outcome(bytes(d), True), outcome(bytes(d), False)
        assert got[0] == want[0] == "refused" or got == want, bytes(d[:120]).hex()
