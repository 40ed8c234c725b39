"""Local-or-fsspec file operations: one small API for every part of vlmdata that reads or writes datasets,
so that a plain local path keeps the plain ``open``/``os`` fast path and a URL goes through fsspec.

``open``, ``cat``, ``cat_many``, ``exists``, ``isdir``, ``isfile``, ``size``, ``ls``, ``find``, ``join``,
``dirname``, ``basename``, ``makedirs``, ``rm``, ``rename``; ``put(local_file, p)`` uploads atomically,
``get(p, local_file)`` downloads to a tmp name then renames; ``write_bytes(p, data)`` is the one atomic
writer (``write_json`` on top of it). Every path goes through ``urls.local`` first (``file://`` URLs become
local paths; a URL with credentials is refused). Errors of a remote backend that are not OSErrors become
``StorageError`` with the redacted text (``_translated``).
"""

from __future__ import annotations

import builtins
import functools
import json
import os
import posixpath
import shutil
from typing import Any, Callable, TypeVar

from vlmdata.storage.files import open_input
from vlmdata.storage.redaction import redact_text
from vlmdata.storage.urls import OBJECT_STORES, StorageError, check_url, is_url, local, protocol, redact

T = TypeVar("T")


def fs_and_path(p: str, fresh: bool = False):
    """(fsspec filesystem, path inside it) for a URL; credentials from the environment only.

    ``fresh``: forget cached listings first (other processes, e.g. build workers, may have written).
    """
    check_url(p)
    try:
        from fsspec.core import url_to_fs  # an optional dependency (vlmdata[s3]), needed only for URLs
    except ImportError:
        raise StorageError(f"{redact(p)}: fsspec is needed for URLs: pip install 'vlmdata[s3]'") from None
    try:
        fs, inner = url_to_fs(p)
        if fresh:
            fs.invalidate_cache()
        return fs, inner
    except ImportError as e:
        raise StorageError(f"{redact(p)}: {e} (for s3:// URLs: pip install 'vlmdata[s3]')") from None
    except ValueError as e:
        raise StorageError(f"{redact(p)}: {e}") from None


