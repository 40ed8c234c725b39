"""Paths that may be local or fsspec URLs (``s3://bucket/prefix``, ``file:///abs/path``, ``gs://...``).

One small API for every part of vlmdata that reads or writes datasets (build, validate, and later
profile and the loaders), so that a plain local path keeps the plain ``open``/``os`` fast path and a
URL goes through fsspec:

- ``is_url(p)`` / ``local(p)``: ``file://`` URLs are turned into plain local paths, so only truly
  remote URLs go through fsspec.
- ``open(p, mode)``, ``cat(p)``, ``exists(p)``, ``isdir(p)``, ``size(p)``, ``ls(p)``, ``find(p)``,
  ``join(p, *parts)``, ``dirname(p)``, ``basename(p)``.
- ``put(local_file, p)`` uploads atomically (see ``put``), ``get(p, local_file)`` downloads to a tmp
  name then renames, ``rename(src, dst)``, ``rm(p, recursive=False)``, ``write_bytes(p, data)`` (atomic),
  ``write_json(p, obj)``.
- ``redact(p)``: the URL without any user:password@ part or query string; use it for anything that
  is written down (manifests, logs, reports).

Credentials come only from the environment, the way each fsspec backend reads it (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``). vlmdata never takes them as
arguments, so they cannot end up in a manifest, a log line or a report.
"""

from __future__ import annotations

import builtins
import json
import os
import posixpath
import re
import shutil
from urllib.parse import urlsplit, urlunsplit

OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


class StorageError(Exception):
    """A remote filesystem could not be used (backend not installed, bad URL)."""


def protocol(p: str) -> str | None:
    m = _URL.match(str(p))
    return m.group(1).lower() if m else None


def local(p: str) -> str:
    """``file:///x`` -> ``/x``; local paths unchanged; other URLs unchanged."""
    p = os.fspath(p)
    if protocol(p) == "file":
        rest = p[len("file://"):]
        return rest if rest.startswith("/") else os.path.abspath(rest)
    return p


def is_url(p) -> bool:
    """True for a remote fsspec URL (``file://`` URLs count as local paths)."""
    proto = protocol(os.fspath(p))
    return proto is not None and proto != "file"


def redact(p: str) -> str:
    """The path/URL without user:password@ or ?query, safe to write into manifests and logs."""
    p = os.fspath(p)
    if not is_url(p):
        return p
    parts = urlsplit(p)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def fs_and_path(p: str, fresh: bool = False):
    """(fsspec filesystem, path inside it) for a URL; credentials from the environment only.

    ``fresh``: forget cached listings first (other processes, e.g. build workers, may have written).
    """
    try:
        from fsspec.core import url_to_fs
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


def open(p: str, mode: str = "rb", **kw):  # noqa: A001 (mirrors builtins.open)
    p = local(p)
    if not is_url(p):
        return builtins.open(p, mode, **kw)
    fs, inner = fs_and_path(p)
    return fs.open(inner, mode, **kw)


def cat(p: str) -> bytes:
    p = local(p)
    if not is_url(p):
        with builtins.open(p, "rb") as f:
            return f.read()
    fs, inner = fs_and_path(p)
    return fs.cat_file(inner)


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
        got = fs.cat(list(inner), on_error="return")
        for k, v in got.items():
            out[inner.get(k, inner.get(k.lstrip("/"), k))] = v
    return out


def exists(p: str) -> bool:
    p = local(p)
    if not is_url(p):
        return os.path.exists(p)
    fs, inner = fs_and_path(p, fresh=True)
    return fs.exists(inner)


def isdir(p: str) -> bool:
    p = local(p)
    if not is_url(p):
        return os.path.isdir(p)
    fs, inner = fs_and_path(p, fresh=True)
    return fs.isdir(inner)


def isfile(p: str) -> bool:
    p = local(p)
    if not is_url(p):
        return os.path.isfile(p)
    fs, inner = fs_and_path(p, fresh=True)
    return fs.isfile(inner)


def size(p: str) -> int:
    p = local(p)
    if not is_url(p):
        return os.path.getsize(p)
    fs, inner = fs_and_path(p, fresh=True)
    return int(fs.size(inner))


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


def rename(src: str, dst: str) -> None:
    src, dst = local(src), local(dst)
    if not is_url(src) and not is_url(dst):
        os.replace(src, dst)
        return
    fs, a = fs_and_path(src)
    _, b = fs_and_path(dst)
    fs.mv(a, b)


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
    fs, inner = fs_and_path(p)
    if protocol(p) in OBJECT_STORES:
        fs.put_file(local_file, inner)
    else:
        fs.put_file(local_file, inner + ".tmp")
        fs.mv(inner + ".tmp", inner)
    want = os.path.getsize(local_file)
    got = size(p)
    if got != want:
        raise OSError(f"{redact(p)}: uploaded {got} bytes, expected {want}")


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


def write_bytes(p: str, data: bytes) -> None:
    """Write a whole file atomically (tmp + rename locally; a single PUT on object stores)."""
    p = local(p)
    if not is_url(p):
        tmp = p + ".tmp"
        with builtins.open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
        return
    fs, inner = fs_and_path(p)
    if protocol(p) in OBJECT_STORES:
        fs.pipe_file(inner, data)
    else:
        fs.pipe_file(inner + ".tmp", data)
        fs.mv(inner + ".tmp", inner)


def write_json(p: str, obj) -> None:
    write_bytes(p, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"))


def read_json(p: str):
    return json.loads(cat(p).decode("utf-8"))


__all__ = ["OBJECT_STORES", "StorageError", "basename", "cat", "cat_many", "dirname", "exists", "find", "fs_and_path",
           "get", "is_url", "isdir", "isfile", "join", "local", "ls", "makedirs", "open", "protocol", "put",
           "read_json", "redact", "rename", "rm", "size", "write_bytes", "write_json"]
