"""``vlmdata build``: a source of image-text inputs -> WebDataset shards + manifest + Energon metadata.

Inputs are enumerated in a deterministic order; they are read and checked inline or, where worker
processes pay (``vlmdata.build.policy``: heavy per-input work and a free core), by workers; the main
process packs samples into shards in input order; the Energon index is written from the layout of each
shard the writer recorded (``vlmdata.dataset.nvmeta_index``). Every input is either written or skipped with a
reason, and ``seen == written + skipped`` always holds.

Safety rules (docs/RELIABILITY.md has the reasons):

- The output folder. ``overwrite`` replaces only a vlmdata dataset (a folder with a vlmdata
  ``manifest.json``, ``.nv-meta/vlmdata_loader.py`` or an interrupted build's state) and only what
  vlmdata wrote there; it never replaces the source, the image root or a folder containing either;
  and nothing is deleted before the new source has been opened and its first record read. A
  ``.vlmdata.lock`` file (``flock``) stops a second writer (build or synth) on the same folder.
  ``resume`` needs an existing interrupted build whose options *and source* (``source_fingerprint``)
  are unchanged.
- One bad input never stops a build: whatever goes wrong while preparing one input (a record nested
  too deeply, a lone surrogate, a FIFO named ``x.jpg``, a path outside the source root, ...) is a skip
  with a reason. Problems of the output (a full disk, a read-only folder) raise ``BuildError`` naming the
  path and the OS error; ``resume`` finishes the build once the problem is fixed.
- The write order makes the manifest the commit point: shards, then ``.nv-meta``, then ``manifest.json``
  (which records the Energon sample-loader hash and the shards' keys), then the state folder goes.
- ``build_shortfall`` says when a finished build wrote too little (``min_written_fraction``), with the
  top skip reasons and the parameters that likely fix it; the CLI turns that into exit code 1.

Option names appear in messages in backquotes (```max_size```); the CLI shows them as flags.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl  # POSIX only (builds fork their workers anyway)
import functools
import glob
import json
import os
import re
import shutil
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, fields
from itertools import chain, islice
from typing import Any, Callable, Iterable, Iterator

from vlmdata import storage
from vlmdata.build.engines import Engine, EngineError, LocalEngine, engine_context
from vlmdata.build.engines.ray_engine import import_ray
from vlmdata.build.policy import SMALL_INPUT, auto_workers
from vlmdata.dataset.images import (
    DEFAULT_MAX_IMAGE_PIXELS,
    TAIL_BYTES,
    ImageProblem,
    NeedFullBytes,
    Sparse,
    check_image,
    reencode,
    upright,
)
from vlmdata.dataset.manifest import MANIFEST_NAME, MANIFEST_SCHEMA, Accounting, sha256_file, write_manifest
from vlmdata.dataset.schema import (
    FORMAT_EXT,
    ImageInfo,
    Sample,
    conversation_problem,
    count_image_parts,
    dumps,
    safe_label,
)
from vlmdata.dataset.shards import Entry, Planner, ShardPlan, ShardRecord, SourceChanged, write_shard
from vlmdata.dataset.tar import END_BYTES
from vlmdata.errors import VlmdataError
from vlmdata.sources import SourceError, SourceItem, open_source, source_fingerprint
from vlmdata.sources.base import MAX_IMAGE_BYTES
from vlmdata.sources.jsonrecords import sniff

STATE_DIR = ".vlmdata-build"
LOCK_NAME = ".vlmdata.lock"
CHUNK = 32
HEAD_BYTES = 1 << 13
PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_MIN_WRITTEN_FRACTION = 0.5


class BuildError(VlmdataError):
    """A user-facing problem with the build as a whole (bad options, OUT not empty, ...)."""


@dataclass
class BuildOptions:
    prefix: str = "shard"
    max_count: int = 1000
    max_size: int | None = 512 * 1024 * 1024
    max_pixels: int | None = None  # re-encode images above this many pixels
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # refuse images above this (decompression bombs)
    verify: str = "header"  # "header" or "full" (decode every image)
    format: str | None = None
    image_root: str | None = None
    prompt: str = "Describe this image."
    image_column: str | None = None
    text_column: str | None = None
    workers: int | None = None  # processes; None: vlmdata.build.policy decides (inline unless workers pay)
    fsync: bool = False  # flush each shard to disk before its rename (power-loss durability)
    allow_outside_root: bool = False  # read record image paths outside the source root

    def fingerprint(self) -> dict:
        """The options that decide the output bytes (workers and fsync do not)."""
        d = asdict(self)
        d.pop("workers")
        d.pop("fsync")
        return d

    def check(self) -> None:
        """BuildError naming the first option that is out of range or of the wrong type."""
        for name in ("format", "image_root", "image_column", "text_column"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise BuildError(f"`{name}` must be a string or None, got {type(v).__name__}")
        for name in ("fsync", "allow_outside_root"):
            if not isinstance(getattr(self, name), bool):
                raise BuildError(f"`{name}` must be True or False, got {getattr(self, name)!r}")
        check_prefix(self.prefix)
        _int_at_least("max_count", self.max_count, 1)
        if self.max_size is not None:
            _int_at_least("max_size", self.max_size, 4096)
        if self.max_pixels is not None:
            _int_at_least("max_pixels", self.max_pixels, 1)
        _int_at_least("max_image_pixels", self.max_image_pixels, 1)
        if self.workers is not None:
            _int_at_least("workers", self.workers, 1)
        if self.verify not in ("header", "full"):
            raise BuildError(f"`verify` must be 'header' or 'full', not {self.verify!r}")
        if not isinstance(self.prompt, str) or conversation_problem(
            [
                {"role": "user", "content": [{"type": "text", "text": self.prompt}]},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            ]
        ):
            raise BuildError("`prompt` must be plain text (no control tokens such as <|im_end|>)")


def _int_at_least(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BuildError(f"`{name}` must be an integer of at least {low}, got {value!r}")


def check_prefix(prefix: str) -> None:
    """BuildError unless ``prefix`` is a plain shard-name prefix (letters, digits, ``_.-``; at most 64)."""
    if not isinstance(prefix, str) or not PREFIX_RE.match(prefix) or ".." in prefix:
        shown = safe_label(prefix, 40) if isinstance(prefix, str) else type(prefix).__name__
        raise BuildError(
            f"`prefix` {shown!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter "
            "or digit (no folders)"
        )


def key_for(index: int) -> str:
    return f"s{index:09d}"


# ----------------------------------------------------------------------------- one input


def prepare(item: SourceItem, opts: BuildOptions) -> Entry | dict:
    """Read and check one input; return an Entry to pack, or a skip record naming the input and reason.

    Images read from files that need no re-encode travel as their path (the shard writer copies
    the file), so no image bytes cross process boundaries. Never raises for a bad input: anything
    unexpected while preparing it is an ``unexpected_error`` skip naming the exception.
    """

    def skip(reason: str, detail: str) -> dict:
        return {
            "input": safe_label(item.input),
            "source_id": safe_label(item.source_id, 200),
            "reason": reason,
            "detail": safe_label(storage.redact_text(detail), 500),
        }

    try:
        return _prepare(item, opts, skip)
    except RecursionError:
        return skip("bad_record", "record nested too deeply")
    except MemoryError:
        return skip("too_large", "input too large to hold in memory")
    except Exception as e:  # noqa: BLE001 - one input must never stop the build
        return skip("unexpected_error", f"{type(e).__name__}: {e}")


def _prepare(item: SourceItem, opts: BuildOptions, skip) -> Entry | dict:
    item.resolve()
    if item.error:
        return skip(*item.error)
    bad = conversation_problem(item.conversation)
    if bad:
        return skip(*bad)
    assert item.conversation is not None  # conversation_problem found a non-empty list
    if count_image_parts(item.conversation) != len(item.images):
        return skip("bad_record", f"{count_image_parts(item.conversation)} image parts but {len(item.images)} images")
    sample = Sample(key=key_for(item.index), conversation=item.conversation, source_id=safe_label(item.source_id, 200))
    payloads: list = []
    for i, ref in enumerate(item.images):
        label = safe_label(storage.redact(ref)) if isinstance(ref, str) else f"image {i}"
        try:
            data = _read_image(ref, full=opts.verify == "full" or bool(opts.max_pixels))
        except FileNotFoundError:
            return skip("missing_file", f"{label}: no such file")
        except (storage.NotRegularFile, storage.FileTooLarge) as e:
            return skip("unreadable_file", f"{label}: {e.strerror}")
        except storage.StorageError as e:
            return skip("unreadable_file", f"{label}: {e}")
        except OSError as e:
            return skip("unreadable_file", f"{label}: {e.strerror or e}")
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
            return skip(e.reason, f"{label}: {e.detail}")
        except OSError as e:
            return skip("unreadable_file", f"{label}: {e.strerror or e}")
        size = data.size if isinstance(data, Sparse) else len(data)
        sample.image_info.append(ImageInfo(file=f"{i}.{FORMAT_EXT[fmt]}", width=w, height=h, format=fmt, bytes=size))
        payloads.append(payload)
    images = [(info.file, p, info.bytes) for info, p in zip(sample.image_info, payloads)]
    entry = Entry(
        item.index, sample.key, dumps(sample.meta()), images, input=safe_label(item.input), source_id=sample.source_id
    )
    if opts.max_size is not None and entry.tar_bytes + END_BYTES > opts.max_size:
        return skip(
            "sample_too_large",
            f"the sample takes {entry.tar_bytes + END_BYTES} bytes in a shard, more than `max_size` {opts.max_size}",
        )
    return entry


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


# ----------------------------------------------------------------------------- packing


def _prepare_chunk(args: tuple[list[SourceItem], BuildOptions]) -> list[Entry | dict]:
    items, opts = args
    return [prepare(it, opts) for it in items]


def _chunks(items: Iterable[SourceItem], n: int) -> Iterator[list[SourceItem]]:
    it = iter(items)
    while chunk := list(islice(it, n)):
        yield chunk


def _prepared(items: Iterable[SourceItem], opts: BuildOptions, engine: Engine) -> Iterator[tuple[int, Entry | dict]]:
    """(input index, result) in input order, computed on the engine (inline for one local worker)."""
    if isinstance(engine, LocalEngine) and engine.pool is None:
        for it in items:
            yield it.index, prepare(it, opts)
        return
    pending: deque[list[SourceItem]] = deque()

    def feed():
        for c in _chunks(items, CHUNK):
            pending.append(c)
            yield (c, opts)

    for results in engine.imap(_prepare_chunk, feed(), window=4 * engine.parallelism):
        chunk = pending.popleft()
        for it, res in zip(chunk, results):
            yield it.index, res


def _write_local(plan: ShardPlan, out: str, state: str | None, fsync: bool = False) -> ShardRecord:
    return write_shard(plan, out, state, fsync)  # looked up at call time (tests patch it)


def _write_remote(plan: ShardPlan, out: str, staging: str, fsync: bool = False) -> ShardRecord:
    """Write a shard in the (node-local) staging folder, upload it atomically, then record it in OUT.

    The record in ``OUT/.vlmdata-build/NNNNNN.json`` is written only after the upload has completed,
    so a record in OUT always means a complete shard in OUT; the staging folder keeps its own records
    so that ``--resume`` can upload a written-but-not-uploaded shard without writing it again.
    """
    local_state = os.path.join(staging, STATE_DIR)
    os.makedirs(local_state, exist_ok=True)
    rec = write_shard(plan, staging, local_state, fsync)
    _upload_shard(rec, staging, out, plan.no)
    return rec


def _upload_shard(rec: ShardRecord, staging: str, out: str, no: int) -> None:
    storage.put(os.path.join(staging, rec.name), storage.join(out, rec.name))
    storage.write_json(storage.join(out, STATE_DIR, f"{no:06d}.json"), rec.state_dict())


def _pack(
    results: Iterable[tuple[int, Entry | dict]],
    planner: Planner,
    writer: Callable,
    engine: Engine,
    start: int,
    progress,
) -> tuple[list[ShardRecord], int, list[dict]]:
    """Plan shards in input order and hand each to the engine as soon as it closes.

    ``writer(plan) -> ShardRecord`` must be picklable (a module-level function or a partial of one).
    An entry larger than the planner's ``max_size`` on its own is skipped (``sample_too_large``).
    """
    written: deque = deque()
    records: list[ShardRecord] = []

    def submit(plan):
        written.append(engine.submit(writer, plan))
        while len(written) > 2 * engine.parallelism:
            records.append(written.popleft().result())

    seen = start
    for index, res in results:
        seen = index + 1
        if isinstance(res, Entry) and planner.max_size is not None and res.tar_bytes + END_BYTES > planner.max_size:
            res = {
                "input": res.input or res.key,
                "source_id": res.source_id,
                "reason": "sample_too_large",
                "detail": f"the sample takes {res.tar_bytes + END_BYTES} bytes in a shard, more than `max_size` "
                f"{planner.max_size}",
            }
        if isinstance(res, Entry):
            plan = planner.add(res)
            if plan:
                submit(plan)
        else:
            planner.skip(res)
        if progress:
            progress(1)
    plan, tail = planner.finish(seen)
    if plan:
        submit(plan)
    records += [w.result() for w in written]
    return records, seen, tail


def run_build_pipeline(
    items: Iterable[SourceItem],
    opts: BuildOptions,
    planner: Planner,
    writer: Callable,
    engine: Engine,
    start: int = 0,
    progress=None,
) -> tuple[list[ShardRecord], int, list[dict]]:
    """Map per-chunk ``prepare`` work and per-shard ``writer`` work onto ``engine``; plan in between.

    Returns (records of the new shards in order, inputs seen, skips after the last shard).
    """
    return _pack(_prepared(items, opts, engine), planner, writer, engine, start, progress)


# ----------------------------------------------------------------------------- the output folder


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


def _check_not_source(out: str, protected: list[str]) -> None:
    for p in protected:
        if p and _contains(out, p):
            what = "the source" if p == protected[0] else "the image root"
            raise BuildError(
                f"{storage.redact(out)}: is {what} or a folder containing it ({storage.redact(p)}); "
                "choose another output folder"
            )


_OWNED = re.compile(
    r"^(manifest\.json(\.tmp)?|\.nv-meta|" + re.escape(STATE_DIR) + r"|[A-Za-z0-9][A-Za-z0-9_.-]*-\d{6}"
    r"\.tar(\.idx|\.tmp|\.idx\.tmp)?)$"
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


def _owned_entries(out: str) -> list[str]:
    """Paths in ``out`` that a vlmdata build or synth writes (and only those)."""
    return [p for p in storage.ls(out) if _OWNED.match(storage.basename(p))]


def _precheck_out(out: str, resume: bool, protected: list[str]) -> None:
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


def _check_out_dir(out: str, resume: bool, overwrite: bool, protected: list[str] | None = None) -> list[str]:
    """Apply the output-folder rules (module docstring) before anything is written; return the paths that
    ``overwrite`` will delete once the source has been read (``_clear``)."""
    _precheck_out(out, resume, protected or [])
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
    return _owned_entries(out)


def _clear(paths: list[str]) -> None:
    for p in paths:
        storage.rm(p, recursive=True)


@contextlib.contextmanager
def _lock(folder: str):
    """An exclusive ``flock`` on ``folder/.vlmdata.lock`` for the duration of a build or synth; BuildError when
    another process holds it. The lock file is removed (while still locked) at the end, so a dataset keeps
    no trace of it; a process that locked a file just removed retries on the new one (inode check), so
    two writers never both hold the lock. The kernel releases the lock when a process dies, however."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
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
            break
        os.close(fd)  # locked a lock file its holder had just removed: take the current one
    else:
        raise BuildError(f"{folder}: cannot take the lock {LOCK_NAME}")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _remove_if_left_empty(folder: str | None):
    """When the block fails, remove ``folder`` (one this call created) if nothing but the lock is in it."""
    try:
        yield
    except BaseException:
        if folder and os.path.isdir(folder) and set(os.listdir(folder)) <= {LOCK_NAME}:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, LOCK_NAME))
                os.rmdir(folder)
        raise


