"""The loader's iterable dataset: one rank's epochs, split by DataLoader worker, read, processed and batched.

``BatchStream.iter_worker(w)`` yields ``(BatchMeta, batch or None)``: worker ``w``'s positions of the plan
(``loaders.pipeline.Plan``), each sample read (``dataset.reader``: the JSON member only for the image-free view),
processed (``loaders.process.SampleProcessor``) and collated ``micro_batch_size`` at a time; a bad sample is
skipped and recorded (or raised with ``on_error="raise"``). ``BatchMeta`` tells the loader what each batch consumed,
so that its state is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Iterator

import torch

from vlmdata.dataset.reader import BadSampleError, SampleRef, ShardReader, parse_raw, record_skip
from vlmdata.dataset.schema import Sample
from vlmdata.loaders.collate import Collator, Processed
from vlmdata.loaders.pipeline import Consumed, Plan
from vlmdata.loaders.process import SampleProcessor


@dataclass
class BatchMeta:
    worker: int
    epoch: int
    position: int  # references of this worker's share of ``epoch`` consumed after this batch
    samples: int
    skipped: list
    keys: list
    lengths: list  # token length of each sample before any truncation to seq_length
    truncated: list = dataclass_field(default_factory=list)  # {"key", "shard", "tokens", "cut"} of truncated samples


class BatchStream(torch.utils.data.IterableDataset):
    """Yields (meta, batch) for epochs ``start_epoch .. end_epoch - 1`` (None: forever) of this rank; splits
    by DataLoader worker itself. One iterator spans all epochs, so DataLoader workers are started once per
    ``VlmLoader`` iteration and never at an epoch boundary."""

    def __init__(
        self,
        kind,
        payload,
        plan: Plan,
        processor: SampleProcessor,
        collator: Collator,
        *,
        rank: int,
        world: int,
        num_workers: int,
        micro_batch_size: int,
        on_error: str,
        drop_last: bool = False,
    ):
        self.kind, self.payload, self.plan = kind, payload, plan
        self.processor, self.collator = processor, collator
        self.rank, self.world, self.num_workers = rank, world, max(1, num_workers)
        self.mbs, self.on_error, self.drop_last = micro_batch_size, on_error, drop_last
        self.start_epoch = 0
        self.end_epoch: int | None = 1  # None: forever
        self.bases: dict[int, Consumed] = {}  # epoch -> positions consumed before this iteration began

    def _load(self, reader, item) -> Sample:
        if self.kind == "source":
            return self.payload.get(item)
        ref: SampleRef = self.plan.ref(item)
        shard = self.payload[ref.shard]
        if ref.error is not None:
            raise BadSampleError(ref.error[1], shard=shard, key=ref.key, reason=ref.error[0])
        drop = self.processor.images == "drop"
        try:
            if drop:  # the image-free view reads the JSON member only (no image I/O)
                files = reader.read(
                    SampleRef(ref.shard, ref.key, {k: v for k, v in ref.members.items() if k == "json"})
                )
            else:
                files = reader.read(ref)
        except OSError as e:
            raise BadSampleError(f"read failed: {e}", shard=shard, key=ref.key, reason="read_error") from e
        try:
            return parse_raw(files, ref.key, with_images=not drop)
        except BadSampleError as e:
            e.shard = shard
            raise

    def _epoch(self, reader, worker: int, epoch: int) -> Iterator[tuple[BatchMeta, dict | None]]:
        items = self.plan.stream(epoch, self.rank, self.world, worker, self.num_workers, self.bases.get(epoch))
        pending: list[Processed] = []
        skipped: list[dict] = []
        pos = 0
        for item in items:
            pos += 1
            try:
                sample = self._load(reader, item)
                pending.append(self.processor(sample))
            except BadSampleError as e:
                ref = self.plan.ref(item) if self.kind == "shards" else None
                shard = e.shard or (self.payload[ref.shard] if ref is not None else f"source[{item}]")
                key = e.key or (ref.key if ref is not None else str(item))
                if self.on_error == "raise":
                    raise BadSampleError(f"shard {shard} key {key}: {e}", shard, key, e.reason) from e
                skipped.append(record_skip(shard, key, e.reason, str(e)))
            if len(pending) == self.mbs:
                yield self._meta(worker, epoch, pos, pending, skipped), self.collator(pending)
                pending, skipped = [], []
        if pending and not self.drop_last:
            yield self._meta(worker, epoch, pos, pending, skipped), self.collator(pending)
        elif skipped or pending:  # tail with no batch: still report the skips and the position
            yield BatchMeta(worker, epoch, pos, 0, skipped, [], []), None

    def _meta(self, worker: int, epoch: int, pos: int, pending: list[Processed], skipped: list) -> BatchMeta:
        cut = [{"key": p.key, "tokens": len(p.row), "cut": p.truncated} for p in pending if p.truncated]
        return BatchMeta(
            worker, epoch, pos, len(pending), skipped, [p.key for p in pending], [len(p.row) for p in pending], cut
        )

    def iter_worker(self, worker: int) -> Iterator[tuple[BatchMeta, dict | None]]:
        reader = ShardReader(self.payload) if self.kind == "shards" else None
        try:
            epoch = self.start_epoch
            while self.end_epoch is None or epoch < self.end_epoch:
                yield from self._epoch(reader, worker, epoch)
                epoch += 1
        finally:
            if reader:
                reader.close()

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        return self.iter_worker(info.id if info is not None else 0)


def round_robin(iterators: list[Iterator]) -> Iterator:
    """Items of ``iterators`` in turn, skipping exhausted ones: the order a DataLoader delivers its
    workers' batches in (in-order mode), so an inline run yields exactly the batches a worker run does."""
    live = list(iterators)
    while live:
        for it in list(live):
            try:
                yield next(it)
            except StopIteration:
                live.remove(it)
