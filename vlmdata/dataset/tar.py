"""Deterministic tar writing with exact sizes, and the one strict tar reader (streaming, grouped by key).

Every member header is POSIX ustar with mtime 0, uid/gid 0, no user/group names and mode 0644;
the archive ends with two zero blocks and no record padding. So a shard's size is exactly
``sum(member_size) + END_BYTES`` and the same members always give the same bytes.

Reading: ``parse_header`` checks one header block (checksum, octal or base-256 size); ``iter_members``
reads members sequentially and raises ``TarReadError`` at the first corrupt header, short member,
missing end-of-archive block or non-zero data after it (Python's ``tarfile`` silently stops at a
corrupt header after the first, which hides lost samples); ``iter_raw_samples`` groups members by
key and never merges two samples that share a key. The loader's seek-based index
(``vlmdata.dataset.reader.scan_shard``) uses the same ``parse_header``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, Iterator

from vlmdata.errors import VlmdataError
from vlmdata.storage.files import open_input

if TYPE_CHECKING:
    from _typeshed import SupportsRead  # anything with read(n) -> bytes (files, hashing wrappers)

BLOCK = 512
END_BYTES = 2 * BLOCK
_ZEROS = bytes(BLOCK)


def member_size(data_len: int) -> int:
    """Bytes one member takes in the archive: header plus data padded to whole blocks."""
    return BLOCK + -(-data_len // BLOCK) * BLOCK


_HEAD = b"0000644\0" + b"0000000\0" * 2  # mode, uid, gid
_MTIME = b"00000000000\0"
_TAIL = b"0" + b"\0" * 100 + b"ustar\x0000" + b"\0" * (64 + 16 + 167)  # type .. pad
_SPACE_SUM = sum(b" " * 8)


def header(name: str, size: int) -> bytes:
    """A ustar header, byte-identical to ``tarfile``'s for mtime 0, mode 0644, uid/gid 0, no names."""
    raw = name.encode("utf-8")
    if len(raw) > 100:
        raise ValueError(f"tar member name too long for ustar: {name!r}")
    if size >= 8**11:
        raise ValueError(f"tar member too large for ustar: {name!r} ({size} bytes)")
    pre = raw.ljust(100, b"\0") + _HEAD + b"%011o\0" % size + _MTIME
    chksum = sum(pre) + _SPACE_SUM + sum(_TAIL)
    return pre + b"%06o\0 " % chksum + _TAIL


class TarWriter:
    """Writes members to a file object, hashing as it goes."""

    def __init__(self, fileobj: BinaryIO):
        self.f = fileobj
        self.sha = hashlib.sha256()
        self.size = 0

    def _write(self, b: bytes) -> None:
        self.f.write(b)
        self.sha.update(b)
        self.size += len(b)

    def add(self, name: str, data: bytes) -> None:
        # one buffer per member: a memcpy is cheaper than two more write and hash calls
        self._write(b"".join((header(name, len(data)), data, _ZEROS[: -len(data) % BLOCK])))

    def close(self) -> str:
        """Write the end-of-archive blocks; return the sha256 hex digest of the whole archive."""
        self._write(b"\0" * END_BYTES)
        return self.sha.hexdigest()


def split_name(name: str) -> tuple[str, str]:
    """WebDataset convention: key is the path up to the first dot of the basename."""
    d, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext


@dataclass
class RawSample:
    """All members of one key: ``files`` maps the suffix after ``KEY.`` to the bytes."""

    key: str
    files: dict[str, bytes] = field(default_factory=dict)