def _source_key(source: str) -> str:
    """How options.json names the source: an absolute local path, or the URL without credentials."""
    return storage.redact(source) if storage.is_url(source) else os.path.abspath(source)


def _check_resume_options(prev: dict, want: dict, out: str) -> None:
    if prev.get("source") != want["source"] or prev.get("options") != want["options"]:
        diff = sorted(k for k in want["options"] if (prev.get("options") or {}).get(k) != want["options"][k])
        raise BuildError(
            f"{out}: `resume` with different source or options than the interrupted build ({diff or 'source'})"
        )
    if "source_fingerprint" not in prev:
        raise BuildError(
            f"{out}: the interrupted build was made by an older vlmdata that did not record the source's "
            "state, so resuming could mix old and new data; rebuild with `overwrite`"
        )
    if prev["source_fingerprint"] != want["source_fingerprint"]:
        raise BuildError(
            f"{out}: the source changed since the interrupted build (files added, removed or modified); "
            "resuming would mix old and new data: rebuild with `overwrite`"
        )


def _read_options(path: str, out: str) -> dict:
    try:
        d = json.loads(storage.cat(path).decode("utf-8"))
    except (OSError, ValueError, RecursionError, storage.StorageError):
        raise BuildError(
            f"{out}: the interrupted build's {STATE_DIR}/options.json is unreadable; rebuild with `overwrite`"
        ) from None
    if not isinstance(d, dict):
        raise BuildError(
            f"{out}: the interrupted build's {STATE_DIR}/options.json is malformed; rebuild with `overwrite`"
        )
    return d


