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
  is written down (manifests, logs, reports). ``redact_text(text)`` scrubs any text (an error message,
  a traceback) of URL credentials, signed-URL query parameters and the values of the credential
  environment variables; ``redacting()`` applies it to an exception escaping a block.
- ``read_regular(path, max_bytes)``: the one way vlmdata reads an input file: only regular files
  (a FIFO, a device such as ``/dev/zero``, a socket or a directory is refused without blocking),
  at most ``max_bytes``.
- ``within(path, root)``: whether a path stays inside a root folder (lexically, no ``..`` escape).
- ``check_writable(path, folder)``: an output can be written (its folder created, a probe file written and
  removed) before any work starts, so a bad ``-o`` fails in a second, not after an hour of measuring.

Credentials come only from the environment, the way each fsspec backend reads it (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``). vlmdata never takes them as
arguments: a remote URL with a ``user:password@`` part, a query string or a fragment is refused by
``local()`` (which every path goes through) with ``CredentialsInURL`` before any backend sees it, so a
secret cannot end up in a manifest, an object key, a log line, a report or a traceback.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import json
import os
import posixpath
import re
import shutil
import stat
from urllib.parse import urlsplit, urlunsplit

from vlmdata.errors import VlmdataError

OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


class StorageError(VlmdataError):
    """A remote filesystem could not be used (backend not installed, bad URL)."""


class CredentialsInURL(StorageError, ValueError):
    """A URL carries credentials, a query string or a fragment; the message shows it redacted."""


class NotRegularFile(OSError):
    """An input path is not a regular file (FIFO, device, socket, directory)."""


class FileTooLarge(OSError):
    """An input file is larger than the cap for its kind."""


class NotWritable(StorageError):
    """An output path cannot be written (a file where a folder is needed, /proc, read-only, no space)."""


def protocol(p: str) -> str | None:
    m = _URL.match(str(p))
    return m.group(1).lower() if m else None


def check_url(p: str) -> str:
    """``p`` unchanged, or CredentialsInURL when a remote URL has ``user[:password]@``, ``?query`` or
    ``#fragment`` (credentials come from the environment only; a query would become part of object keys)."""
    proto = protocol(p)
    if proto is None or proto == "file":
        return p
    parts = urlsplit(p)
    if "@" in parts.netloc or parts.query or parts.fragment or "?" in p or "#" in p:
        raise CredentialsInURL(
            f"{redact(p)}: credentials, query strings and fragments are not accepted in URLs (vlmdata reads "
            "credentials from the environment, e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE)"
        )
    return p


def local(p: str) -> str:
    """``file:///x`` -> ``/x``; local paths unchanged; other URLs unchanged (CredentialsInURL when they carry
    credentials, a query or a fragment, see ``check_url``)."""
    p = os.fspath(p)
    if protocol(p) == "file":
        rest = p[len("file://") :]
        return rest if rest.startswith("/") else os.path.abspath(rest)
    return check_url(p)


def is_url(p) -> bool:
    """True for a remote fsspec URL (``file://`` URLs count as local paths)."""
    proto = protocol(os.fspath(p))
    return proto is not None and proto != "file"


def redact(p: str) -> str:
    """The path/URL without user:password@ or ?query, safe to write into manifests and logs."""
    p = os.fspath(p)
    if not is_url(p):
        return p
    try:
        parts = urlsplit(p)
    except ValueError:  # e.g. an unbalanced IPv6 bracket: keep only the scheme
        return f"{protocol(p)}://<unparseable URL>"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# scheme://user[:password]@  ->  scheme://
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"<>]*@")
# ?query / #fragment of a URL, up to whitespace or a quote
_URL_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>?#]*)[?#][^\s'\"<>]*")
# signed-URL and token parameters wherever they appear
_SECRET_PARAMS = re.compile(
    r"(?i)\b(x-amz-signature|x-amz-credential|x-amz-security-token|signature|sig|awsaccesskeyid|"
    r"access_token|security_token|token)=([^&\s'\"<>]+)"
)
SECRET_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON",
)


