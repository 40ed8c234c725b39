"""One input -> an ``Entry`` to pack, or a skip record naming the input and the reason.

``prepare`` reads the record's images and checks them (header and end marker, or a full decode with
``verify="full"``), applies the EXIF rotation and the ``max_pixels`` re-encode, and measures the sample's
size in a shard. It never raises for a bad input: whatever goes wrong while preparing one input (a record
nested too deeply, a lone surrogate, a FIFO named ``x.jpg``, a path outside the source root, ...) is a skip
with a reason, ``unexpected_error`` naming the exception when nothing more specific applies.

Images read from files that need no re-encode travel as their path (the shard writer copies the file), so
no image bytes cross process boundaries; with header checks only the head and the tail of a local file are
read (``Sparse``). Runs in worker processes: everything here is picklable and module-level.
"""

from __future__ import annotations

import errno

from vlmdata import storage
from vlmdata.dataset.images import TAIL_BYTES, ImageProblem, NeedFullBytes, Sparse, check_image, reencode, upright
from vlmdata.dataset.schema import (
    FORMAT_EXT,
    ImageInfo,
    Sample,
    conversation_problem,
    count_image_parts,
    dumps,
    safe_label,
)
from vlmdata.dataset.shards import Entry
from vlmdata.dataset.tar import END_BYTES
from vlmdata.ingest.options import BuildOptions
from vlmdata.sources import SourceItem
from vlmdata.sources.base import MAX_IMAGE_BYTES

HEAD_BYTES = 1 << 13  # what a header check reads of a local image (and TAIL_BYTES of its end)


class _Skip(Exception):
    """This input is skipped: (reason, detail)."""


def key_for(index: int) -> str:
    """The sample key of input ``index`` (keys sort as the inputs do)."""
    return f"s{index:09d}"


def prepare(item: SourceItem, opts: BuildOptions) -> Entry | dict:
    """Read and check one input (module docstring).

    Args:
        item: the input, as the source yields it (resolved here).
        opts: the build's options.

    Returns:
        The Entry to pack, or a skip record ``{"input", "source_id", "reason", "detail"}``.
    """

    def skip(reason: str, detail: str) -> dict:
        return {
            "input": safe_label(item.input),
            "source_id": safe_label(item.source_id, 200),
            "reason": reason,
            "detail": safe_label(storage.redact_text(detail), 500),
        }

    try:
        return _prepare(item, opts)
    except _Skip as s:
        return skip(*s.args)
    except RecursionError:
        return skip("bad_record", "record nested too deeply")
    except MemoryError:
        return skip("too_large", "input too large to hold in memory")
    except Exception as e:  # noqa: BLE001 - one input must never stop the build
        return skip("unexpected_error", f"{type(e).__name__}: {e}")


def _prepare(item: SourceItem, opts: BuildOptions) -> Entry:
    item.resolve()
    if item.error:
        raise _Skip(*item.error)
    bad = conversation_problem(item.conversation)
    if bad:
        raise _Skip(*bad)
    assert item.conversation is not None  # conversation_problem found a non-empty list
    if count_image_parts(item.conversation) != len(item.images):
        raise _Skip("bad_record", f"{count_image_parts(item.conversation)} image parts but {len(item.images)} images")
    sample = Sample(key=key_for(item.index), conversation=item.conversation, source_id=safe_label(item.source_id, 200))
    payloads: list = []
    for i, ref in enumerate(item.images):
        info, payload = _image(ref, i, opts)
        sample.image_info.append(info)
        payloads.append(payload)
    images = [(info.file, p, info.bytes) for info, p in zip(sample.image_info, payloads)]
    entry = Entry(
        item.index, sample.key, dumps(sample.meta()), images, input=safe_label(item.input), source_id=sample.source_id
    )
    if opts.max_size is not None and entry.tar_bytes + END_BYTES > opts.max_size:
        raise _Skip(
            "sample_too_large",
            f"the sample takes {entry.tar_bytes + END_BYTES} bytes in a shard, more than `max_size` {opts.max_size}",
        )
    return entry


def _image(ref, i: int, opts: BuildOptions) -> tuple[ImageInfo, object]:
    """Image ``i`` of a record, checked: its ImageInfo and its payload (the path, or the bytes to store)."""
    label = safe_label(storage.redact(ref)) if isinstance(ref, str) else f"image {i}"
    try:
        data = _read_image(ref, full=opts.verify == "full" or bool(opts.max_pixels))
    except FileNotFoundError:
        raise _Skip("missing_file", f"{label}: no such file") from None
    except (storage.NotRegularFile, storage.FileTooLarge) as e:
        raise _Skip("unreadable_file", f"{label}: {e.strerror}") from None
    except storage.StorageError as e:
        raise _Skip("unreadable_file", f"{label}: {e}") from None
    except OSError as e:
        raise _Skip("unreadable_file", f"{label}: {e.strerror or e}") from None
    payload = ref
    try:
        try:
            c = check_image(data, max_image_pixels=opts.max_image_pixels, verify=opts.verify)
        except NeedFullBytes:
            data = _read_image(ref, full=True)
            c = check_image(data, max_image_pixels=opts.max_image_pixels, verify=opts.verify)
        fmt, w, h = c.format, c.width, c.height
        if c.orientation != 1:  # every reader must see the same pixels: apply the EXIF rotation now
            if isinstance(data, Sparse):
                data = _read_image(ref, full=True)
            data, fmt, w, h = upright(data)
            payload = data
        if opts.max_pixels and w * h > opts.max_pixels:
            if isinstance(data, Sparse):
                data = _read_image(ref, full=True)
            data, fmt, w, h = reencode(data, opts.max_pixels)
            payload = data
    except ImageProblem as e:
        raise _Skip(e.reason, f"{label}: {e.detail}") from None
    except OSError as e:
        raise _Skip("unreadable_file", f"{label}: {e.strerror or e}") from None
    size = data.size if isinstance(data, Sparse) else len(data)
    return ImageInfo(file=f"{i}.{FORMAT_EXT[fmt]}", width=w, height=h, format=fmt, bytes=size), payload


def _read_image(ref, full: bool) -> bytes:
    """The bytes to check: all of them, or (``full=False``, a local file) its head and tail as a Sparse."""
    if not isinstance(ref, str):
        return bytes(ref)
    if storage.is_url(ref):  # object storage: read it whole (one GET)
        data = storage.cat(ref)
        if len(data) > MAX_IMAGE_BYTES:
            raise storage.FileTooLarge(errno.EFBIG, f"image is more than the limit of {MAX_IMAGE_BYTES} bytes")
        return data
    if full:
        return storage.read_regular(ref, MAX_IMAGE_BYTES, "image file")
    return _read_sparse(ref)


def _read_sparse(path: str) -> bytes:
    head = storage.read_regular_parts(path, MAX_IMAGE_BYTES, HEAD_BYTES, TAIL_BYTES, "image file")
    if isinstance(head, bytes):
        return head
    data, tail, size = head
    return Sparse.of(data, tail, size)