def _translated(fn):
    """Errors of a remote backend (botocore, aiohttp, gcsfs, ...) that are not OSErrors become StorageError with
    the redacted text, so callers need to know only OSError and StorageError."""

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return fn(*args, **kw)
        except (OSError, StorageError, ValueError, TypeError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - backend exception types are open-ended
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            raise StorageError(redact_text(f"{type(e).__name__}: {first}")) from None

    return wrapper


def _full(p: str, inner: str) -> str:
    """An fsspec-internal path back to a URL with the protocol of ``p``."""
    return f"{protocol(p)}://{inner.lstrip('/')}" if is_url(p) else inner


def join(base: str, *parts: str) -> str:
    base = local(base)
    if is_url(base):
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


def dirname(p: str) -> str:
    p = local(p)
    return posixpath.dirname(p.rstrip("/")) if is_url(p) else os.path.dirname(p)


def basename(p: str) -> str:
    p = local(p)
    return posixpath.basename(p.rstrip("/")) if is_url(p) else os.path.basename(p)


@_translated
def open(p: str, mode: str = "rb", **kw):  # noqa: A001 (mirrors builtins.open)
    p = local(p)
    if not is_url(p):
        if "r" in mode and not set(mode) & set("wax+"):  # an input: regular files only, never blocking
            kw.pop("block_size", None)
            return open_input(p, mode, **kw)
        return builtins.open(p, mode, **kw)
    fs, inner = fs_and_path(p)
    return fs.open(inner, mode, **kw)


@_translated
def cat(p: str) -> bytes:
    p = local(p)
    if not is_url(p):
        with open_input(p) as f:  # regular files only, never blocking
            return f.read()
    fs, inner = fs_and_path(p)
    return fs.cat_file(inner)


@_translated
def cat_many(paths: list[str]) -> dict[str, bytes | Exception]:
    """Many small files at once (concurrent requests on async backends such as s3fs)."""
    out: dict[str, bytes | Exception] = {}
    remote = [p for p in paths if is_url(local(p))]
    for p in paths:
        if p not in remote:
            try:
                out[p] = cat(p)
            except OSError as e:
                out[p] = e
    if remote:
        fs, _ = fs_and_path(remote[0])
        inner = {fs_and_path(p)[1]: p for p in remote}
        # fsspec is untyped: with on_error="return" cat of a list is {path: bytes or the exception}
        got: dict[str, bytes | Exception] = fs.cat(list(inner), on_error="return")
        for k, v in got.items():
            out[inner.get(k, inner.get(k.lstrip("/"), k))] = v
    return out


def _query(p: str, here: Callable[[str], T], there: Callable[[Any, str], T]) -> T:
    """``here(path)`` for a local path, else ``there(fs, inner)`` on a fresh listing (other processes, e.g. build
    workers, may have written since the last look)."""
    p = local(p)
    if not is_url(p):
        return here(p)
    fs, inner = fs_and_path(p, fresh=True)
    return there(fs, inner)


@_translated
def exists(p: str) -> bool:
    return _query(p, os.path.exists, lambda fs, inner: fs.exists(inner))


@_translated
def isdir(p: str) -> bool:
    return _query(p, os.path.isdir, lambda fs, inner: fs.isdir(inner))


@_translated
def isfile(p: str) -> bool:
    return _query(p, os.path.isfile, lambda fs, inner: fs.isfile(inner))


@_translated
def size(p: str) -> int:
    return _query(p, os.path.getsize, lambda fs, inner: int(fs.size(inner)))


@_translated
def ls(p: str) -> list[str]:
    """Full paths/URLs of the direct children of a folder (empty when it does not exist)."""
    p = local(p)
    if not is_url(p):
        return sorted(os.path.join(p, n) for n in os.listdir(p)) if os.path.isdir(p) else []
    fs, inner = fs_and_path(p, fresh=True)
    try:
        return sorted(_full(p, e) for e in fs.ls(inner, detail=False) if e.rstrip("/") != inner.rstrip("/"))
    except FileNotFoundError:
        return []


@_translated
def find(p: str) -> list[str]:
    """Full paths/URLs of every file below a folder, recursively, sorted."""
    p = local(p)
    if not is_url(p):
        return sorted(os.path.join(d, f) for d, _, files in os.walk(p) for f in files)
    fs, inner = fs_and_path(p, fresh=True)
    return sorted(_full(p, e) for e in fs.find(inner))


def makedirs(p: str) -> None:
    p = local(p)
    if not is_url(p):
        os.makedirs(p, exist_ok=True)
    # object stores have no folders


@_translated
def rm(p: str, recursive: bool = False) -> None:
    """Remove a file (or a folder with ``recursive``); a missing path is not an error."""
    p = local(p)
    if not is_url(p):
        if os.path.isdir(p) and not os.path.islink(p):
            if recursive:
                shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.remove(p)
        return
    fs, inner = fs_and_path(p)
    try:
        fs.rm(inner, recursive=recursive)
    except FileNotFoundError:
        pass


@_translated
def rename(src: str, dst: str) -> None:
    src, dst = local(src), local(dst)
    if not is_url(src) and not is_url(dst):
        os.replace(src, dst)
        return
    fs, a = fs_and_path(src)
    _, b = fs_and_path(dst)
    fs.mv(a, b)


def _commit_remote(p: str, send: Callable[[Any, str], None]) -> None:
    """``send(fs, target)`` so that the URL ``p`` never exists half-written: on an object store the one upload is
    the commit point (``target`` is ``p``); elsewhere it goes to ``p + '.tmp'``, then is renamed."""
    fs, inner = fs_and_path(p)
    if protocol(p) in OBJECT_STORES:
        send(fs, inner)
    else:
        send(fs, inner + ".tmp")
        fs.mv(inner + ".tmp", inner)


@_translated
def put(local_file: str, p: str) -> None:
    """Upload a local file so that ``p`` never exists half-written.

    Object stores (s3, gs, az): one PUT or a multipart upload, whose completion is the commit point
    (the object is invisible until then; an interrupted multipart upload leaves no object).
    Other filesystems: upload to ``p + '.tmp'`` and rename. Local destinations: copy + os.replace.
    """
    p = local(p)
    if not is_url(p):
        tmp = p + ".tmp"
        shutil.copyfile(local_file, tmp)
        os.replace(tmp, p)
        return
    _commit_remote(p, lambda fs, target: fs.put_file(local_file, target))
    want = os.path.getsize(local_file)
    got = size(p)
    if got != want:
        raise OSError(f"{redact(p)}: uploaded {got} bytes, expected {want}")


@_translated
def get(p: str, local_file: str) -> None:
    """Download to ``local_file`` (via a .tmp name and a rename)."""
    p = local(p)
    tmp = local_file + ".tmp"
    if not is_url(p):
        shutil.copyfile(p, tmp)
    else:
        fs, inner = fs_and_path(p)
        fs.get_file(inner, tmp)
    os.replace(tmp, local_file)


@_translated
def write_bytes(p: str, data: bytes, fsync: bool = True) -> None:
    """Write a whole file atomically (tmp + rename locally; a single PUT on object stores): the one atomic
    writer. ``fsync=False`` skips the flush to disk (the rename still makes the file whole or absent)."""
    p = local(p)
    if not is_url(p):
        tmp = p + ".tmp"
        with builtins.open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, p)
        return
    _commit_remote(p, lambda fs, target: fs.pipe_file(target, data))


def write_json(p: str, obj, fsync: bool = True) -> None:
    write_bytes(p, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"), fsync)


def read_json(p: str):
    return json.loads(cat(p).decode("utf-8"))
