"""``vlmdata build``: a source of image-text inputs -> WebDataset shards + manifest + Energon metadata.

Inputs are enumerated in a deterministic order; workers read and check image bytes; the main
process packs samples into shards in input order. Every input is either written or skipped with a
reason, and ``seen == written + skipped`` always holds.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import shutil
from collections import deque
from dataclasses import asdict, dataclass, fields
from itertools import islice
from typing import Callable, Iterable, Iterator

from .images import DEFAULT_MAX_IMAGE_PIXELS, ImageProblem, fast_header, probe, reencode
from .manifest import MANIFEST_NAME, Accounting, write_manifest
from .schema import FORMAT_EXT, ImageInfo, Sample, check_conversation, count_image_parts, dumps
from . import storage
from .engines import Engine, LocalEngine, engine_context
from .shardwriter import Entry, Planner, ShardPlan, ShardRecord, write_json_atomic, write_shard
from .sources import SourceItem, open_source

STATE_DIR = ".vlmdata-build"
CHUNK = 32


class BuildError(Exception):
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
    workers: int = 1
    fsync: bool = False  # flush each shard to disk before its rename (power-loss durability)

    def fingerprint(self) -> dict:
        """The options that decide the output bytes (workers and fsync do not)."""
        d = asdict(self)
        d.pop("workers")
        d.pop("fsync")
        return d


def key_for(index: int) -> str:
    return f"s{index:09d}"


def prepare(item: SourceItem, opts: BuildOptions) -> Entry | dict:
    """Read and check one input; return an Entry to pack, or a skip record naming the input and reason.

    Images read from files that need no re-encode travel as their path (the shard writer copies
    the file), so no image bytes cross process boundaries.
    """

    def skip(reason: str, detail: str) -> dict:
        return {"input": item.input, "source_id": item.source_id, "reason": reason, "detail": detail}

    item.resolve()
    if item.error:
        return skip(*item.error)
    problem = check_conversation(item.conversation)
    if problem:
        return skip("empty_caption" if "answer" in problem else "bad_record", problem)
    if count_image_parts(item.conversation) != len(item.images):
        return skip("bad_record", f"{count_image_parts(item.conversation)} image parts but {len(item.images)} images")
    sample = Sample(key=key_for(item.index), conversation=item.conversation, source_id=item.source_id)
    payloads: list = []
    for i, ref in enumerate(item.images):
        label = storage.redact(ref) if isinstance(ref, str) else f"image {i}"
        if isinstance(ref, str):
            if storage.is_url(ref):  # object storage: read it whole (one GET); other errors are retried
                try:
                    data = storage.cat(ref)
                except FileNotFoundError:
                    return skip("missing_file", f"{storage.redact(ref)}: no such file")
            else:
                try:
                    data = _read_for_probe(ref, full=opts.verify == "full" or bool(opts.max_pixels))
                    if isinstance(data, _Sparse) and fast_header(data) is None:  # needs Pillow: give it everything
                        data = _read_for_probe(ref, full=True)
                except FileNotFoundError:
                    return skip("missing_file", f"{ref}: no such file")
                except OSError as e:
                    return skip("unreadable_file", f"{ref}: {e.strerror}")
        else:
            data = ref
        payload = ref
        try:
            fmt, w, h = probe(data, max_image_pixels=opts.max_image_pixels, verify=opts.verify)
            if opts.max_pixels and w * h > opts.max_pixels:
                data, fmt, w, h = reencode(data, opts.max_pixels)
                payload = data
        except ImageProblem as e:
            return skip(e.reason, f"{label}: {e.detail}")
        fmt = "JPEG" if fmt == "MPO" else fmt
        size = data.size if isinstance(data, _Sparse) else len(data)
        sample.image_info.append(ImageInfo(file=f"{i}.{FORMAT_EXT[fmt]}", width=w, height=h, format=fmt, bytes=size))
        payloads.append(payload)
    images = [(info.file, p, info.bytes) for info, p in zip(sample.image_info, payloads)]
    return Entry(item.index, sample.key, dumps(sample.meta()), images)


class _Sparse(bytes):
    """The head of a file plus its last bytes: enough to probe a header and an end marker."""

    size: int


def _read_for_probe(path: str, full: bool, head: int = 1 << 13) -> bytes:
    with open(path, "rb") as f:
        if full:
            return f.read()
        data = f.read(head)
        if len(data) < head:
            return data
        size = os.fstat(f.fileno()).st_size
        f.seek(max(head, size - 32))
        out = _Sparse(data + f.read())  # the header and the tail; probe() reads nothing in between
        out.size = size
        return out


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
    storage.write_json(storage.join(out, STATE_DIR, f"{no:06d}.json"), asdict(rec))


def _pack(results: Iterable[tuple[int, Entry | dict]], planner: Planner, writer: Callable, engine: Engine,
          start: int, progress) -> tuple[list[ShardRecord], int, list[dict]]:
    """Plan shards in input order and hand each to the engine as soon as it closes.

    ``writer(plan) -> ShardRecord`` must be picklable (a module-level function or a partial of one).
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