def redact_text(text: object) -> str:
    """Scrub secrets from any text.

    Args:
        text: a message, a traceback line, anything (non-strings are converted with ``str``).

    Returns:
        ``text`` with URL credentials (``scheme://user:pass@``), URL query strings and fragments, signed-URL
        parameters and the values of credential environment variables (``SECRET_ENV``) replaced."""
    text = _USERINFO.sub(r"\1", str(text))
    text = _URL_QUERY.sub(r"\1", text)
    text = _SECRET_PARAMS.sub(lambda m: f"{m.group(1)}=***", text)
    for name in SECRET_ENV:
        v = os.environ.get(name)
        if v and len(v) >= 8:
            text = text.replace(v, "***")
    return text


def _redact_exception(e: BaseException, seen: set[int]) -> None:
    if id(e) in seen:
        return
    seen.add(id(e))
    try:
        e.args = tuple(redact_text(a) if isinstance(a, str) else a for a in e.args)
        for attr in ("filename", "filename2", "strerror", "msg"):
            v = getattr(e, attr, None)
            if isinstance(v, str):
                setattr(e, attr, redact_text(v))
    except (AttributeError, TypeError):
        pass
    for nxt in (e.__cause__, e.__context__):
        if nxt is not None:
            _redact_exception(nxt, seen)


@contextlib.contextmanager
def redacting():
    """Scrub an exception escaping the block (and the exceptions chained to it) with ``redact_text``: its
    message, its cause and its context, so that a traceback printed later carries no credential. When
    an exception's own ``__str__`` still shows a secret, it is replaced by a RuntimeError with the
    redacted text."""
    try:
        yield
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        _redact_exception(e, set())
        try:
            text = str(e)
        except Exception:  # noqa: BLE001 - a broken __str__ must not hide the original error
            text = type(e).__name__
        if redact_text(text) != text:
            raise RuntimeError(f"{type(e).__name__}: {redact_text(text)}") from None
        raise