def _load_resume_state(out: str, state: str, opts: BuildOptions, want: dict) -> list[ShardRecord]:
    """Shard records of a previous run, verified; partial files removed."""
    opts_path = os.path.join(state, "options.json")
    if not os.path.exists(opts_path):
        if os.path.exists(os.path.join(out, MANIFEST_NAME)):
            raise BuildError(f"{out}: build already complete (manifest.json present); nothing to resume")
        raise BuildError(f"{out}: no interrupted build to resume (no {STATE_DIR}/options.json)")
    _check_resume_options(_read_options(opts_path, out), want, out)
    return _verified_local_records(out, state, opts.prefix)


def _record(data: dict) -> ShardRecord | None:
    try:
        return ShardRecord(**{k: v for k, v in data.items() if k in {f.name for f in fields(ShardRecord)}})
    except TypeError:
        return None


def _verified_local_records(out: str, state: str, prefix: str) -> list[ShardRecord]:
    """Records in ``state`` whose shard in ``out`` has the recorded size and sha256, in order; shard files
    and records past the first bad one are removed."""

    records = []
    n = 0
    while os.path.exists(p := os.path.join(state, f"{n:06d}.json")):
        try:
            with open(p) as f:
                rec = _record(json.load(f))
        except (OSError, ValueError):
            rec = None
        if rec is None:
            break
        path = os.path.join(out, rec.name)
        if not os.path.exists(path) or os.path.getsize(path) != rec.bytes or sha256_file(path) != rec.sha256:
            break  # the record outlived its shard: redo from here
        records.append(rec)
        n += 1
    keep = {r.name for r in records}
    for p in glob.glob(os.path.join(glob.escape(out), f"{glob.escape(prefix)}-*.tar*")) + glob.glob(
        os.path.join(glob.escape(state), "*.json.tmp")
    ):
        if os.path.basename(p) not in keep:
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
    for m in range(n, n + 1_000_000):
        p = os.path.join(state, f"{m:06d}.json")
        if not os.path.exists(p):
            break
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
    return records


