"""The loader's iterable dataset: one rank's epochs, split by DataLoader worker, read, processed and batched.

``BatchStream.iter_worker(w)`` yields ``(BatchMeta, batch or None)``: worker ``w``'s positions of the plan
(``loaders.pipeline.Plan``), each sample read (``dataset.reader``: the JSON member only for the image-free view),
processed (``loaders.process.SampleProcessor``) and collated ``micro_batch_size`` at a time; a bad sample is
skipped and recorded (or raised with ``on_error="raise"``). ``BatchMeta`` tells the loader what each batch consumed,
per epoch (``EpochPart``), so that its state is exact.

An epoch's last batch of a worker is short when its share is not a multiple of ``micro_batch_size`` (or dropped,
``drop_last``). With ``wrap_epochs`` it is instead completed by the worker's first samples of the next epoch (as
Megatron's datasets wrap): every batch holds ``micro_batch_size`` samples, and a batch that wraps reports a part
per epoch it holds. The samples held back at an epoch's end are not consumed until their batch is yielded, so the
loader's state stays exact; an epoch whose share gave this worker no sample is reported at its end (a meta without a
batch), so that an endless loader still sees an epoch without samples. Only the last epoch of a finite run ends
short (or dropped).
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
class EpochPart:
    """What one batch consumed of one epoch of its worker's share."""

    epoch: int
    position: int  # references of the worker's share of ``epoch`` consumed after the batch
    samples: int = 0  # samples of ``epoch`` the batch holds
    skipped: list = dataclass_field(default_factory=list)  # skip records of ``epoch`` consumed with it


@dataclass
class BatchMeta:
    worker: int
    parts: list[EpochPart]  # oldest epoch first; more than one only when the batch wraps across epochs
    keys: list
    lengths: list  # token length of each sample before any truncation to seq_length
    truncated: list = dataclass_field(default_factory=list)  # {"key", "tokens", "cut"} of truncated samples
    epochs: list = dataclass_field(default_factory=list)  # the epoch of each sample (parallel to ``keys``)

    @property
    def epoch(self) -> int:
        """The latest epoch the batch holds."""
        return self.parts[-1].epoch

    @property
    def samples(self) -> int:
        return sum(p.samples for p in self.parts)

    @property
    def skipped(self) -> list:
        return [s for p in self.parts for s in p.skipped]


class _Pending:
    """A worker's batch being filled: its samples and what it consumed of each epoch."""

    def __init__(self) -> None:
        self.samples: list[Processed] = []
        self.epochs: list[int] = []
        self.parts: dict[int, EpochPart] = {}

    def add(self, epoch: int, position: int, processed: Processed | None, skip: dict | None) -> None:
        part = self.parts.setdefault(epoch, EpochPart(epoch, position))
        part.position = position
        if processed is not None:
            self.samples.append(processed)
            self.epochs.append(epoch)
            part.samples += 1
        if skip is not None:
            part.skipped.append(skip)

    def take(self, worker: int, collator: Collator | None) -> tuple[BatchMeta, dict | None]:
        """The meta and batch of everything pending (no batch, and no sample counted, without ``collator``:
        a dropped tail); the pending batch starts empty again."""
        parts = [self.parts[e] for e in sorted(self.parts)]
        if collator is None or not self.samples:
            for p in parts:
                p.samples = 0
            meta, batch = BatchMeta(worker, parts, [], []), None
        else:
            got = self.samples
            cut = [{"key": p.key, "tokens": len(p.row), "cut": p.truncated} for p in got if p.truncated]
            meta = BatchMeta(worker, parts, [p.key for p in got], [len(p.row) for p in got], cut, list(self.epochs))
            batch = collator(got)
        self.samples, self.epochs, self.parts = [], [], {}
        return meta, batch

    def take_epoch(self, worker: int, epoch: int) -> tuple[BatchMeta, None] | None:
        """The meta of ``epoch``'s part when it holds no sample (its skips and position), removed from the
        pending batch; None when the batch holds samples of ``epoch`` or nothing of it."""
        part = self.parts.get(epoch)
        if part is None or part.samples:
            return None
        del self.parts[epoch]
        return BatchMeta(worker, [part], [], []), None


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
        wrap_epochs: bool = False,
    ):
        self.kind, self.payload, self.plan = kind, payload, plan
        self.processor, self.collator = processor, collator
        self.rank, self.world, self.num_workers = rank, world, max(1, num_workers)
        self.mbs, self.on_error, self.drop_last, self.wrap = micro_batch_size, on_error, drop_last, wrap_epochs
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

    def _items(self, reader, worker: int, epoch: int) -> Iterator[tuple[int, Processed | None, dict | None]]:
        """(position after it, processed sample or None, skip record or None) of each reference of worker
        ``worker``'s share of ``epoch`` not consumed yet."""
        items = self.plan.stream(epoch, self.rank, self.world, worker, self.num_workers, self.bases.get(epoch))
        for pos, item in enumerate(items, 1):
            try:
                got, skip = self.processor(self._load(reader, item)), None
            except BadSampleError as e:
                ref = self.plan.ref(item) if self.kind == "shards" else None
                shard = e.shard or (self.payload[ref.shard] if ref is not None else f"source[{item}]")
                key = e.key or (ref.key if ref is not None else str(item))
                if self.on_error == "raise":
                    raise BadSampleError(f"shard {shard} key {key}: {e}", shard, key, e.reason) from e
                got, skip = None, record_skip(shard, key, e.reason, str(e))
            yield pos, got, skip

    def _epoch_end(self, pending: _Pending, worker: int, epoch: int) -> Iterator[tuple[BatchMeta, dict | None]]:
        """What a worker yields at the end of its share of ``epoch`` (module docstring)."""
        last = self.end_epoch is not None and epoch >= self.end_epoch - 1
        if self.wrap and not last:  # the pending samples wait for the next epoch's first ones
            done = pending.take_epoch(worker, epoch)
            if done is not None:
                yield done
        elif pending.samples and not self.drop_last:
            yield pending.take(worker, self.collator)
        elif pending.parts:  # tail with no batch: still report the skips and the position
            yield pending.take(worker, None)

    def iter_worker(self, worker: int) -> Iterator[tuple[BatchMeta, dict | None]]:
        reader = ShardReader(self.payload) if self.kind == "shards" else None
        pending = _Pending()
        try:
            epoch = self.start_epoch
            while self.end_epoch is None or epoch < self.end_epoch:
                for pos, got, skip in self._items(reader, worker, epoch):
                    pending.add(epoch, pos, got, skip)
                    if len(pending.samples) == self.mbs:
                        yield pending.take(worker, self.collator)
                yield from self._epoch_end(pending, worker, epoch)
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
