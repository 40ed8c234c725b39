"""Packing: prepared inputs -> shards, in input order, with the per-input and per-shard work on an engine.

``run_build_pipeline`` maps ``prepare`` over chunks of ``CHUNK`` inputs on the engine (results come back in
input order, at most a window in flight), plans shards in the calling process as the results arrive
(``dataset.shards.Planner``: which sample goes in which shard), and hands each shard to the engine to be
written as soon as it closes. Because planning is in input order in one process and only the pure work is
distributed, the output does not depend on the engine or on its number of workers.

``pack`` is the planning half alone, for callers whose entries are made already (``write_dataset``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

from vlmdata.dataset.shards import Entry, Planner, ShardRecord
from vlmdata.dataset.tar import END_BYTES
from vlmdata.ingest.engines import Engine, LocalEngine
from vlmdata.ingest.options import BuildOptions
from vlmdata.ingest.prepare import prepare
from vlmdata.sources import SourceItem

CHUNK = 32  # inputs per prepare task on a pool or Ray

Packed = tuple[list[ShardRecord], int, list[dict]]  # (records of the new shards, inputs seen, skips after the last)


def run_build_pipeline(
    items: Iterable[SourceItem],
    opts: BuildOptions,
    planner: Planner,
    writer: Callable,
    engine: Engine,
    start: int = 0,
    progress=None,
) -> Packed:
    """Map per-chunk ``prepare`` work and per-shard ``writer`` work onto ``engine``; plan in between.

    Args:
        items: the inputs, from input index ``start`` on.
        opts: the build's options (``prepare``'s).
        planner: cuts the shards (numbered on from a resumed build's).
        writer: ``writer(plan) -> ShardRecord``, picklable (``DatasetWriter.write``).
        engine: where the work runs.
        start: the index of the first input (a resumed build's inputs before it are done).
        progress: called with 1 per input.

    Returns:
        (records of the new shards in order, inputs seen, skips after the last shard).
    """
    return pack(_prepared(items, opts, engine), planner, writer, engine, start, progress)


def pack(
    results: Iterable[tuple[int, Entry | dict]],
    planner: Planner,
    writer: Callable,
    engine: Engine,
    start: int,
    progress,
) -> Packed:
    """Plan shards in input order and hand each to the engine as soon as it closes.

    ``results`` are (input index, Entry or skip record). ``writer(plan) -> ShardRecord`` must be picklable
    (a module-level function or a partial of one). An entry larger than the planner's ``max_size`` on its
    own is skipped (``sample_too_large``).
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
            res = _too_large(res, planner.max_size)
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


def _too_large(entry: Entry, max_size: int) -> dict:
    return {
        "input": entry.input or entry.key,
        "source_id": entry.source_id,
        "reason": "sample_too_large",
        "detail": f"the sample takes {entry.tar_bytes + END_BYTES} bytes in a shard, more than `max_size` {max_size}",
    }


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