def _load_remote_resume_state(out: str, staging: str, opts: BuildOptions, want: dict) -> list[ShardRecord]:
    """Records of shards already in OUT, then shards written to staging but not uploaded (uploaded now).

    A shard in OUT counts when its record exists and its object has the recorded size (uploads are
    atomic, so a present object is a complete one). Objects and records past the last good shard are
    removed, in OUT and in staging.
    """
    state = storage.join(out, STATE_DIR)
    shown = storage.redact(out)
    if not storage.exists(storage.join(state, "options.json")):
        if storage.exists(storage.join(out, MANIFEST_NAME)):
            raise BuildError(f"{shown}: build already complete (manifest.json present); nothing to resume")
        raise BuildError(f"{shown}: no interrupted build to resume (no {STATE_DIR}/options.json)")
    _check_resume_options(_read_options(storage.join(state, "options.json"), shown), want, shown)
    in_state = set(storage.ls(state))
    records: list[ShardRecord] = []
    while (p := storage.join(state, f"{len(records):06d}.json")) in in_state:
        rec = _record(storage.read_json(p))
        if rec is None:
            break
        try:
            ok = storage.size(storage.join(out, rec.name)) == rec.bytes
        except FileNotFoundError:
            ok = False
        if not ok:
            break
        records.append(rec)
    # staged shards that were written but whose upload did not finish: verify locally, upload now
    local_state = os.path.join(staging, STATE_DIR)
    staged = _verified_local_records(staging, local_state, opts.prefix) if os.path.isdir(local_state) else []
    for rec in staged[len(records) :]:
        if rec.start_index != (records[-1].end_index if records else 0):
            break
        _upload_shard(rec, staging, out, len(records))
        records.append(rec)
    keep = {r.name for r in records}
    for p in storage.ls(out):
        name = storage.basename(p)
        if name.startswith(f"{opts.prefix}-") and ".tar" in name and name not in keep:
            storage.rm(p)
    for p in in_state:
        name = storage.basename(p)
        if name != "options.json" and not (
            name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < len(records)
        ):
            storage.rm(p)
    for name in os.listdir(staging) if os.path.isdir(staging) else []:
        if name.startswith(f"{opts.prefix}-") and ".tar" in name and name not in keep:
            os.remove(os.path.join(staging, name))
    return records