class TarReadError(VlmdataError):
    """A shard could not be read to its end (truncated or corrupt); ``key`` is the key of the sample being
    read when it broke (None before the first member), ``offset`` the byte where it broke."""

    def __init__(self, message: str, key: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.key = key
        self.offset = offset


class BadHeader(VlmdataError, ValueError):
    pass


def _number(field: bytes) -> int:
    """A ustar numeric field: octal text, or GNU base-256 (high bit set)."""
    if field[:1] and field[0] & 0x80:
        if field[0] == 0xFF:
            raise BadHeader("negative size")
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise BadHeader(f"numeric field {text[:12]!r} is not octal") from None


def parse_header(hdr: bytes) -> tuple[str, int, bytes]:
    """(name, data size, type flag) of a 512-byte tar header block; BadHeader when its checksum or fields
    are wrong. The name is the ustar prefix/name (decoded as UTF-8 with surrogate escapes)."""
    if len(hdr) != BLOCK:
        raise BadHeader("short header block")
    want = _number(hdr[148:156])
    unsigned = sum(hdr[:148]) + 256 + sum(hdr[156:])
    signed = unsigned - 2 * sum(b for b in hdr[:148] + hdr[156:] if b > 127)
    if want not in (unsigned, signed):
        raise BadHeader("header checksum mismatch")
    size = _number(hdr[124:136])
    name = hdr[:100].split(b"\0", 1)[0]
    if hdr[257:262] == b"ustar":
        prefix = hdr[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape"), size, hdr[156:157]


def pax_path(data: bytes) -> str | None:
    """The ``path`` record of a pax extended header, if any."""
    pos = 0
    found = None
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            break
        try:
            n = int(data[pos:sp])
        except ValueError:
            break
        if n <= 0:
            break
        rec = data[sp + 1 : pos + n - 1]
        k, _, v = rec.partition(b"=")
        if k == b"path":
            found = v.decode("utf-8", "surrogateescape")
        pos += n
    return found


def _read_exact(f: SupportsRead[bytes], n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        b = f.read(min(n - got, 1 << 24))
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def iter_members(fileobj: SupportsRead[bytes]) -> Iterator[tuple[str, bytes, bytes]]:
    """(name, data, type flag) of every member, read sequentially with the strict header parser. GNU long
    names and pax paths are applied. Raises TarReadError (with the byte offset) for a corrupt header, a
    member cut short, a missing end-of-archive block or non-zero bytes after it."""
    pos = 0
    long_name: str | None = None
    while True:
        hdr = _read_exact(fileobj, BLOCK)
        if len(hdr) < BLOCK:
            raise TarReadError(
                "empty file"
                if pos == 0 and not hdr
                else f"archive ends at byte {pos + len(hdr)} without end-of-archive blocks",
                offset=pos,
            )
        if hdr == _ZEROS:
            while rest := fileobj.read(1 << 20):
                if rest.strip(b"\0"):
                    raise TarReadError(f"non-zero data after the end-of-archive block at byte {pos}", offset=pos)
            return
        try:
            name, size, typ = parse_header(hdr)
        except BadHeader as e:
            raise TarReadError(f"corrupt tar header at byte {pos}: {e}", offset=pos) from None
        data = _read_exact(fileobj, size)
        if len(data) < size:
            raise TarReadError(f"member {name!r} at byte {pos} truncated ({len(data)} of {size} bytes)", offset=pos)
        pad = -size % BLOCK
        if pad and len(_read_exact(fileobj, pad)) < pad:
            raise TarReadError(f"archive ends inside the padding of member {name!r}", offset=pos)
        pos += BLOCK + size + pad
        if typ == b"L":
            long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        if typ == b"x":
            long_name = pax_path(data) or long_name
            continue
        if typ == b"g":
            continue
        yield (long_name or name), data, typ
        long_name = None


def iter_raw_samples(fileobj: SupportsRead[bytes], links: list | None = None) -> Iterator[RawSample]:
    """Group consecutive regular-file members by key. A member whose suffix the current sample already has
    starts a new sample with the same key (a duplicated key is two samples, never a silent merge).
    Other members are not sample files; ``links``, when given, collects ``(name, type flag)`` of each that is not
    a directory (a symbolic or hard link, a device, a FIFO: vlmdata never writes one, and a shard of them read as
    0 samples, "OK"). Raises TarReadError where the archive breaks (``key``: the sample being read then)."""
    current: RawSample | None = None
    try:
        for name, data, typ in iter_members(fileobj):
            if typ not in (b"0", b"\0", b"7"):
                if links is not None and typ != b"5":
                    links.append((name, typ))
                continue
            key, ext = split_name(name)
            if current is not None and (current.key != key or ext in current.files):
                yield current
                current = None
            if current is None:
                current = RawSample(key)
            current.files[ext] = data
    except TarReadError as e:
        raise TarReadError(f"unreadable tar: {e}", key=current.key if current else None, offset=e.offset) from None
    except OSError as e:
        raise TarReadError(f"unreadable tar: {e}", key=current.key if current else None) from None
    if current is not None:
        yield current


def iter_shard(path: str | os.PathLike) -> Iterator[RawSample]:
    with open_input(os.fspath(path)) as f:  # a FIFO or device is refused, never read (it would block)
        yield from iter_raw_samples(f)
