"""What a path names: a local path, a ``file://`` URL (a local path too) or a remote fsspec URL, and the rule
that no URL carries a credential.

``local(p)`` is the door every path goes through: ``file:///x`` becomes ``/x`` and a remote URL with a
``user:password@`` part, a query string or a fragment is refused with ``CredentialsInURL`` (credentials come
from the environment only; a query would become part of object keys). ``redact(p)`` is the form of a path that
may be written down (manifests, logs, reports). ``within(path, root)`` says whether a path stays inside a root.

Depends on nothing but ``vlmdata.errors``.
"""

from __future__ import annotations

import os
import posixpath
import re
from urllib.parse import urlsplit, urlunsplit

from vlmdata.errors import VlmdataError

OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


class StorageError(VlmdataError):
    """A remote filesystem could not be used (backend not installed, bad URL)."""


class CredentialsInURL(StorageError, ValueError):
    """A URL carries credentials, a query string or a fragment; the message shows it redacted."""


def protocol(p: str) -> str | None:
    """The URL scheme of ``p`` in lower case (``"s3"``, ``"file"``), or None for a plain path."""
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
