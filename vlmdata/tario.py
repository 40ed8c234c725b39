"""Deterministic tar writing with exact sizes, and a streaming reader that groups members by key.

Every member header is POSIX ustar with mtime 0, uid/gid 0, no user/group names and mode 0644;
the archive ends with two zero blocks and no record padding. So a shard's size is exactly
``sum(member_size) + END_BYTES`` and the same members always give the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

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


class TarReadError(Exception):
    """A shard could not be read to its end (truncated or corrupt); ``key`` is the last key read."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def iter_raw_samples(fileobj: BinaryIO) -> Iterator[RawSample]:
    """Group consecutive tar members by key. Raises TarReadError where the archive breaks."""
    current: RawSample | None = None
    try:
        with tarfile.open(fileobj=fileobj, mode="r|") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                key, ext = split_name(m.name)
                f = tf.extractfile(m)
                data = f.read() if f is not None else b""
                if len(data) != m.size:
                    raise tarfile.ReadError(f"member {m.name} truncated ({len(data)} of {m.size} bytes)")
                if current is not None and current.key != key:
                    yield current
                    current = None
                if current is None:
                    current = RawSample(key)
                current.files[ext] = data
    except (tarfile.TarError, EOFError, OSError) as e:
        raise TarReadError(f"unreadable tar: {e}", key=current.key if current else None) from e
    if current is not None:
        yield current


def iter_shard(path: str | os.PathLike) -> Iterator[RawSample]:
    with open(path, "rb") as f:
        yield from iter_raw_samples(f)
