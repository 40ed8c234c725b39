"""A folder of images with caption sidecars: ``name.jpg`` + ``name.txt`` or ``name.json``, recursively.

Every file with an image suffix is an input, in sorted relative-path order (JPEG's other suffixes
``.jfif``, ``.jpe``, ``.pjpeg``, ``.pjp`` included). Files with the suffix of an image format vlmdata does
not store (``.heic``, ``.avif``, ...) are inputs too, skipped as ``unsupported_format``, so they are
counted rather than silently ignored. Directory symlinks are followed (each real directory once, so a
symlink loop ends), except those that lead to the source folder itself or a folder above it (``/proc/self/
root`` is ``/``: following it would walk the whole filesystem) or into a kernel pseudo-filesystem
(``PSEUDO_ROOTS``: ``/proc``, ``/sys``, ``/dev``); a source folder inside one of those is refused
(``check_folder_root``). File names that are not UTF-8 are kept
(the file is read by its real name) and shown with ``\\xNN`` escapes. Sidecars are read only when
they are regular files of at most ``MAX_SIDECAR_BYTES``; a FIFO or a device named like a sidecar or
an image is a skip with a reason (``storage.read_regular``), never a hang. A sidecar's suffix is matched in
any case (``IMG_1.JPG`` + ``IMG_1.TXT``), the lower-case file first when both exist.
"""

from __future__ import annotations

import os
import posixpath
from typing import Iterator

from vlmdata import storage
from vlmdata.dataset.schema import BadJSON, loads, safe_label
from vlmdata.sources.base import MAX_SIDECAR_BYTES, SourceItem, check_folder_root, walk_files
from vlmdata.sources.text import BadRecord, caption_conversation, from_turns

IMAGE_SUFFIXES = {
    ".jpg",
    ".jpeg",
    ".jfif",
    ".jpe",
    ".pjpeg",
    ".pjp",
    ".png",
    ".apng",
    ".webp",
    ".gif",
    ".bmp",
    ".dib",
    ".tif",
    ".tiff",
}
# image formats seen in the wild that shards do not store: counted and skipped, never silently dropped
UNSUPPORTED_IMAGE_SUFFIXES = {
    ".heic",
    ".heif",
    ".avif",
    ".jxl",
    ".jp2",
    ".j2k",
    ".svg",
    ".psd",
    ".ico",
    ".dng",
    ".cr2",
    ".nef",
    ".arw",
    ".raw",
    ".tga",
    ".ppm",
    ".pgm",
    ".pbm",
    ".pnm",
    ".pfm",
    ".heics",
    ".avifs",
    ".jxr",
    ".wdp",
    ".hdp",
    ".jpf",
    ".jpx",
    ".jpm",
    ".j2c",
    ".jpc",
    ".exr",
    ".hdr",
    ".dds",
    ".qoi",
    ".pcx",
    ".xbm",
    ".xpm",
    ".icns",
    ".cur",
    ".eps",
    ".emf",
    ".wmf",
    ".xcf",
    ".orf",
    ".rw2",
    ".raf",
    ".pef",
    ".srw",
    ".sr2",
    ".3fr",
    ".crw",
    ".cr3",
    ".nrw",
    ".erf",
    ".kdc",
    ".mrw",
    ".x3f",
}


class _LocalTree:
    """A local source folder: relative paths with os separators, sidecars read as regular files only."""

    def __init__(self, root: str):
        check_folder_root(root)
        self.root = root
        files = walk_files(root)
        self.sidecars = _sidecars(files, os.path.splitext)
        self.images = [
            r for r in files if os.path.splitext(r)[1].lower() in IMAGE_SUFFIXES | UNSUPPORTED_IMAGE_SUFFIXES
        ]

    def stem(self, rel: str) -> str:
        return os.path.splitext(rel)[0]

    def label(self, rel: str) -> tuple[str, str]:
        shown = safe_label(rel.replace(os.sep, "/"))
        return shown, shown.rsplit(".", 1)[0]

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def name(self, rel: str) -> str:
        return safe_label(os.path.basename(rel))

    def prefetch(self, rels: list[str]) -> None:
        pass  # a local sidecar is read when its item is made

    def read(self, rel: str) -> bytes:
        return storage.read_regular(self.path(rel), MAX_SIDECAR_BYTES, self.name(rel))


class _RemoteTree:
    """A folder on object storage: one recursive listing; the sidecars of a batch of images fetched concurrently."""

    def __init__(self, root: str):
        self.base = root.rstrip("/")
        files = storage.find(self.base)
        present = {f[len(self.base) + 1 :] for f in files if f.startswith(self.base + "/")}
        self.sidecars = _sidecars(present, posixpath.splitext)
        self.images = [
            r for r in present if posixpath.splitext(r)[1].lower() in IMAGE_SUFFIXES | UNSUPPORTED_IMAGE_SUFFIXES
        ]
        self.got: dict = {}

    def stem(self, rel: str) -> str:
        return posixpath.splitext(rel)[0]

    def label(self, rel: str) -> tuple[str, str]:
        return safe_label(rel), safe_label(self.stem(rel))

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def name(self, rel: str) -> str:
        return posixpath.basename(rel)

    def prefetch(self, rels: list[str]) -> None:
        want = [
            self.path(self.sidecars[(self.stem(r), ext)])
            for r in rels
            for ext in (".txt", ".json")
            if (self.stem(r), ext) in self.sidecars
        ]
        self.got = storage.cat_many(want) if want else {}

    def read(self, rel: str) -> bytes:
        return _fetched(self.got, self.path(rel))


