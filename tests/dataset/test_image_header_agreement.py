"""The header-level image check (no pixel decode) refuses every image Pillow refuses at open.

Before: the JPEG/PNG fast path read sizes without Pillow and passed a 12-bit JPEG, a PNG whose header CRC
was wrong, or a PNG with a compressed text / ICC chunk over Pillow's cap; the build wrote them, validate
passed them, and every reader (the loader, webdataset, Energon) failed on them later."""

import io
import random
import struct
import warnings
import zlib

import pytest
from PIL import Image

import vlmdata.dataset.images as images
from vlmdata.dataset.images import ImageProblem, Sparse, check_image
from vlmdata.ingest import BuildOptions, build


def _encode(fmt: str, size=(64, 48), **kw) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (120, 30, 200)).save(buf, fmt, **kw)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _sof(jpeg: bytes | bytearray) -> int:
    return jpeg.find(b"\xff\xc0")


def _twelve_bit() -> bytes:
    d = bytearray(_encode("JPEG"))
    d[_sof(d) + 4] = 12  # sample precision
    return bytes(d)


def _two_components() -> bytes:
    d = bytearray(_encode("JPEG"))
    d[_sof(d) + 9] = 2  # number of components
    return bytes(d)


def _reserved_marker() -> bytes:
    d = _encode("JPEG")
    return d[:2] + b"\xff\x02\x00\x04ab" + d[2:]  # a reserved marker Pillow does not know


def _short_dqt() -> bytes:
    d = _encode("JPEG")
    return d[:2] + b"\xff\xdb\x00\x06\x00abc" + d[2:]  # a quantization table cut to 3 of its 64 values


def _png_bad_ihdr_crc() -> bytes:
    d = bytearray(_encode("PNG"))
    d[29] ^= 1  # last byte of IHDR's CRC
    return bytes(d)


def _png_with(chunk: bytes) -> bytes:
    d = _encode("PNG")
    return d[:33] + chunk + d[33:]  # after the signature and IHDR


def _ztxt_bomb() -> bytes:
    return _png_with(_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"A" * 20_000_000, 9)))


def _iccp_bomb() -> bytes:
    return _png_with(_chunk(b"iCCP", b"icc\0\0" + zlib.compress(bytes(20_000_000), 9)))


def _png_bad_mode() -> bytes:
    d = _encode("PNG")
    ihdr = struct.pack(">IIBBBBB", 64, 48, 7, 2, 0, 0, 0)  # bit depth 7 is no PNG mode
    return d[:8] + _chunk(b"IHDR", ihdr) + d[33:]


REFUSED = {
    "jpeg_12_bit": _twelve_bit,
    "jpeg_2_components": _two_components,
    "jpeg_reserved_marker": _reserved_marker,
    "jpeg_short_dqt": _short_dqt,
    "png_bad_ihdr_crc": _png_bad_ihdr_crc,
    "png_ztxt_bomb": _ztxt_bomb,
    "png_iccp_bomb": _iccp_bomb,
    "png_bad_mode": _png_bad_mode,
}


def _pillow_opens(data: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Image.open(io.BytesIO(data))
    except Exception:  # noqa: BLE001
        return False
    return True


def _sparse(data: bytes) -> Sparse:
    return Sparse.of(data[:8192], data[-512:], len(data))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_header_check_refuses_what_pillow_cannot_open(name):
    data = REFUSED[name]()
    assert not _pillow_opens(data)
    for read in (data, _sparse(data)):
        with pytest.raises(ImageProblem) as e:
            try:
                check_image(read)
            except images.NeedFullBytes:
                check_image(data)
        assert e.value.reason == "undecodable_image"


def _outcome(data: bytes, fast: bool, monkeypatch) -> tuple:
    if not fast:
        monkeypatch.setattr(images, "_fast", lambda d: None)
    try:
        c = check_image(data)
        return ("ok", c.format, c.width, c.height, c.orientation)
    except ImageProblem as e:
        return (e.reason,)
    finally:
        monkeypatch.undo()


def test_header_fast_path_agrees_with_pillow_on_mutated_headers(monkeypatch):
    """Random byte changes in the headers of a JPEG (with EXIF orientation) and a PNG: whenever the fast path
    accepts an image, the Pillow path accepts it too, with the same size and orientation."""
    exif = Image.Exif()
    exif[0x0112] = 6
    seeds = [_encode("JPEG"), _encode("JPEG", exif=exif.tobytes()), _encode("PNG"), _encode("PNG", size=(16, 9))]
    rng = random.Random(7)
    for _ in range(1500):
        d = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            d[rng.randrange(2, min(len(d), 260))] = rng.randrange(256)
        fast = _outcome(bytes(d), True, monkeypatch)
        if fast[0] == "ok":
            assert _outcome(bytes(d), False, monkeypatch) == fast, bytes(d).hex()


def test_build_skips_what_no_reader_opens(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2):
        (src / f"good{i}.jpg").write_bytes(_encode("JPEG"))
        (src / f"good{i}.txt").write_text("a good one")
    for name, ext in (("jpeg_12_bit", "jpg"), ("png_bad_ihdr_crc", "png"), ("png_ztxt_bomb", "png")):
        (src / f"{name}.{ext}").write_bytes(REFUSED[name]())
        (src / f"{name}.txt").write_text("a bad one")
    m = build(str(src), str(tmp_path / "out"), BuildOptions(workers=1))
    acc = m["accounting"]
    assert (acc["written"], acc["skipped_by_reason"]) == (2, {"undecodable_image": 3})


def test_a_broken_exif_block_is_checked_without_a_warning():
    """Pillow's open warns 'Corrupt EXIF data' on a JPEG whose EXIF block is cut (it reads the DPI from it):
    the image is valid, its orientation 1, and build/validate print no Pillow warning for it."""
    import io
    import warnings

    from PIL import Image

    from vlmdata.dataset.images import check_image

    buf = io.BytesIO()
    Image.new("RGB", (64, 32)).save(buf, "JPEG", exif=b"Exif\0\0MM\0*\0\0\0\x08\xff\xff" + b"\x01" * 20)
    for verify in ("header", "full"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            c = check_image(buf.getvalue(), verify=verify)
        assert (c.format, c.width, c.height, c.orientation) == ("JPEG", 64, 32, 1)
        assert [str(w.message) for w in seen] == []