def default_staging(out: str) -> str:
    """Node-local folder where shards for a remote OUT are written before upload (stable per OUT, for --resume)."""
    import hashlib
    import tempfile

    tag = hashlib.sha256(storage.redact(out).encode()).hexdigest()[:16]
    return os.path.join(os.environ.get("VLMDATA_STAGING", os.path.join(tempfile.gettempdir(), "vlmdata-staging")), tag)


def _energon(root: str, records: list[ShardRecord], energon: bool, workers: int, target: str) -> dict | None:
    if not (energon and records):
        return None
    from vlmdata.dataset.nvmeta import prepare_energon  # imports yaml and sqlite3 only when metadata is written

    try:
        return prepare_energon(
            root,
            [r.name for r in records],
            workers=max(1, workers),
            target=target,
            layouts={r.name: r.layout for r in records if r.layout is not None},
        )
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - Energon's own errors: the shards are there, resume redoes this step
        raise BuildError(
            f"{root}: Energon indexing failed ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); "
            "the shards are complete: `resume` retries"
        ) from None


def _finish_remote(
    out: str,
    staging: str,
    records: list[ShardRecord],
    manifest_args: dict,
    energon: bool,
    workers: int,
    energon_target: str,
) -> dict:
    """Index the shards in staging (from their recorded layouts; a resumed shard not staged here is fetched
    to read its headers), upload the index and
    metadata, then manifest.json last: its presence in OUT marks a complete dataset."""
    os.makedirs(staging, exist_ok=True)
    for r in records:
        p = os.path.join(staging, r.name)
        if energon and r.layout is None and (not os.path.exists(p) or os.path.getsize(p) != r.bytes):
            storage.get(storage.join(out, r.name), p)  # no layout (resumed) and not staged here: fetch it to index
    record = _energon(staging, records, energon, workers, energon_target)
    manifest = write_manifest(staging, **manifest_args, extra={"energon": record})
    if record is not None:
        for r in records:
            storage.put(os.path.join(staging, r.name + ".idx"), storage.join(out, r.name + ".idx"))
        meta = os.path.join(staging, ".nv-meta")
        for d, _, files in os.walk(meta):
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(d, f), staging)
                storage.put(os.path.join(d, f), storage.join(out, *rel.split(os.sep)))
    storage.put(os.path.join(staging, MANIFEST_NAME), storage.join(out, MANIFEST_NAME))
    storage.rm(storage.join(out, STATE_DIR), recursive=True)
    shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _peek(items: Iterator[SourceItem], source: str) -> Iterator[SourceItem]:
    """``items`` with the first one already read (so a source that cannot be opened fails here, before the
    output folder is touched); SourceError when the source has no inputs at all."""
    try:
        first = next(items)
    except StopIteration:
        raise SourceError(f"{storage.redact(source)}: the source has no inputs") from None
    except (OSError, storage.StorageError) as e:
        raise SourceError(
            f"{storage.redact(source)}: cannot read ({storage.redact_text(getattr(e, 'strerror', None) or e)})"
        ) from None
    return chain([first], items)


