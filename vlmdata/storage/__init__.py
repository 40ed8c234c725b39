"""Paths that may be local or fsspec URLs (``s3://bucket/prefix``, ``file:///abs/path``, ``gs://...``).

One small API for every part of vlmdata that reads or writes datasets (build, validate, profile, the
loaders), so that a plain local path keeps the plain ``open``/``os`` fast path and a URL goes through
fsspec. Use it as ``from vlmdata import storage; storage.join(...)``; the modules behind it:

- ``urls``: ``is_url(p)`` / ``local(p)`` (``file://`` URLs are turned into plain local paths, so only truly
  remote URLs go through fsspec), ``check_url``, ``protocol``, ``within(path, root)`` (a path stays inside a
  root folder, lexically: no ``..`` escape), ``redact(p)`` (the URL without any user:password@ part or query
  string; use it for anything that is written down: manifests, logs, reports);
- ``fs``: ``open(p, mode)``, ``cat(p)``, ``cat_many``, ``exists(p)``, ``isdir(p)``, ``isfile(p)``, ``size(p)``,
  ``ls(p)``, ``find(p)``, ``join(p, *parts)``, ``dirname(p)``, ``basename(p)``, ``makedirs``, ``rm(p,
  recursive=False)``, ``rename(src, dst)``, ``put(local_file, p)`` (uploads atomically), ``get(p, local_file)``
  (downloads to a tmp name then renames), ``write_bytes(p, data)`` (the one atomic writer), ``write_json``,
  ``read_json``, ``fs_and_path``;
- ``redaction``: ``redact_text(text)`` scrubs any text (an error message, a traceback) of URL credentials,
  signed-URL query parameters and the values of the credential environment variables; ``redacting()``
  applies it to an exception escaping a block;
- ``files``: ``read_regular(path, max_bytes)``, the one way vlmdata reads an input file: only regular files
  (a FIFO, a device such as ``/dev/zero``, a socket or a directory is refused without blocking), at most
  ``max_bytes`` (``open_regular``, ``read_regular_parts``); ``check_writable(path, folder)``: an output can
  be written (its folder created, a probe file written and removed) before any work starts, so a bad ``-o``
  fails in a second, not after an hour of measuring.

Credentials come only from the environment, the way each fsspec backend reads it (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``). vlmdata never takes them as
arguments: a remote URL with a ``user:password@`` part, a query string or a fragment is refused by
``local()`` (which every path goes through) with ``CredentialsInURL`` before any backend sees it, so a
secret cannot end up in a manifest, an object key, a log line, a report or a traceback.
"""

from vlmdata.storage.files import (
    FileTooLarge,
    NotRegularFile,
    NotWritable,
    check_writable,
    open_input,
    open_regular,
    read_regular,
    read_regular_parts,
)
from vlmdata.storage.fs import (
    basename,
    cat,
    cat_many,
    dirname,
    exists,
    find,
    fs_and_path,
    get,
    isdir,
    isfile,
    join,
    ls,
    makedirs,
    open,
    put,
    read_json,
    rename,
    rm,
    size,
    write_bytes,
    write_json,
)
from vlmdata.storage.redaction import SECRET_ENV, redact_text, redacting
from vlmdata.storage.urls import (
    OBJECT_STORES,
    CredentialsInURL,
    StorageError,
    check_url,
    is_url,
    local,
    protocol,
    redact,
    within,
)

__all__ = [
    "OBJECT_STORES",
    "SECRET_ENV",
    "CredentialsInURL",
    "FileTooLarge",
    "NotRegularFile",
    "NotWritable",
    "StorageError",
    "basename",
    "cat",
    "cat_many",
    "check_url",
    "check_writable",
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
    "open_input",
    "open_regular",
    "protocol",
    "put",
    "read_json",
    "read_regular",
    "read_regular_parts",
    "redact",
    "redact_text",
    "redacting",
    "rename",
    "rm",
    "size",
    "within",
    "write_bytes",
    "write_json",
]