def run_build_pipeline(items: Iterable[SourceItem], opts: BuildOptions, planner: Planner, writer: Callable,
                       engine: Engine, start: int = 0, progress=None) -> tuple[list[ShardRecord], int, list[dict]]:
    """Map per-chunk ``prepare`` work and per-shard ``writer`` work onto ``engine``; plan in between.

    Returns (records of the new shards in order, inputs seen, skips after the last shard).
    """
    return _pack(_prepared(items, opts, engine), planner, writer, engine, start, progress)


def _check_out_dir(out: str, resume: bool, overwrite: bool) -> None:
    if storage.is_url(out):
        if storage.isfile(out):
            raise BuildError(f"{storage.redact(out)}: exists and is not a folder")
        children = storage.ls(out)
        if children and not resume:
            if not overwrite:
                raise BuildError(f"{storage.redact(out)}: exists and is not empty (use --overwrite to replace it, "
                                 "--resume to finish a build)")
            storage.rm(out, recursive=True)
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise BuildError(f"{out}: exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out) and not resume:
        if not overwrite:
            raise BuildError(f"{out}: exists and is not empty (use --overwrite to replace it, --resume to finish a build)")
        for name in os.listdir(out):
            p = os.path.join(out, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    os.makedirs(out, exist_ok=True)


def _source_key(source: str) -> str:
    """How options.json names the source: an absolute local path, or the URL without credentials."""
    return storage.redact(source) if storage.is_url(source) else os.path.abspath(source)


def _check_resume_options(prev: dict, want: dict, out: str) -> None:
    if prev != want:
        diff = sorted(k for k in want["options"] if prev.get("options", {}).get(k) != want["options"][k])
        raise BuildError(f"{out}: --resume with different source or options than the interrupted build ({diff or 'source'})")


def _load_resume_state(out: str, state: str, opts: BuildOptions, source: str) -> list[ShardRecord]:
    """Shard records of a previous run, verified; partial files removed."""
    opts_path = os.path.join(state, "options.json")
    if not os.path.exists(opts_path):
        if os.path.exists(os.path.join(out, MANIFEST_NAME)):
            raise BuildError(f"{out}: build already complete (manifest.json present); nothing to resume")
        raise BuildError(f"{out}: no interrupted build to resume (no {STATE_DIR}/options.json)")
    with open(opts_path) as f:
        prev = json.load(f)
    _check_resume_options(prev, {"source": _source_key(source), "options": opts.fingerprint()}, out)
    return _verified_local_records(out, state, opts.prefix)


def _verified_local_records(out: str, state: str, prefix: str) -> list[ShardRecord]:
    """Records in ``state`` whose shard in ``out`` has the recorded size and sha256, in order; shard files
    and records past the first bad one are removed."""
    from .manifest import sha256_file

    records = []
    n = 0
    while os.path.exists(p := os.path.join(state, f"{n:06d}.json")):
        with open(p) as f:
            rec = ShardRecord(**json.load(f))
        path = os.path.join(out, rec.name)
        if not os.path.exists(path) or os.path.getsize(path) != rec.bytes or sha256_file(path) != rec.sha256:
            break  # the record outlived its shard: redo from here
        records.append(rec)
        n += 1
    keep = {r.name for r in records}
    for p in glob.glob(os.path.join(out, f"{prefix}-*.tar*")) + glob.glob(os.path.join(state, "*.json.tmp")):
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


def _load_remote_resume_state(out: str, staging: str, opts: BuildOptions, source: str) -> list[ShardRecord]:
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
    _check_resume_options(storage.read_json(storage.join(state, "options.json")),
                          {"source": _source_key(source), "options": opts.fingerprint()}, shown)
    in_state = set(storage.ls(state))
    records: list[ShardRecord] = []
    while (p := storage.join(state, f"{len(records):06d}.json")) in in_state:
        rec = ShardRecord(**storage.read_json(p))
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
    for rec in staged[len(records):]:
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
        if name != "options.json" and not (name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < len(records)):
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


def _finish_remote(out: str, staging: str, records: list[ShardRecord], manifest_args: dict, energon: bool,
                   workers: int, energon_target: str) -> dict:
    """Index the shards with Energon in staging (fetching any not staged here), upload the index and
    metadata, then manifest.json last: its presence in OUT marks a complete dataset."""
    os.makedirs(staging, exist_ok=True)
    for r in records:
        p = os.path.join(staging, r.name)
        if energon and (not os.path.exists(p) or os.path.getsize(p) != r.bytes):
            storage.get(storage.join(out, r.name), p)  # written on another node: fetch it for indexing
    manifest = write_manifest(staging, **manifest_args)
    if energon and records:
        from .energon import prepare_energon

        prepare_energon(staging, [r.name for r in records], workers=max(1, workers), target=energon_target)
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


def build(source: str, out: str, opts: BuildOptions | None = None, *, resume: bool = False, overwrite: bool = False,
          progress: Callable[[int], None] | None = None, energon: bool = True,
          energon_target: str = "vlmdata", engine: "Engine | str | None" = None, address: str | None = None,
          staging: str | None = None) -> dict:
    """Build shards from ``source`` into ``out``; return the manifest dict.

    ``source`` and ``out`` may be local paths or fsspec URLs (``s3://bucket/prefix``, ``file://...``).
    ``engine``: "local" (default; ``opts.workers`` processes), "ray" (Ray tasks; local Ray with
    ``opts.workers`` CPUs, or the cluster at ``address``) or an Engine instance. The output does not
    depend on the engine or the number of workers.
    For a remote ``out``, shards are written to ``staging`` (default: a folder under the temp dir,
    stable per OUT so that --resume finds it) and uploaded atomically.

    Raises SourceError (bad source), BuildError (bad options / output folder), EngineError.
    """
    opts = opts or BuildOptions()
    if opts.max_count < 1:
        raise BuildError("--max-count must be at least 1")
    if opts.max_size is not None and opts.max_size < 4096:
        raise BuildError("--max-size must be at least 4096 bytes")
    if opts.verify not in ("header", "full"):
        raise BuildError(f"--verify must be 'header' or 'full', not {opts.verify!r}")
    if engine == "ray":  # fail before touching OUT
        from .engines.ray_engine import import_ray

        import_ray()
    source, out = storage.local(source), storage.local(out)
    remote = storage.is_url(out)
    fmt, items = open_source(source, opts.format, image_root=opts.image_root, prompt=opts.prompt, deferred=True,
                             image_column=opts.image_column, text_column=opts.text_column)
    _check_out_dir(out, resume, overwrite)
    done: list[ShardRecord] = []
    fingerprint = {"source": _source_key(source), "options": opts.fingerprint()}
    if remote:
        staging = staging or default_staging(out)
        if resume:
            done = _load_remote_resume_state(out, staging, opts, source)
        else:
            shutil.rmtree(staging, ignore_errors=True)
            storage.write_json(storage.join(out, STATE_DIR, "options.json"), fingerprint)
        os.makedirs(os.path.join(staging, STATE_DIR), exist_ok=True)
        writer = functools.partial(_write_remote, out=out, staging=staging, fsync=opts.fsync)
    else:
        state = os.path.join(out, STATE_DIR)
        if resume:
            done = _load_resume_state(out, state, opts, source)
        else:
            os.makedirs(state, exist_ok=True)
            write_json_atomic(os.path.join(state, "options.json"), fingerprint)
        writer = functools.partial(_write_local, out=out, state=state, fsync=opts.fsync)
    start = done[-1].end_index if done else 0
    planner = Planner(opts.prefix, opts.max_count, opts.max_size, first_shard=len(done), start_index=start)
    if progress and start:
        progress(start)
    with engine_context(engine, opts.workers, address) as eng:
        new, seen, tail_skips = run_build_pipeline(islice(items, start, None), opts, planner, writer, eng, start, progress)
    records = done + new
    acc = Accounting.from_records(seen, records, tail_skips)
    manifest_args = dict(kind="build", prefix=opts.prefix, records=records, accounting=acc,
                         options={**opts.fingerprint(), "workers": opts.workers},
                         source={"format": fmt, "path": storage.redact(source)})
    if remote:
        return _finish_remote(out, staging, records, manifest_args, energon, opts.workers, energon_target)
    manifest = write_manifest(out, **manifest_args)
    if energon and records:
        from .energon import prepare_energon

        prepare_energon(out, [r.name for r in records], workers=max(1, opts.workers), target=energon_target)
    shutil.rmtree(state, ignore_errors=True)
    return manifest


def write_dataset(out: str, samples: Iterable[Sample], *, kind: str, options: dict, source: dict,
                  overwrite: bool = False, prefix: str = "shard", max_count: int = 1000, max_size: int | None = None,
                  workers: int = 1, progress: Callable[[int], None] | None = None, energon: bool = True,
                  energon_target: str = "vlmdata", engine: "Engine | str | None" = None,
                  address: str | None = None) -> dict:
    """Write in-memory samples (e.g. synthetic ones) as a dataset in exactly the ``build`` format.

    Sample keys must be unique and increasing; the manifest's ``kind`` tells the datasets apart.
    ``engine`` (None: inline; "local"; "ray" with ``address``) runs the per-shard writes (the samples
    themselves are produced by the caller); the output does not depend on it.
    """
    if max_count < 1:
        raise BuildError("max_count must be at least 1")
    _check_out_dir(out, False, overwrite)
    planner = Planner(prefix, max_count, max_size)
    results = ((i, Entry.from_sample(s, i)) for i, s in enumerate(samples))
    writer = functools.partial(_write_local, out=out, state=None)
    with engine_context(engine, 1 if engine is None else workers, address) as eng:
        records, seen, tail = _pack(results, planner, writer, eng, 0, progress)
    acc = Accounting.from_records(seen, records, tail)
    manifest = write_manifest(out, kind=kind, prefix=prefix, records=records, accounting=acc, options=options, source=source)
    if energon and records:
        from .energon import prepare_energon

        prepare_energon(out, [r.name for r in records], workers=max(1, workers), target=energon_target)
    return manifest


BUILD_OPTION_NAMES = tuple(f.name for f in fields(BuildOptions))