def _output_error(e: OSError, out: str) -> BuildError:
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


# ----------------------------------------------------------------------------- build


def build(
    source: str,
    out: str,
    opts: BuildOptions | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
    energon: bool = True,
    energon_target: str = "vlmdata",
    engine: "Engine | str | None" = None,
    address: str | None = None,
    staging: str | None = None,
) -> dict:
    """Build shards from ``source`` into ``out``; return the manifest dict.

    ``source`` and ``out`` may be local paths or fsspec URLs (``s3://bucket/prefix``, ``file://...``).
    ``engine``: "local" (default; ``opts.workers`` processes), "ray" (Ray tasks; local Ray with
    ``opts.workers`` CPUs, or the cluster at ``address``) or an Engine instance. ``opts.workers=None``
    lets ``vlmdata.build.policy`` choose (inline unless worker processes pay). The output does not
    depend on the engine or the number of workers.
    For a remote ``out``, shards are written to ``staging`` (default: a folder under the temp dir,
    stable per OUT so that --resume finds it) and uploaded atomically.
    See the module docstring for the rules on ``overwrite``, ``resume`` and the lock.

    Raises SourceError (bad source), BuildError (bad options / output folder / output not writable),
    EngineError.
    """
    for name, value in (("source", source), ("out", out)):
        if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
            raise BuildError(f"`{name}` must be a path or URL, got {value!r}"[:200])
    if opts is not None and not isinstance(opts, BuildOptions):
        raise BuildError(f"`opts` must be a BuildOptions, got {type(opts).__name__} (BuildOptions(**d) builds one)")
    if progress is not None and not callable(progress):
        raise BuildError(f"`progress` must be a callable or None, got {type(progress).__name__}")
    for name, flag in (("resume", resume), ("overwrite", overwrite), ("energon", energon)):
        if not isinstance(flag, bool):
            raise BuildError(f"`{name}` must be True or False, got {flag!r}")
    source, out = str(os.fspath(source)), str(os.fspath(out))
    opts = opts or BuildOptions()
    opts.check()
    if resume and overwrite:
        raise BuildError("`resume` and `overwrite` exclude each other")
    if energon_target not in ("vlmdata", "bridge"):
        raise BuildError(f"`energon_target` must be 'vlmdata' or 'bridge', not {energon_target!r}")
    if engine == "ray":  # fail before touching OUT
        import_ray()
    try:
        source, out = storage.local(source), storage.local(out)
    except storage.CredentialsInURL as e:
        raise BuildError(str(e)) from None
    if not storage.is_url(out) and "\0" in out:
        raise BuildError("output path contains a NUL byte")
    if not storage.is_url(source) and "\0" in source:
        raise SourceError("source path contains a NUL byte")
    if opts.image_root is not None and "\0" in opts.image_root:
        raise SourceError("`image_root` contains a NUL byte")
    remote = storage.is_url(out)
    staging = (staging or default_staging(out)) if remote else None
    created = not remote and not os.path.lexists(out)
    try:
        _precheck_out(out, resume, [source] + ([storage.local(opts.image_root)] if opts.image_root else []))
        with _lock(out if staging is None else staging), _remove_if_left_empty(out if created else None):
            return _build_locked(
                source, out, opts, resume, overwrite, progress, energon, energon_target, engine, address, staging
            )
    except SourceChanged as e:
        raise BuildError(f"{e} (the build stopped; run again with `resume`)") from None
    except (BuildError, SourceError, EngineError, storage.StorageError):
        raise
    except OSError as e:
        raise _output_error(e, out) from None