def read_regular(path: str, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a local regular file of at most ``max_bytes`` (``what`` names it in messages).

    A FIFO, character or block device (``/dev/zero``), socket or directory raises NotRegularFile without
    blocking (the file is opened with O_NONBLOCK and checked with fstat before any read); a larger file
    raises FileTooLarge; a path with a NUL byte raises NotRegularFile. Other OSErrors propagate
    (FileNotFoundError, PermissionError, ...).
    """
    path = os.fspath(path)
    if "\0" in path:
        raise NotRegularFile(errno.EINVAL, "path contains a NUL byte")
    fd = os.open(
        path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{what} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"{what} is {st.st_size} bytes, more than the limit of {max_bytes}")
        with builtins.open(fd, "rb", closefd=False) as f:
            data = f.read(min(max_bytes, st.st_size) + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew while reading
        raise FileTooLarge(errno.EFBIG, f"{what} is more than the limit of {max_bytes} bytes")
    return data


@contextlib.contextmanager
def open_regular(path: str, max_bytes: int, what: str = "file"):
    """A binary file object of a local regular file of at most ``max_bytes``, for streaming: the same checks as
    ``read_regular`` (FIFO, device, socket, directory refused without blocking; NotRegularFile / FileTooLarge),
    then the file is read from the one descriptor that was checked. Yields ``(file, size)``."""
    path = os.fspath(path)
    if "\0" in path:
        raise NotRegularFile(errno.EINVAL, "path contains a NUL byte")
    fd = os.open(
        path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{what} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"{what} is {st.st_size} bytes, more than the limit of {max_bytes}")
    except BaseException:
        os.close(fd)
        raise
    with builtins.open(fd, "rb") as f:
        yield f, st.st_size


def read_regular_parts(
    path: str, max_bytes: int, head: int, tail: int, what: str = "file"
) -> "bytes | tuple[bytes, bytes, int]":
    """Like ``read_regular``, but a file larger than ``head + tail`` bytes comes back as (its first ``head``
    bytes, its last ``tail`` bytes, its size) without reading the middle."""
    path = os.fspath(path)
    if "\0" in path:
        raise NotRegularFile(errno.EINVAL, "path contains a NUL byte")
    fd = os.open(
        path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{what} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"{what} is {st.st_size} bytes, more than the limit of {max_bytes}")
        if st.st_size <= head + tail:
            with builtins.open(fd, "rb", closefd=False) as f:
                data = f.read(min(max_bytes, st.st_size) + 1)
            if len(data) > max_bytes:
                raise FileTooLarge(errno.EFBIG, f"{what} is more than the limit of {max_bytes} bytes")
            return data
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


def within(path: str, root: str) -> bool:
    """Whether ``path`` (absolute, or relative to ``root``) stays inside ``root`` after normalising ``.``
    and ``..`` (lexically: symlinks inside the root are the root owner's choice and are followed)."""
    if is_url(root) or is_url(path):
        if protocol(path) != protocol(root) and is_url(path):
            return False
        base = posixpath.normpath(root.split("://", 1)[-1].rstrip("/"))
        p = path.split("://", 1)[-1] if is_url(path) else posixpath.join(base, path)
        p = posixpath.normpath(p)
        return p == base or p.startswith(base + "/")
    base = os.path.normpath(os.path.abspath(root))
    p = os.path.normpath(os.path.join(base, path))
    return p == base or p.startswith(base.rstrip(os.sep) + os.sep)


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


def fs_and_path(p: str, fresh: bool = False):
    """(fsspec filesystem, path inside it) for a URL; credentials from the environment only.

    ``fresh``: forget cached listings first (other processes, e.g. build workers, may have written).
    """
    check_url(p)
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
        return builtins.open(p, mode, **kw)
    fs, inner = fs_and_path(p)
    return fs.open(inner, mode, **kw)


@_translated
def cat(p: str) -> bytes:
    p = local(p)
    if not is_url(p):
        with builtins.open(p, "rb") as f:
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


@_translated
def exists(p: str) -> bool:
    p = local(p)
    if not is_url(p):
        return os.path.exists(p)
    fs, inner = fs_and_path(p, fresh=True)
    return fs.exists(inner)


@_translated
def isdir(p: str) -> bool:
    p = local(p)
    if not is_url(p):
        return os.path.isdir(p)
    fs, inner = fs_and_path(p, fresh=True)
    return fs.isdir(inner)


@_translated
def isfile(p: str) -> bool:
    p = local(p)
    if not is_url(p):
        return os.path.isfile(p)
    fs, inner = fs_and_path(p, fresh=True)
    return fs.isfile(inner)


@_translated
def size(p: str) -> int:
    p = local(p)
    if not is_url(p):
        return os.path.getsize(p)
    fs, inner = fs_and_path(p, fresh=True)
    return int(fs.size(inner))


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
    fs, inner = fs_and_path(p)
    if protocol(p) in OBJECT_STORES:
        fs.pipe_file(inner, data)
    else:
        fs.pipe_file(inner + ".tmp", data)
        fs.mv(inner + ".tmp", inner)


def write_json(p: str, obj, fsync: bool = True) -> None:
    write_bytes(p, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"), fsync)


def read_json(p: str):
    return json.loads(cat(p).decode("utf-8"))


__all__ = [
    "OBJECT_STORES",
    "CredentialsInURL",
    "FileTooLarge",
    "NotRegularFile",
    "StorageError",
    "NotWritable",
    "basename",
    "check_url",
    "check_writable",
    "open_regular",
    "read_regular",
    "read_regular_parts",
    "redact_text",
    "redacting",
    "within",
    "cat",
    "cat_many",
    "dirname",
    "exists",
    "find",
    "fs_and_path",
    "get",
    "is_url",
    "isdir",
    "isfile",
    "join",
    "local",
    "ls",
    "makedirs",
    "open",
    "protocol",
    "put",
    "read_json",
    "redact",
    "rename",
    "rm",
    "size",
    "write_bytes",
    "write_json",
]
