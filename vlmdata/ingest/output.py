"""The output folder's rules and its lock: what a build, ``write_dataset`` or the twin may write over.

- ``overwrite`` replaces only a vlmdata dataset (a folder with a vlmdata ``manifest.json``,
  ``.nv-meta/vlmdata_loader.py`` or an interrupted build's state) and only what vlmdata wrote there
  (``owned_entries``); it never replaces the source, the image root or a folder containing either
  (``protected``). ``check_out_dir`` returns what ``overwrite`` will delete; the caller deletes it (``clear``)
  only once the new source has been opened and its first record read.
- ``lock(folder)``: a ``.vlmdata.lock`` file (``flock``) stops a second writer (build or synth) on the same folder.
- ``check_staging`` (a remote OUT's local staging folder, which the build empties and removes at the end): never
  the source, the image root, a folder containing either or one inside either, and an existing one holds only
  what a build writes there (``--staging my_data`` used to delete ``my_data`` with everything in it).
- ``resume`` needs an existing folder (``precheck_out``; the interrupted build's state is ``ingest.resume``'s).
- ``output_error`` turns an OSError of the output (a full disk, a read-only folder) into a ``BuildError`` that
  names the path and says ``resume`` finishes the build once the problem is fixed.

Paths may be local or fsspec URLs (a remote OUT is locked through its local staging folder).
"""

from __future__ import annotations

import contextlib
import fcntl  # POSIX only (builds fork their workers anyway)
import json
import os
import re
import time

from vlmdata import storage
from vlmdata.dataset.manifest import MANIFEST_NAME, MANIFEST_SCHEMA
from vlmdata.dataset.schema import safe_label
from vlmdata.ingest.options import BuildError

STATE_DIR = ".vlmdata-build"  # an unfinished build's state: options.json + one record per written shard
LOCK_NAME = ".vlmdata.lock"

_OWNED = re.compile(
    r"^(manifest\.json(\.tmp)?|\.nv-meta|" + re.escape(STATE_DIR) + r"|[A-Za-z0-9][A-Za-z0-9_.-]*-\d{6}"
    r"\.tar(\.idx|\.tmp|\.idx\.tmp)?)$"
)


def _real(p: str) -> str:
    return os.path.realpath(os.path.abspath(p))


def _contains(outer: str, inner: str) -> bool:
    """Whether ``inner`` is ``outer`` or lies below it (local real paths, or URLs compared as text)."""
    if storage.is_url(outer) or storage.is_url(inner):
        if not (storage.is_url(outer) and storage.is_url(inner)):
            return False
        a, b = storage.redact(outer).rstrip("/"), storage.redact(inner).rstrip("/")
        return b == a or b.startswith(a + "/")
    a, b = _real(outer), _real(inner)
    return b == a or b.startswith(a.rstrip(os.sep) + os.sep)


def _check_not_source(out: str, protected: list[str], folder: str = "output folder") -> None:
    for p in protected:
        if p and _contains(out, p):
            what = "the source" if p == protected[0] else "the image root"
            raise BuildError(
                f"{'staging folder ' if folder != 'output folder' else ''}{storage.redact(out)}: is {what} or a "
                f"folder containing it ({storage.redact(p)}); choose another {folder}"
            )


def _dataset_marker(out: str) -> str | None:
    """What marks ``out`` as a vlmdata dataset folder (a description), or None."""
    j = storage.join
    try:
        if storage.exists(j(out, MANIFEST_NAME)):
            m = json.loads(storage.cat(j(out, MANIFEST_NAME)).decode("utf-8"))
            if isinstance(m, dict) and m.get("schema") == MANIFEST_SCHEMA:
                return MANIFEST_NAME
        if storage.exists(j(out, STATE_DIR, "options.json")):
            return f"{STATE_DIR}/options.json"
        if storage.exists(j(out, ".nv-meta", "vlmdata_loader.py")):
            return ".nv-meta/vlmdata_loader.py"
    except (OSError, ValueError, RecursionError, storage.StorageError):
        return None
    return None