def _build_locked(
    source, out, opts, resume, overwrite, progress, energon, energon_target, engine, address, staging
) -> dict:
    remote = storage.is_url(out)
    fmt, items = open_source(
        source,
        opts.format,
        image_root=opts.image_root,
        prompt=opts.prompt,
        deferred=True,
        image_column=opts.image_column,
        text_column=opts.text_column,
        allow_outside_root=opts.allow_outside_root,
    )
    protected = [source] + ([storage.local(opts.image_root)] if opts.image_root else [])
    to_delete = _check_out_dir(out, resume, overwrite, protected)
    items = _peek(iter(items), source)
    try:
        fingerprint = {
            "source": _source_key(source),
            "options": opts.fingerprint(),
            "source_fingerprint": source_fingerprint(source, fmt, exclude=None if remote else out),
        }
    except (OSError, storage.StorageError) as e:
        raise SourceError(f"{storage.redact(source)}: cannot read ({storage.redact_text(e)})") from None
    _clear(to_delete)  # the source is open and its first record read: only now replace the old dataset
    done: list[ShardRecord] = []
    if remote:
        if resume:
            done = _load_remote_resume_state(out, staging, opts, fingerprint)
        else:
            for p in os.listdir(staging):
                if p != LOCK_NAME:
                    storage.rm(os.path.join(staging, p), recursive=True)
            storage.write_json(storage.join(out, STATE_DIR, "options.json"), fingerprint)
        os.makedirs(os.path.join(staging, STATE_DIR), exist_ok=True)
        writer = functools.partial(_write_remote, out=out, staging=staging, fsync=opts.fsync)
    else:
        state = os.path.join(out, STATE_DIR)
        if resume:
            done = _load_resume_state(out, state, opts, fingerprint)
        else:
            os.makedirs(state, exist_ok=True)
            storage.write_json(os.path.join(state, "options.json"), fingerprint)
        writer = functools.partial(_write_local, out=out, state=state, fsync=opts.fsync)
    start = done[-1].end_index if done else 0
    planner = Planner(opts.prefix, opts.max_count, opts.max_size, first_shard=len(done), start_index=start)
    if progress and start:
        progress(start)
    workers = opts.workers
    if workers is None:  # vlmdata.build.policy: the first inputs tell a small source from a large one
        head = list(islice(items, SMALL_INPUT))
        items = chain(head, items)
        heavy = (
            opts.verify == "full"
            or bool(opts.max_pixels)
            or storage.is_url(source)
            or bool(opts.image_root and storage.is_url(opts.image_root))
        )
        workers = auto_workers(
            heavy=heavy, small=len(head) < SMALL_INPUT, engine=engine if isinstance(engine, str) else "local"
        )
    with engine_context(engine, workers, address) as eng:
        new, seen, tail_skips = run_build_pipeline(
            islice(items, start, None), opts, planner, writer, eng, start, progress
        )
    records = done + new
    acc = Accounting.from_records(seen, records, tail_skips)
    manifest_args: dict[str, Any] = dict(
        kind="build",
        prefix=opts.prefix,
        records=records,
        accounting=acc,
        options={**opts.fingerprint(), "workers": workers},
        source={"format": fmt, "path": storage.redact(source), "fingerprint": fingerprint["source_fingerprint"]},
    )
    if remote:
        return _finish_remote(out, staging, records, manifest_args, energon, workers, energon_target)
    record = _energon(out, records, energon, workers, energon_target)
    manifest = write_manifest(out, **manifest_args, extra={"energon": record})  # the commit point
    shutil.rmtree(state, ignore_errors=True)
    return manifest


def build_shortfall(
    manifest: dict,
    min_written_fraction: float = DEFAULT_MIN_WRITTEN_FRACTION,
    source: str | None = None,
    opts: BuildOptions | None = None,
) -> dict | None:
    """None when a finished build wrote enough, else why not and what likely fixes it.

    Args:
        manifest: the manifest ``build`` returned.
        min_written_fraction: the bar (0 turns the fraction check off).
        source, opts: the build's source and options (for the hints).

    "Enough": at least one sample, and ``written >= min_written_fraction * seen`` (0 turns the fraction
    check off; writing nothing always falls short). Returns ``{"written", "seen", "fraction", "bar",
    "top_reasons": [{"reason", "count", "example"}], "hints": [{"param", "why"}]}``; ``param`` names
    the option that likely fixes it (``image_root``, ``format``, ``allow_outside_root``, ...) or None.
    """
    acc = manifest.get("accounting", {})
    seen, written = acc.get("seen", 0), acc.get("written", 0)
    if written > 0 and (min_written_fraction <= 0 or written >= min_written_fraction * seen):
        return None
    skips = acc.get("skipped_samples", [])
    counts = Counter(s.get("reason", "?") for s in skips)
    top = []
    for reason, n in counts.most_common(3):
        ex = next(s for s in skips if s.get("reason") == reason)
        top.append({"reason": reason, "count": n, "example": f"{ex.get('input')}: {ex.get('detail')}"})
    return {
        "written": written,
        "seen": seen,
        "fraction": (written / seen) if seen else 0.0,
        "bar": min_written_fraction,
        "top_reasons": top,
        "hints": _hints(counts, manifest, source, opts),
    }


