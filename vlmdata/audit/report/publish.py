"""A report set written as a whole: ``publish(out_dir, files)`` (``write_report`` and ``audit compare -o``).

Under the output folder's lock (``.vlmdata.lock``, the file builds and synths lock: ``ingest.output.LOCK_NAME``),
every file is first written to a temporary name beside its target (``.report.json.tmp-<pid>``) and flushed;
only when all of them are written are they renamed into place, one ``os.replace`` each (a rename cannot fail on
a full disk). So two runs writing the same folder never mix their files (the second waits for the first, at
most ``WAIT_S``), a full disk leaves the previous set whole and raises ``AuditError`` naming the file that
could not be written, and an interrupted run leaves at most temporary files, which are vlmdata's own
(``is_leftover``): the next ``publish`` removes them.
"""

from __future__ import annotations

import contextlib
import fcntl  # POSIX only, as the build's lock
import os
import re
import time

from vlmdata.audit.sources.registry import AuditError
from vlmdata.ingest.output import LOCK_NAME

__all__ = ["publish", "is_leftover", "WAIT_S"]

WAIT_S = 120.0  # how long a second writer of the same folder waits for the first
_LEFTOVER = re.compile(r"^\.report\.(json|md|html)\.tmp-\d+$")


def is_leftover(name: str) -> bool:
    """Whether ``name`` is a temporary report file an interrupted ``publish`` left (vlmdata's own)."""
    return bool(_LEFTOVER.match(name))


def publish(out_dir: str, files: dict[str, bytes]) -> dict[str, str]:
    """Write ``files`` (name -> content) into ``out_dir`` as one set (module docstring).

    Args:
        out_dir: the folder (created when missing).
        files: file names (``report.json``, ...) and their contents.

    Returns:
        name -> the path written.

    Raises:
        AuditError: a file could not be written (the message names it and the reason), or another process
            held the folder's lock for more than ``WAIT_S``.
    """
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise AuditError(f"`out` {out_dir}: cannot be created ({e.strerror or e})") from None
    with _locked(out_dir):
        for name in os.listdir(out_dir):
            if is_leftover(name):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(out_dir, name))
        temps: dict[str, str] = {}
        try:
            for name, data in files.items():
                temps[name] = tmp = os.path.join(out_dir, f".{name}.tmp-{os.getpid()}")
                _write(tmp, data, os.path.join(out_dir, name))
            for name, tmp in temps.items():
                os.replace(tmp, os.path.join(out_dir, name))
        finally:
            for tmp in temps.values():
                with contextlib.suppress(OSError):
                    os.remove(tmp)
    return {name: os.path.join(out_dir, name) for name in files}


def _write(tmp: str, data: bytes, final: str) -> None:
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise AuditError(
            f"{final}: cannot be written ({e.strerror or e}); the previous report files there are unchanged"
        ) from None


@contextlib.contextmanager
def _locked(folder: str):
    """An exclusive ``flock`` on ``folder/.vlmdata.lock``, waiting up to ``WAIT_S`` for another holder; the lock
    file is removed (still locked) at the end, and a lock taken on a file its holder just removed is retaken."""
    path = os.path.join(folder, LOCK_NAME)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            raise AuditError(f"`out` {folder}: cannot be written ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                raise AuditError(
                    f"`out` {folder}: another vlmdata process has been writing there for {WAIT_S:g} s; wait for it or "
                    "choose another folder"
                ) from None
            time.sleep(0.05)
            continue
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)
