"""What every source yields: cheap, picklable descriptions of inputs, in a deterministic order.

Reading image bytes and checking them happens later (in build workers), so enumerating a source
is fast and the same input always gives the same sequence of items.

Input safety, shared by every source (docs/RELIABILITY.md):

- only regular files are read (``storage.read_regular``): a FIFO, ``/dev/zero`` or a socket named like
  an image or a caption is a skip with a reason, never a hang; every read is capped
  (``MAX_IMAGE_BYTES``, ``MAX_SIDECAR_BYTES``, ``MAX_RECORD_BYTES``);
- paths taken from records (LLaVA/messages image paths, Hugging Face path cells) must stay inside
  the source root (the image root) unless ``allow_outside_root``: absolute paths elsewhere, ``..``
  escapes and ``file://`` URLs elsewhere are skipped as ``outside_root`` *without* touching the file
  (a skip message never tells whether a host file exists); object-storage URLs must lie under a
  remote root; URLs with credentials are refused (``storage.check_url``);
- a local source folder is walked by ``walk_files`` only (folder sources, the parquet files of a Hugging Face
  folder, fingerprints): directory symlinks are followed once per real directory, never to the folder itself or
  a folder above it (``/proc/self/root`` is ``/``), never into a kernel pseudo-filesystem (``PSEUDO_ROOTS``);
  a source inside one is refused (``check_folder_root``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, Union

from vlmdata import storage
from vlmdata.errors import VlmdataError

ImageRef = Union[str, bytes]  # a file path, or the encoded bytes themselves

MAX_IMAGE_BYTES = 512 * 1024 * 1024  # one image file (the default shard size: larger cannot be packed)
MAX_SIDECAR_BYTES = 16 * 1024 * 1024  # one caption .txt / .json sidecar
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one JSONL line
# kernel pseudo-filesystems: never a data folder, and their links reach the whole filesystem (/proc/self/root)
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


@dataclass
class SourceItem:
    index: int  # position in the source's order; becomes the sample key
    input: str  # where it came from, for humans: "data.jsonl:17", "photos/cat.jpg"
    source_id: str = ""
    conversation: list | None = None  # canonical messages, see schema.py
    images: list[ImageRef] = field(default_factory=list)
    error: tuple[str, str] | None = None  # (reason, detail) found while enumerating
    pending: tuple | None = None  # deferred parsing: (function, args); ``resolve()`` runs it

    def resolve(self) -> "SourceItem":
        """Finish a deferred item (parse its record): done in build workers, in parallel."""
        if self.pending is not None:
            fn, args = self.pending
            self.pending = None
            fn(self, *args)
        return self


class SourceError(VlmdataError):
    """The source as a whole cannot be read (bad path, unknown format, unreadable file)."""


class BadPath(VlmdataError, ValueError):
    """A path taken from a record cannot be used: (reason, detail) for the skip record."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def confine(ref: object, root: str, allow_outside_root: bool) -> str:
    """The path to read for an image reference ``ref`` found in a record under ``root`` (a local folder or
    a remote URL prefix). Relative references are joined to ``root``; the result must stay inside
    ``root`` unless ``allow_outside_root``. Raises BadPath (reason ``bad_path`` or ``outside_root``)."""
    if not isinstance(ref, str) or not ref:
        raise BadPath("bad_path", "image reference is not a path")
    if "\0" in ref:
        raise BadPath("bad_path", "image path contains a NUL byte")
    proto = storage.protocol(ref)
    if proto == "file":
        ref = storage.local(ref)
        proto = None
    if proto is not None:
        if proto not in storage.OBJECT_STORES:
            raise BadPath(
                "bad_path", f"remote image {storage.redact(ref)!r:.80} (only local files and object storage are read)"
            )
        try:
            storage.check_url(ref)
        except storage.CredentialsInURL:
            raise BadPath("bad_path", f"{storage.redact(ref)}: credentials or a query string in an image URL") from None
        if not allow_outside_root and not (storage.is_url(root) and storage.within(ref, root)):
            raise BadPath("outside_root", f"{storage.redact(ref)}: outside the source root {storage.redact(root)}")
        return ref
    if storage.is_url(root):
        if os.path.isabs(ref):
            if not allow_outside_root:
                raise BadPath("outside_root", f"{ref}: a local path, the source root is {storage.redact(root)}")
            return ref
        path = storage.join(root, ref)
        if not allow_outside_root and not storage.within(path, root):
            raise BadPath("outside_root", f"{ref}: outside the source root {storage.redact(root)}")
        return path
    path = ref if os.path.isabs(ref) else os.path.join(root, ref)
    if not allow_outside_root and not storage.within(path, root):
        raise BadPath("outside_root", f"{ref}: outside the source root {root}")
    return path


# ----------------------------------------------------------------------------- walking a local folder


def _in_pseudo(real: str) -> str | None:
    return next((r for r in PSEUDO_ROOTS if real == r or real.startswith(r + "/")), None)


def check_folder_root(root: str) -> None:
    """SourceError for a source folder inside a kernel pseudo-filesystem (``PSEUDO_ROOTS``)."""
    real = os.path.realpath(root)
    pseudo = _in_pseudo(real)
    if pseudo is not None:
        raise SourceError(f"{root}: lies in {pseudo}, a kernel pseudo-filesystem, not a folder of data")


def walk_files(base: str) -> list[str]:
    """Relative paths (os separators) of every file below ``base``, following directory symlinks once
    per real directory, never to ``base`` or a folder above it, never into a pseudo-filesystem."""
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    top = os.path.realpath(base)
    above = {top} | {p for p in _parents(top)}
    stack = [""]
    while stack:
        rel = stack.pop()
        d = os.path.join(base, rel) if rel else base
        try:
            st = os.stat(d)
        except OSError:
            continue
        if rel and os.path.islink(d):
            real = os.path.realpath(d)
            if real in above or _in_pseudo(real) is not None:
                continue  # a link up the tree or into /proc: it would walk what lies around the source
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            r = os.path.join(rel, e.name) if rel else e.name
            try:
                is_dir = e.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir:
                stack.append(r)
            else:
                out.append(r)
    return out


def _parents(p: str) -> Iterator[str]:
    while True:
        up = os.path.dirname(p)
        if up == p:
            return
        yield up
        p = up
