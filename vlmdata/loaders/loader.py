"""``VlmLoader``: an iterable of Bridge-ready batches with exact resume and bad-sample accounting.

It drives a ``loaders.stream.BatchStream`` (in DataLoader workers, started once per iteration, or inline), folds what
each batch consumed into per-epoch positions (``loaders.pipeline.Consumed``), and so can say at any batch which
samples are left: ``state_dict()`` / ``load_state_dict()``. Made by ``loaders.api.make_loader``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Iterator

import torch

from vlmdata.errors import VlmdataError
from vlmdata.loaders.device_images import finish_batch
from vlmdata.loaders.options import LoaderOptions
from vlmdata.loaders.pipeline import Consumed, Stats, check_epoch, check_fit
from vlmdata.loaders.stream import BatchMeta, BatchStream, round_robin


class LoaderStateError(VlmdataError, ValueError):
    """``load_state_dict`` was given something that is not this loader's ``state_dict()``."""


@dataclass
class _Progress:
    base: Consumed  # positions consumed before the current iteration
    counts: list[int]  # positions consumed by each worker since


class VlmLoader:
    """Iterable of Bridge-ready batches with exact resume and bad-sample accounting.

    Iterating runs ``num_epochs`` epochs (None: forever), continuing from the current state; with
    ``num_workers`` > 0 the DataLoader workers are started once per iteration and stay alive across
    epochs. ``iter_inline()`` yields the same batches in the same order in this process (no workers).
    ``state_dict()`` after any batch and ``load_state_dict()`` on a loader built with the same arguments,
    except possibly ``num_workers``, resume with exactly the samples not yielded yet. An epoch that yields
    no batch at all raises ``EmptyEpochError`` (an endless loader would otherwise spin forever).

    With ``wrap_epochs`` (``LoaderOptions``) a batch that an epoch leaves short is completed by the next epoch's
    first samples, so every batch holds ``micro_batch_size`` samples (the last of a finite run excepted): each
    of its samples counts as consumed in its own epoch, ``last_epochs`` names them, ``last_epoch`` is the latest."""

    def __init__(
        self,
        stream: BatchStream,
        num_workers: int,
        num_epochs: int | None,
        prefetch_factor: int = 2,
        pin_memory: bool = False,
        image_device: str | None = None,
    ):
        self.stream = stream
        self.options: LoaderOptions | None = None  # set by make_loader
        self.image_device = image_device  # finish each batch's images there (device_images)
        self.num_workers = num_workers
        self.num_epochs = num_epochs
        self.prefetch_factor, self.pin_memory = prefetch_factor, pin_memory
        self.epoch = 0  # the oldest epoch not completely consumed
        self._progress: dict[int, _Progress] = {}  # epochs with consumed positions
        self.stats = Stats()
        self.collate_fn = stream.collator
        self.last_keys: list[str] = []  # sample keys of the batch just yielded (provenance; not in the batch)
        self.last_epoch: int | None = None  # the latest epoch of the batch just yielded
        self.last_epochs: list[int] = []  # the epoch of each of its samples (two epochs when it wraps)
        self.last_lengths: list[int] = []  # token lengths of its samples before truncation to seq_length
        self._epoch_yield: dict[int, tuple[int, list]] = {}  # epoch -> (samples yielded, skip records)

    # -- state
    def _rank_size(self) -> int:
        return self.stream.plan.rank_size(self.stream.rank, self.stream.world)

    def _workers(self) -> int:
        return max(1, self.num_workers)

    def _consumed(self, epoch: int) -> Consumed:
        p = self._progress.get(epoch)
        return Consumed() if p is None else p.base.plus(self._rank_size(), self._workers(), p.counts, epoch)

    def state_dict(self) -> dict:
        """``consumed``: positions of this rank's epoch sequence already yielded (or skipped), as a prefix
        length plus the few beyond it; ``ahead``: the same for later epochs already begun (workers run
        ahead across an epoch boundary). Independent of the number of workers."""
        ahead = {str(e): self._consumed(e).to_json() for e in sorted(self._progress) if e > self.epoch}
        return {
            "epoch": self.epoch,
            "consumed": self._consumed(self.epoch).to_json(),
            "ahead": ahead,
            "rank_samples": self._rank_size(),
            "rank": self.stream.rank,
            "world": self.stream.world,
            "seed": self.stream.plan.seed,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state_dict()`` of a loader with the same source, seed, rank and world; the number
        of workers may differ: the positions not consumed are spread over this loader's workers."""
        if not isinstance(state, Mapping):
            raise LoaderStateError(
                f"`state` must be the dict a loader's state_dict() returned, got {type(state).__name__}"
            )
        if isinstance(state.get("consumed"), (list, tuple)) and "epoch" in state:
            raise LoaderStateError("state is from an older vlmdata (per-worker counts); it cannot be resumed exactly")
        if not isinstance(state.get("consumed"), Mapping) or not {"epoch", "rank", "world", "seed"} <= set(state):
            raise LoaderStateError(
                "`state` is not a vlmdata loader state_dict() (it needs epoch, consumed, rank, world, seed; has "
                f"{', '.join(map(str, list(state)[:8])) or 'nothing'})"
            )
        for k, mine in (
            ("world", self.stream.world),
            ("rank", self.stream.rank),
            ("seed", self.stream.plan.seed),
            ("rank_samples", self._rank_size()),
        ):
            if state.get(k) != mine:
                raise LoaderStateError(f"state was saved with {k}={state.get(k)!r}, this loader has {k}={mine}")
        try:
            epoch = int(state["epoch"])
            if epoch < 0:
                raise ValueError(epoch)
            n = self._rank_size()
            progress = {epoch: _Progress(_consumed_within(state["consumed"], n), [0] * self._workers())}
            for e, c in (state.get("ahead") or {}).items():
                progress[int(e)] = _Progress(_consumed_within(c, n), [0] * self._workers())
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as e:
            raise LoaderStateError(f"`state` holds a malformed position ({type(e).__name__}: {e})"[:200]) from None
        self.epoch, self._progress = epoch, progress

    def _rebase(self) -> None:
        """Fold per-worker counts into the bases (before a new iteration, whose workers restart)."""
        self._progress = {e: _Progress(self._consumed(e), [0] * self._workers()) for e in self._progress}

    def _advance(self, meta: BatchMeta) -> None:
        n = self._rank_size()
        for part in meta.parts:
            p = self._progress.setdefault(part.epoch, _Progress(Consumed(), [0] * self._workers()))
            p.counts[meta.worker] = part.position
            if self.num_epochs is None and part.epoch > self.epoch:
                self._check_later(part.epoch, n)
        while n > 0 and self._consumed(self.epoch).prefix >= n:
            samples, skips = self._epoch_yield.pop(self.epoch, (0, []))
            check_fit(self.epoch, samples, skips, self.stream.processor.seq_length)  # nothing fit seq_length
            if self.num_epochs is None:  # an endless loader must not spin on an epoch that yields nothing
                check_epoch(self.epoch, samples, skips)
            self._progress.pop(self.epoch, None)
            self.epoch += 1

    def _check_later(self, epoch: int, n: int) -> None:
        """``check_epoch`` on a later epoch than the oldest one left, once it is complete without a sample: with
        ``wrap_epochs`` a worker holds an earlier epoch's samples until its next batch fills, which an epoch
        without samples would never do (the endless loader would spin instead of saying why)."""
        samples, skips = self._epoch_yield.get(epoch, (0, []))
        if not samples and n > 0 and self._consumed(epoch).prefix >= n:
            check_epoch(epoch, samples, skips)

    # -- iteration
    def _metas(self, inline: bool) -> Iterator[tuple[BatchMeta, dict | None]]:
        if self._rank_size() == 0 and self.num_epochs is None:
            check_epoch(self.epoch, 0, [])
        self._rebase()
        self.stream.start_epoch = self.epoch
        self.stream.end_epoch = None if self.num_epochs is None else self.epoch + self.num_epochs
        self.stream.bases = {e: p.base for e, p in self._progress.items()}
        if self.num_workers > 0 and not inline:
            dl = torch.utils.data.DataLoader(
                self.stream,
                batch_size=None,
                num_workers=self.num_workers,
                prefetch_factor=self.prefetch_factor,
                pin_memory=self.pin_memory,
                multiprocessing_context="fork" if hasattr(os, "fork") else None,
            )
            return iter(dl)
        return round_robin([self.stream.iter_worker(w) for w in range(self._workers())])

    def _iterate(self, inline: bool) -> Iterator[dict]:
        for meta, batch in self._metas(inline):
            self.stats.skipped_samples.extend(meta.skipped)
            self.stats.truncated_samples.extend(meta.truncated)
            for part in meta.parts:
                samples, skips = self._epoch_yield.setdefault(part.epoch, (0, []))
                skips.extend(part.skipped)
                self._epoch_yield[part.epoch] = (samples + part.samples, skips)
            self._advance(meta)
            if batch is None:
                continue
            self.last_keys, self.last_epoch, self.last_lengths = meta.keys, meta.epoch, meta.lengths
            self.last_epochs = meta.epochs
            self.stats.samples += meta.samples
            self.stats.batches += 1
            if self.image_device is not None:
                batch = finish_batch(batch, self.stream.processor.spec, self.image_device)
            yield batch
        # a finite run ends with every epoch consumed
        self._progress.clear()

    def __iter__(self) -> Iterator[dict]:
        return self._iterate(inline=False)

    def iter_inline(self) -> Iterator[dict]:
        """The batches ``iter(self)`` yields, in the same order, built in this process (no workers)."""
        return self._iterate(inline=True)

    def epoch_samples(self) -> int:
        """References this rank's plan holds per epoch (good and bad)."""
        return self._rank_size()


def _consumed_within(d, n: int) -> Consumed:
    """``Consumed.from_json(d)`` when every position lies in this rank's ``n`` samples (ValueError otherwise: a
    prefix of 10**18 or extra positions past the end resumed as a finished epoch, yielding nothing, silently)."""
    positions = [int(d["prefix"]), *(int(x) for x in d.get("extra", []))]
    if not 0 <= positions[0] <= n or any(not 0 <= x < n for x in positions[1:]):
        raise ValueError(f"a position outside this loader's {n} samples per epoch")
    return Consumed.from_json(d)
