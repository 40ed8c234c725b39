"""``vlmdata build``: a source of image-text inputs -> WebDataset shards + manifest + Energon metadata.

Inputs are enumerated in a deterministic order; workers read and check image bytes; the main
process packs samples into shards in input order. Every input is either written or skipped with a
reason, and ``seen == written + skipped`` always holds.
"""

from __future__ import annotations

import contextlib
import glob
import json
import multiprocessing as mp
import os
import shutil
import threading
from collections import deque
from dataclasses import asdict, dataclass, fields
from itertools import islice
from typing import Callable, Iterable, Iterator

from .images import DEFAULT_MAX_IMAGE_PIXELS, ImageProblem, probe, reencode
from .manifest import MANIFEST_NAME, Accounting, write_manifest
from .schema import FORMAT_EXT, ImageInfo, Sample, check_conversation, count_image_parts, dumps
from .shardwriter import Entry, Planner, ShardRecord, write_json_atomic, write_shard
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

    def fingerprint(self) -> dict:
        """The options that decide the output bytes (workers does not)."""
        d = asdict(self)
        d.pop("workers")
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
        label = ref if isinstance(ref, str) else f"image {i}"
        if isinstance(ref, str):
            try:
                with open(ref, "rb") as f:
                    data = f.read()
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
        sample.image_info.append(ImageInfo(file=f"{i}.{FORMAT_EXT[fmt]}", width=w, height=h, format=fmt, bytes=len(data)))
        payloads.append(payload)
    images = [(info.file, p, info.bytes) for info, p in zip(sample.image_info, payloads)]
    return Entry(item.index, sample.key, dumps(sample.meta()), images)


def _prepare_chunk(args: tuple[list[SourceItem], BuildOptions]) -> list[Entry | dict]:
    items, opts = args
    return [prepare(it, opts) for it in items]


def _chunks(items: Iterable[SourceItem], n: int) -> Iterator[list[SourceItem]]:
    it = iter(items)
    while chunk := list(islice(it, n)):
        yield chunk


def _prepared(items: Iterable[SourceItem], opts: BuildOptions, pool) -> Iterator[tuple[int, Entry | dict]]:
    """(input index, result) in input order, computed in the pool when there is one."""
    if pool is None:
        for it in items:
            yield it.index, prepare(it, opts)
        return
    window = threading.Semaphore(4 * opts.workers)  # chunks in flight: bounds memory
    pending: deque[list[SourceItem]] = deque()

    def feed():
        for c in _chunks(items, CHUNK):
            window.acquire()
            pending.append(c)
            yield (c, opts)

    for results in pool.imap(_prepare_chunk, feed(), chunksize=1):
        chunk = pending.popleft()
        window.release()
        for it, res in zip(chunk, results):
            yield it.index, res


def _pack(results: Iterable[tuple[int, Entry | dict]], planner: Planner, out: str, state: str | None, pool,
          start: int, progress, fsync: bool = True) -> tuple[list[ShardRecord], int, list[dict]]:
    """Plan shards in input order and write each as soon as it closes (in the pool when there is one)."""
    written: deque = deque()
    records: list[ShardRecord] = []

    def submit(plan):
        if pool is None:
            records.append(write_shard(plan, out, state, fsync))
            return
        written.append(pool.apply_async(write_shard, (plan, out, state, fsync)))
        while len(written) > 2 * getattr(pool, "_processes", 1):
            records.append(written.popleft().get())

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
    records += [w.get() for w in written]
    return records, seen, tail


def _pool(workers: int):
    if workers <= 1:
        return contextlib.nullcontext(None)
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    return ctx.Pool(workers)


