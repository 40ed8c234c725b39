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
an image is a skip with a reason (``storage.read_regular``), never a hang.
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


def iter_folder(root: str, prompt: str) -> Iterator[SourceItem]:
    check_folder_root(root)
    files = walk_files(root)
    rels = [r for r in files if os.path.splitext(r)[1].lower() in IMAGE_SUFFIXES | UNSUPPORTED_IMAGE_SUFFIXES]
    present = {r for r in files if r.endswith((".txt", ".json"))}
    rels.sort(key=lambda r: r.replace(os.sep, "/").encode("utf-8", "surrogateescape"))
    for index, rel in enumerate(rels):
        path = os.path.join(root, rel)
        shown = safe_label(rel.replace(os.sep, "/"))
        stem_rel = os.path.splitext(rel)[0]
        item = SourceItem(index=index, input=shown, source_id=shown.rsplit(".", 1)[0], images=[path])
        ext = os.path.splitext(rel)[1].lower()
        if ext in UNSUPPORTED_IMAGE_SUFFIXES:
            item.error = (
                "unsupported_format",
                f"{ext[1:].upper()} images are not supported (convert to JPEG, PNG or WebP)",
            )
            item.images = []
            yield item
            continue
        txt, js = os.path.join(root, stem_rel + ".txt"), os.path.join(root, stem_rel + ".json")
        txt_name, js_name = safe_label(os.path.basename(txt)), safe_label(os.path.basename(js))
        _caption_item(
            item,
            prompt,
            txt_name,
            js_name,
            (lambda t=txt, n=txt_name: _text(storage.read_regular(t, MAX_SIDECAR_BYTES, n)))
            if stem_rel + ".txt" in present
            else None,
            (lambda j=js, n=js_name: loads(storage.read_regular(j, MAX_SIDECAR_BYTES, n)))
            if stem_rel + ".json" in present
            else None,
        )
        yield item


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


def iter_folder_url(root: str, prompt: str, batch: int = 256) -> Iterator[SourceItem]:
    """The same items as ``iter_folder`` for a folder on object storage (``s3://bucket/prefix``).

    One recursive listing gives the images and which sidecars exist; sidecars are fetched in
    concurrent batches. Items are identical to a local copy's except that images are URLs.
    """
    base = root.rstrip("/")
    files = storage.find(base)
    rel_of = {f: f[len(base) + 1 :] for f in files if f.startswith(base + "/")}
    present = set(rel_of.values())
    images = sorted(
        (r for r in present if posixpath.splitext(r)[1].lower() in IMAGE_SUFFIXES | UNSUPPORTED_IMAGE_SUFFIXES)
    )
    for lo in range(0, len(images), batch):
        chunk = images[lo : lo + batch]
        want = []
        for rel in chunk:
            stem = posixpath.splitext(rel)[0]
            want += [f"{base}/{stem}{ext}" for ext in (".txt", ".json") if stem + ext in present]
        got = storage.cat_many(want) if want else {}
        for offset, rel in enumerate(chunk):
            stem = posixpath.splitext(rel)[0]
            txt_name, js_name = posixpath.basename(stem) + ".txt", posixpath.basename(stem) + ".json"
            item = SourceItem(
                index=lo + offset, input=safe_label(rel), source_id=safe_label(stem), images=[f"{base}/{rel}"]
            )
            ext = posixpath.splitext(rel)[1].lower()
            if ext in UNSUPPORTED_IMAGE_SUFFIXES:
                item.error = (
                    "unsupported_format",
                    f"{ext[1:].upper()} images are not supported (convert to JPEG, PNG or WebP)",
                )
                item.images = []
                yield item
                continue
            txt_url, js_url = f"{base}/{stem}.txt", f"{base}/{stem}.json"
            _caption_item(
                item,
                prompt,
                txt_name,
                js_name,
                (lambda u=txt_url: _text(_fetched(got, u))) if stem + ".txt" in present else None,
                (lambda u=js_url: loads(_fetched(got, u))) if stem + ".json" in present else None,
            )
            yield item


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