def iter_folder(root: str, prompt: str, batch: int = 256) -> Iterator[SourceItem]:
    """The items of an image folder (module docstring), local or on object storage (``s3://bucket/prefix``: one
    recursive listing gives the images and which sidecars exist; sidecars are fetched in concurrent batches of
    ``batch`` images). The items of a remote folder equal a local copy's except that images are URLs."""
    tree = _RemoteTree(root) if storage.is_url(root) else _LocalTree(root)
    rels = sorted(tree.images, key=lambda r: r.replace(os.sep, "/").encode("utf-8", "surrogateescape"))
    for lo in range(0, len(rels), batch):
        chunk = rels[lo : lo + batch]
        tree.prefetch(chunk)
        for offset, rel in enumerate(chunk):
            yield _item(tree, lo + offset, rel, prompt)


def _item(tree: "_LocalTree | _RemoteTree", index: int, rel: str, prompt: str) -> SourceItem:
    shown, source_id = tree.label(rel)
    item = SourceItem(index=index, input=shown, source_id=source_id, images=[tree.path(rel)])
    ext = os.path.splitext(rel)[1].lower()
    if ext in UNSUPPORTED_IMAGE_SUFFIXES:
        item.error = (
            "unsupported_format",
            f"{ext[1:].upper()} images are not supported (convert to JPEG, PNG or WebP)",
        )
        item.images = []
        return item
    stem = tree.stem(rel)
    txt, js = tree.sidecars.get((stem, ".txt")), tree.sidecars.get((stem, ".json"))
    _caption_item(
        item,
        prompt,
        tree.name(txt or stem + ".txt"),
        tree.name(js or stem + ".json"),
        (lambda: _text(tree.read(txt))) if txt else None,
        (lambda: loads(tree.read(js))) if js else None,
    )
    return item


def _sidecars(files, splitext) -> dict[tuple[str, str], str]:
    """(stem, ".txt" or ".json") -> the sidecar file, its suffix in any case; a lower-case suffix wins, then the
    first in sorted order."""
    out: dict[tuple[str, str], str] = {}
    for r in sorted(files):
        stem, ext = splitext(r)
        if ext.lower() in (".txt", ".json") and ((stem, ext.lower()) not in out or ext in (".txt", ".json")):
            out[(stem, ext.lower())] = r
    return out


def _caption_item(item: SourceItem, prompt: str, txt_name: str, js_name: str, read_txt, read_json) -> None:
    """Fill ``item`` from its sidecar: the .txt caption if there is one (``read_txt``), else the .json
    (``read_json``), else a missing_caption skip; bad sidecars become skips with a reason."""
    try:
        if read_txt is not None:
            caption = read_txt()
            if not caption.strip():
                item.error = ("empty_caption", f"{txt_name} is empty")
            else:
                item.conversation = caption_conversation(caption, prompt)
        elif read_json is not None:
            item.conversation = _json_doc(read_json(), prompt)
        else:
            item.error = ("missing_caption", f"no {txt_name} or {js_name} beside the image")
    except UnicodeDecodeError as e:
        item.error = ("bad_caption", f"{txt_name} is not UTF-8 ({e.reason})")
    except BadJSON as e:
        item.error = ("bad_json", f"{js_name}: {e}")
    except BadRecord as e:
        item.error = ("bad_record", f"{js_name}: {safe_label(e, 300)}")
    except (storage.NotRegularFile, storage.FileTooLarge) as e:
        item.error = ("unreadable_file", f"{e.strerror}")
    except OSError as e:
        item.error = ("unreadable_file", f"caption sidecar: {e.strerror or e}")


def _json_doc(doc, prompt: str) -> list:
    if isinstance(doc, str):
        doc = {"caption": doc}
    if not isinstance(doc, dict):
        raise BadRecord("sidecar is not an object")
    for k in ("conversations", "messages"):
        if k in doc:
            role_key, text_key = ("from", "value") if k == "conversations" else ("role", "content")
            return from_turns(doc[k], 1, role_key, text_key)
    for k in ("caption", "text", "alt", "txt"):
        if isinstance(doc.get(k), str):
            if not doc[k].strip():
                raise BadRecord("empty caption")
            return caption_conversation(doc[k], prompt)
    raise BadRecord("sidecar has none of caption/text/conversations/messages")


def _text(data: bytes) -> str:
    """UTF-8 (a byte-order mark dropped) with universal newlines, as ``Path.read_text`` reads a sidecar."""
    return data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _fetched(got: dict, url: str) -> bytes:
    v = got.get(url)
    if isinstance(v, (bytes, bytearray)):
        data = bytes(v)
    else:
        data = storage.cat(url)  # not in the batch answer (or an error there): one more try, errors propagate
    if len(data) > MAX_SIDECAR_BYTES:
        raise storage.FileTooLarge(27, f"{storage.basename(url)} is more than the limit of {MAX_SIDECAR_BYTES} bytes")
    return data