def _check_out_dir(out: str, resume: bool, overwrite: bool) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise BuildError(f"{out}: exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out) and not resume:
        if not overwrite:
            raise BuildError(f"{out}: exists and is not empty (use --overwrite to replace it, --resume to finish a build)")
        for name in os.listdir(out):
            p = os.path.join(out, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    os.makedirs(out, exist_ok=True)


def _load_resume_state(out: str, state: str, opts: BuildOptions, source: str) -> list[ShardRecord]:
    """Shard records of a previous run, verified; partial files removed."""
    from .manifest import sha256_file

    opts_path = os.path.join(state, "options.json")
    if not os.path.exists(opts_path):
        if os.path.exists(os.path.join(out, MANIFEST_NAME)):
            raise BuildError(f"{out}: build already complete (manifest.json present); nothing to resume")
        raise BuildError(f"{out}: no interrupted build to resume (no {STATE_DIR}/options.json)")
    with open(opts_path) as f:
        prev = json.load(f)
    want = {"source": os.path.abspath(source), "options": opts.fingerprint()}
    if prev != want:
        diff = sorted(k for k in want["options"] if prev.get("options", {}).get(k) != want["options"][k])
        raise BuildError(f"{out}: --resume with different source or options than the interrupted build ({diff or 'source'})")
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
    for p in glob.glob(os.path.join(out, f"{opts.prefix}-*.tar*")) + glob.glob(os.path.join(state, "*.json.tmp")):
        if os.path.basename(p) not in keep:
            os.remove(p)
    for m in range(n, n + 1_000_000):
        p = os.path.join(state, f"{m:06d}.json")
        if not os.path.exists(p):
            break
        os.remove(p)
    return records


def build(source: str, out: str, opts: BuildOptions | None = None, *, resume: bool = False, overwrite: bool = False,
          progress: Callable[[int], None] | None = None, energon: bool = True,
          energon_target: str = "vlmdata") -> dict:
    """Build shards from ``source`` into ``out``; return the manifest dict.

    Raises SourceError (bad source) or BuildError (bad options / output folder).
    """
    opts = opts or BuildOptions()
    if opts.max_count < 1:
        raise BuildError("--max-count must be at least 1")
    if opts.max_size is not None and opts.max_size < 4096:
        raise BuildError("--max-size must be at least 4096 bytes")
    if opts.verify not in ("header", "full"):
        raise BuildError(f"--verify must be 'header' or 'full', not {opts.verify!r}")
    fmt, items = open_source(source, opts.format, image_root=opts.image_root, prompt=opts.prompt,
                             image_column=opts.image_column, text_column=opts.text_column)
    _check_out_dir(out, resume, overwrite)
    state = os.path.join(out, STATE_DIR)
    done: list[ShardRecord] = []
    if resume:
        done = _load_resume_state(out, state, opts, source)
    else:
        os.makedirs(state, exist_ok=True)
        write_json_atomic(os.path.join(state, "options.json"), {"source": os.path.abspath(source), "options": opts.fingerprint()})
    start = done[-1].end_index if done else 0
    planner = Planner(opts.prefix, opts.max_count, opts.max_size, first_shard=len(done), start_index=start)
    if progress and start:
        progress(start)
    with _pool(opts.workers) as pool:
        new, seen, tail_skips = _pack(_prepared(islice(items, start, None), opts, pool), planner, out, state, pool,
                                      start, progress)
    records = done + new
    acc = Accounting.from_records(seen, records, tail_skips)
    manifest = write_manifest(out, kind="build", prefix=opts.prefix, records=records, accounting=acc,
                              options={**opts.fingerprint(), "workers": opts.workers},
                              source={"format": fmt, "path": source})
    if energon and records:
        from .energon import prepare_energon

        prepare_energon(out, [r.name for r in records], workers=max(1, opts.workers), target=energon_target)
    shutil.rmtree(state, ignore_errors=True)
    return manifest


def write_dataset(out: str, samples: Iterable[Sample], *, kind: str, options: dict, source: dict,
                  overwrite: bool = False, prefix: str = "shard", max_count: int = 1000, max_size: int | None = None,
                  workers: int = 1, progress: Callable[[int], None] | None = None, energon: bool = True,
                  energon_target: str = "vlmdata") -> dict:
    """Write in-memory samples (e.g. synthetic ones) as a dataset in exactly the ``build`` format.

    Sample keys must be unique and increasing; the manifest's ``kind`` tells the datasets apart.
    """
    if max_count < 1:
        raise BuildError("max_count must be at least 1")
    _check_out_dir(out, False, overwrite)
    planner = Planner(prefix, max_count, max_size)
    results = ((i, Entry.from_sample(s, i)) for i, s in enumerate(samples))
    records, seen, tail = _pack(results, planner, out, None, None, 0, progress)
    acc = Accounting.from_records(seen, records, tail)
    manifest = write_manifest(out, kind=kind, prefix=prefix, records=records, accounting=acc, options=options, source=source)
    if energon and records:
        from .energon import prepare_energon

        prepare_energon(out, [r.name for r in records], workers=max(1, workers), target=energon_target)
    return manifest


BUILD_OPTION_NAMES = tuple(f.name for f in fields(BuildOptions))
