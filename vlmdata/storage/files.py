"""Local files read as inputs and folders checked as outputs, safely.

- ``read_regular(path, max_bytes)``: the one way vlmdata reads an input file: only regular files (a FIFO, a
  device such as ``/dev/zero``, a socket or a directory is refused without blocking), at most ``max_bytes``;
  ``open_regular`` streams one, ``read_regular_parts`` reads only its head and tail; ``open_input`` opens any
  input (a shard, an index) with the same rule and no cap, and is what ``storage.open`` does for local reads.
- ``check_writable(path, folder)``: an output can be written (its folder created, a probe file written and
  removed) before any work starts, so a bad output path fails in a second, not after an hour of measuring.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
from typing import Any

from vlmdata.storage.urls import StorageError, is_url, local

# never block on a FIFO or a terminal, never leak the descriptor into a child
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """An input path is not a regular file (FIFO, device, socket, directory)."""


class FileTooLarge(OSError):
    """An input file is larger than the cap for its kind."""


class NotWritable(StorageError):
    """An output path cannot be written (a file where a folder is needed, /proc, read-only, no space)."""


def _checked_fd(path: str, max_bytes: int, what: str) -> tuple[int, os.stat_result]:
    """(descriptor, fstat) of a local regular file of at most ``max_bytes``: opened with O_NONBLOCK and checked
    with fstat before any read (NotRegularFile / FileTooLarge; the descriptor is closed when refused)."""
    path = os.fspath(path)
    if "\0" in path:
        raise NotRegularFile(errno.EINVAL, "path contains a NUL byte")
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{what} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"{what} is {st.st_size} bytes, more than the limit of {max_bytes}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_whole(fd: int, st: os.stat_result, max_bytes: int, what: str) -> bytes:
    with builtins.open(fd, "rb", closefd=False) as f:
        data = f.read(min(max_bytes, st.st_size) + 1)
    if len(data) > max_bytes:  # grew while reading
        raise FileTooLarge(errno.EFBIG, f"{what} is more than the limit of {max_bytes} bytes")
    return data


def read_regular(path: str, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a local regular file of at most ``max_bytes`` (``what`` names it in messages).

    A FIFO, character or block device (``/dev/zero``), socket or directory raises NotRegularFile without
    blocking (the file is opened with O_NONBLOCK and checked with fstat before any read); a larger file
    raises FileTooLarge; a path with a NUL byte raises NotRegularFile. Other OSErrors propagate
    (FileNotFoundError, PermissionError, ...).
    """
    fd, st = _checked_fd(path, max_bytes, what)
    try:
        return _read_whole(fd, st, max_bytes, what)
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_regular(path: str, max_bytes: int, what: str = "file"):
    """A binary file object of a local regular file of at most ``max_bytes``, for streaming: the same checks as
    ``read_regular`` (FIFO, device, socket, directory refused without blocking; NotRegularFile / FileTooLarge),
    then the file is read from the one descriptor that was checked. Yields ``(file, size)``."""
    fd, st = _checked_fd(path, max_bytes, what)
    with builtins.open(fd, "rb") as f:
        yield f, st.st_size


def open_input(path: str, mode: str = "rb", **kw) -> Any:
    """A local input file opened for reading with the regular-file rule and no size cap: a FIFO, device, socket
    or directory raises NotRegularFile without blocking (a FIFO shard blocked validate, inspect, profile and the
    loader forever). Returns the file object (``mode`` "rb" or "r", ``kw`` as ``open``'s)."""
    fd, _ = _checked_fd(path, 1 << 62, os.fspath(path))
    try:
        return builtins.open(fd, mode, **kw)
    except BaseException:
        os.close(fd)
        raise


def read_regular_parts(
    path: str, max_bytes: int, head: int, tail: int, what: str = "file"
) -> "bytes | tuple[bytes, bytes, int]":
    """Like ``read_regular``, but a file larger than ``head + tail`` bytes comes back as (its first ``head``
    bytes, its last ``tail`` bytes, its size) without reading the middle."""
    fd, st = _checked_fd(path, max_bytes, what)
    try:
        if st.st_size <= head + tail:
            return _read_whole(fd, st, max_bytes, what)
        return os.pread(fd, head, 0), os.pread(fd, tail, st.st_size - tail), st.st_size
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    return (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "not a regular file"
    )


def check_writable(path: str, folder: bool = False, what: str = "output") -> None:
    """Raise NotWritable unless ``path`` (a file, or with ``folder`` a folder) can be written: its folder is
    created if missing and a probe file is written there and removed. Remote URLs are not probed.

    Args:
        path: the output file or folder.
        folder: ``path`` is a folder that files are written into.
        what: how messages name the output.
    """
    path = local(os.fspath(path))
    if is_url(path):
        return
    if "\0" in path or not path:
        raise NotWritable(f"{what}: not a usable path: {path!r}")
    where = path if folder else (os.path.dirname(os.path.abspath(path)) or ".")
    if folder and os.path.exists(path) and not os.path.isdir(path):
        raise NotWritable(f"{what} {path} is a file, not a folder")
    if not folder and os.path.isdir(path):
        raise NotWritable(f"{what} {path} is a folder, not a file")
    name = os.path.basename(path.rstrip(os.sep))
    if not folder and len(os.fsencode(name)) > 255:  # NAME_MAX: the probe in its folder would pass, the write fail
        raise NotWritable(f"{what} {path[:200]}...: cannot write there (File name too long)")
    try:
        os.makedirs(where, exist_ok=True)
        probe = os.path.join(where, f".vlmdata-write-probe-{os.getpid()}")
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, b"\0")
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as e:
        raise NotWritable(f"{what} {path}: cannot write there ({e.strerror or e})") from None