def check_staging(staging: str, protected: list[str]) -> None:
    """Before the lock: the staging folder of a remote OUT may be emptied and removed (module docstring)."""
    _check_not_source(staging, protected, "staging folder")
    for p in protected:
        if p and not storage.is_url(p) and os.path.isdir(p) and _contains(p, staging):
            raise BuildError(f"staging folder {staging}: lies inside the source ({p}); choose another folder")
    if not os.path.lexists(staging):
        return
    if not os.path.isdir(staging):
        raise BuildError(f"staging folder {staging}: exists and is not a directory")
    names = os.listdir(staging)
    foreign = sorted(n for n in names if n != LOCK_NAME and not _OWNED.match(n))
    finished = MANIFEST_NAME in names and STATE_DIR not in names  # a dataset, not an interrupted build's staging
    if foreign:
        more = ", ..." if len(foreign) > 1 else ""
        problem = f"holds files vlmdata did not write ({safe_label(foreign[0])}{more})"
    elif finished:
        problem = "is a vlmdata dataset"
    else:
        return
    raise BuildError(
        f"staging folder {staging}: {problem}; the build empties and removes its staging folder: give a new or empty folder"
    )


def owned_entries(out: str) -> list[str]:
    """Paths in ``out`` that a vlmdata build or synth writes (and only those)."""
    return [p for p in storage.ls(out) if _OWNED.match(storage.basename(p))]


def precheck_out(out: str, resume: bool, protected: list[str]) -> None:
    """The output-folder rules that need no lock (checked before the lock file is created in OUT)."""
    _check_not_source(out, protected)
    if storage.is_url(out):
        if storage.isfile(out):
            raise BuildError(f"{storage.redact(out)}: exists and is not a folder")
        return
    if os.path.lexists(out) and not os.path.isdir(out):
        raise BuildError(f"{out}: exists and is not a directory")
    if resume and not os.path.isdir(out):
        raise BuildError(f"{out}: does not exist, so there is no interrupted build to resume")


def check_out_dir(out: str, resume: bool, overwrite: bool, protected: list[str] | None = None) -> list[str]:
    """Apply the output-folder rules (module docstring) before anything is written; return the paths that
    ``overwrite`` will delete once the source has been read (``clear``)."""
    precheck_out(out, resume, protected or [])
    shown = storage.redact(out)
    children = storage.ls(out)
    children = [c for c in children if storage.basename(c) != LOCK_NAME]
    if not children or resume:
        return []
    if not overwrite:
        raise BuildError(
            f"{shown}: exists and is not empty (`overwrite` replaces a vlmdata dataset, "
            "`resume` finishes an interrupted build)"
        )
    if _dataset_marker(out) is None:
        raise BuildError(
            f"{shown}: not a vlmdata dataset (no vlmdata {MANIFEST_NAME}); `overwrite` only replaces a "
            "dataset folder: empty it or choose another output folder"
        )
    return owned_entries(out)


def clear(paths: list[str]) -> None:
    for p in paths:
        storage.rm(p, recursive=True)


@contextlib.contextmanager
def lock(folder: str):
    """An exclusive ``flock`` on ``folder/.vlmdata.lock`` for the duration of a build or synth; BuildError when
    another process holds it. The lock file is removed (while still locked) at the end, so a dataset keeps
    no trace of it; a process that locked a file just removed retries on the new one (inode check), so
    two writers never both hold the lock. The kernel releases the lock when a process dies, however."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
    fd = _take(folder, path)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)


def _take(folder: str, path: str) -> int:
    """The locked file descriptor of ``path`` (the current lock file, not one its holder just removed)."""
    deadline = time.monotonic() + 10
    for _ in range(10_000):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            if not _alive(holder) and time.monotonic() < deadline:
                time.sleep(0.05)  # its build died: the worker processes it forked die with it in a moment
                continue
            raise BuildError(
                f"{folder}: another vlmdata build or synth is writing here (pid {holder}); wait for it "
                "or choose another output folder"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # locked a lock file its holder had just removed: take the current one
    raise BuildError(f"{folder}: cannot take the lock {LOCK_NAME}")


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def remove_if_left_empty(folder: str | None):
    """When the block fails, remove ``folder`` (one this call created) if nothing but the lock is in it."""
    try:
        yield
    except BaseException:
        if folder and os.path.isdir(folder) and set(os.listdir(folder)) <= {LOCK_NAME}:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, LOCK_NAME))
                os.rmdir(folder)
        raise


def output_error(e: OSError, out: str) -> BuildError:
    """The BuildError for an OSError while writing ``out``: the path, the OS's reason, and (once a build has
    started) that ``resume`` continues it."""
    where = safe_label(storage.redact(e.filename)) if isinstance(e.filename, str) else storage.redact(out)
    why = e.strerror or str(e)
    started = not storage.is_url(out) and os.path.isfile(os.path.join(out, STATE_DIR, "options.json"))
    return BuildError(
        f"{where}: {why}"
        + (
            " (the build stopped; the shards written so far are kept: fix the problem and run again with `resume`)"
            if started
            else ""
        )
    )