def _hints(counts: Counter, manifest: dict, source: str | None, opts: BuildOptions | None) -> list[dict]:
    fmt = (manifest.get("source") or {}).get("format")
    opts = opts or BuildOptions()
    hints = []
    top = counts.most_common(1)[0][0] if counts else None
    if counts.get("missing_file") and fmt in ("llava", "messages"):
        if opts.image_root:
            hints.append(
                {
                    "param": "image_root",
                    "why": f"image paths were read relative to {opts.image_root}; "
                    "check that it is the folder the records' paths are relative to",
                }
            )
        else:
            where = storage.dirname(storage.local(source)) if source else "the JSON file's folder"
            hints.append(
                {
                    "param": "image_root",
                    "why": f"image paths were read relative to {storage.redact(where)} "
                    "(the JSON file's folder); give the folder they are relative to",
                }
            )
    if counts.get("outside_root"):
        hints.append(
            {
                "param": "allow_outside_root",
                "why": "records point to images outside the source root; allow it if you trust the records",
            }
        )
    if fmt in ("llava", "messages") and source and (counts.get("bad_record") or counts.get("bad_json")):
        try:
            looks = sniff(storage.local(source))
        except Exception:  # noqa: BLE001 - a hint must never fail the report
            looks = None
        if looks and looks != fmt:
            hints.append(
                {"param": "format", "why": f"the records look like '{looks}' data, the build read them as '{fmt}'"}
            )
    if fmt == "folder" and top == "missing_caption":
        hints.append({"param": None, "why": "each image needs a caption NAME.txt or NAME.json beside it"})
    if counts.get("too_large"):
        hints.append(
            {
                "param": "max_image_pixels",
                "why": "images above the pixel limit were skipped as possible "
                "decompression bombs; raise it if they are genuine",
            }
        )
    if counts.get("sample_too_large"):
        hints.append(
            {
                "param": "max_size",
                "why": "samples larger than a whole shard were skipped; raise the shard "
                "size or downscale with max_pixels",
            }
        )
    return hints


# ----------------------------------------------------------------------------- in-memory samples


def write_dataset(
    out: str,
    samples: Iterable[Sample],
    *,
    kind: str,
    options: dict,
    source: dict,
    overwrite: bool = False,
    prefix: str = "shard",
    max_count: int = 1000,
    max_size: int | None = None,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    energon: bool = True,
    energon_target: str = "vlmdata",
    engine: "Engine | str | None" = None,
    address: str | None = None,
) -> dict:
    """Write in-memory samples (e.g. synthetic ones) as a dataset in exactly the ``build`` format.

    Sample keys must be unique and increasing; the manifest's ``kind`` tells the datasets apart.
    ``engine`` (None: inline; "local"; "ray" with ``address``) runs the per-shard writes (the samples
    themselves are produced by the caller); the output does not depend on it. The output-folder rules,
    the lock and the write order are the build's (module docstring); a sample larger than ``max_size``
    on its own is skipped (``sample_too_large``).
    """
    _int_at_least("max_count", max_count, 1)
    if max_size is not None:
        _int_at_least("max_size", max_size, 4096)
    check_prefix(prefix)
    try:
        out = storage.local(out)
    except storage.CredentialsInURL as e:
        raise BuildError(str(e)) from None
    if storage.is_url(out):
        raise BuildError(f"{storage.redact(out)}: in-memory samples are written to local folders only")
    created = not os.path.lexists(out)
    try:
        _precheck_out(out, False, [])
        with _lock(out), _remove_if_left_empty(out if created else None):
            to_delete = _check_out_dir(out, False, overwrite)
            _clear(to_delete)
            planner = Planner(prefix, max_count, max_size)
            results = ((i, Entry.from_sample(s, i)) for i, s in enumerate(samples))
            writer = functools.partial(_write_local, out=out, state=None)
            with engine_context(engine, 1 if engine is None else workers, address) as eng:
                records, seen, tail = _pack(results, planner, writer, eng, 0, progress)
            acc = Accounting.from_records(seen, records, tail)
            record = _energon(out, records, energon, workers, energon_target)
            return write_manifest(
                out,
                kind=kind,
                prefix=prefix,
                records=records,
                accounting=acc,
                options=options,
                source=source,
                extra={"energon": record},
            )
    except OSError as e:
        raise _output_error(e, out) from None


BUILD_OPTION_NAMES = tuple(f.name for f in fields(BuildOptions))
