"""Sample plan, split, shuffle, exact resume and the bad-sample policy.

Every epoch is a *plan*: a list of sample references computed from (seed, epoch) alone.

* shards: the shard order is shuffled per epoch; samples are concatenated in that order (each shard's
  samples located once by a header scan, so a reader seeks straight to its own samples);
* the epoch's samples are split into ``world`` contiguous, near-equal chunks (rank ``r`` takes chunk ``r``;
  ranks differ by at most one sample, whatever the shard count);
* each rank's chunk passes through a shuffle buffer of ``shuffle_buffer`` references seeded by
  (seed, epoch, rank): this is the rank's *sequence*, positions ``0 .. n-1``, independent of the number
  of DataLoader workers. The buffer works on references, not on decoded data, so the order is a pure
  function of the seed and resuming needs no decoding of what was consumed;
* worker ``w`` of ``W`` takes, in epoch ``e``, slice ``s = (w + e) mod W``: the positions ``s, s+W, s+2W, ...``
  of the rank's sequence that are not consumed yet. Every sample of the epoch belongs to exactly one (rank,
  position). The slice rotates with the epoch so that the worker with the larger share (one more batch)
  changes every epoch: workers that live across epochs stay within one epoch of each other.

State is ``{"epoch", "consumed": {"prefix": p, "extra": [...]}}``: positions ``< p`` and the few listed
beyond it are consumed. ``load_state_dict`` with any number of workers spreads the remaining positions
over the new workers the same way, so the rest of the epoch is exactly the samples not yet yielded.

Bad samples (truncated tar, missing JSON, bad JSON, undecodable image, anything the processing raises)
are, with ``on_error="skip"``, counted, logged with shard and key, and reported in ``stats``; with
``on_error="raise"`` they raise ``BadSampleError``. A bad sample is counted exactly once per epoch, by the
(rank, worker) whose plan holds it.
"""

from __future__ import annotations

import bisect
import logging
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vlmdata.dataset.refs import SampleRef
from vlmdata.errors import VlmdataError

log = logging.getLogger("vlmdata.loaders")


class EmptyEpochError(VlmdataError, ValueError):
    """An epoch ended without a single usable sample (an empty dataset, or every sample skipped): a loader
    asked for endless epochs would otherwise loop forever without yielding."""


def split_range(n: int, parts: int, i: int) -> tuple[int, int]:
    """The i-th of ``parts`` contiguous near-equal chunks of range(n)."""
    return n * i // parts, n * (i + 1) // parts


def shuffle_buffer(items: Sequence, size: int, rng: random.Random) -> Sequence:
    """The order a streaming shuffle buffer of ``size`` emits ``items`` in (reservoir swap-out); an
    ``array`` in, an ``array`` out (the plan's integer sequences), else a list."""
    out: Any = array(items.typecode) if isinstance(items, array) else []
    if size <= 1:
        out.extend(items)
        return out
    buf: list = []
    for it in items:
        buf.append(it)
        if len(buf) >= size:
            j = rng.randrange(len(buf))
            buf[j], buf[-1] = buf[-1], buf[j]
            out.append(buf.pop())
    rng.shuffle(buf)
    out.extend(buf)
    return out


def _seed(*parts) -> int:
    h = 1469598103934665603
    for p in parts:
        for b in str(p).encode() + b"|":
            h = ((h ^ b) * 1099511628211) & (2**64 - 1)
    return h


class Plan:
    """Per-epoch reference sequences per rank, and the share of each DataLoader worker."""

    def __init__(
        self,
        kind: str,
        *,
        refs_by_shard: Sequence[Sequence[SampleRef]] | None = None,
        epoch_samples: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        buffer: int = 256,
    ):
        self.kind = kind  # "shards" | "source"
        self.refs_by_shard = refs_by_shard or []
        self._starts = [0]  # global sample number of each shard's first sample
        for refs in self.refs_by_shard:
            self._starts.append(self._starts[-1] + len(refs))
        self.epoch_samples = epoch_samples if kind == "source" else self._starts[-1]
        if kind == "shards" and self.epoch_samples == 0:
            raise EmptyEpochError("the shards hold no samples: nothing to load")
        self.seed, self.shuffle, self.buffer = seed, shuffle, buffer

    def epoch_order(self, epoch: int) -> array:
        """The epoch's samples in order, as integers: source sample numbers, or (shards) global sample
        numbers that ``ref`` turns into a ``SampleRef``. An array of 8-byte integers, not references or a list
        of Python ints, so that the plan costs 8 bytes a sample (the loader's memory stays flat with the
        dataset's size)."""
        if self.kind == "source":
            return array("q", range(epoch * self.epoch_samples, (epoch + 1) * self.epoch_samples))
        order = list(range(len(self.refs_by_shard)))
        if self.shuffle:
            random.Random(_seed(self.seed, "shards", epoch)).shuffle(order)
        out = array("q")
        for s in order:
            out.extend(range(self._starts[s], self._starts[s + 1]))
        return out

    def ref(self, g: int) -> SampleRef:
        """The ``SampleRef`` of global sample number ``g`` (kind "shards")."""
        s = bisect.bisect_right(self._starts, g) - 1
        return self.refs_by_shard[s][g - self._starts[s]]

    def rank_size(self, rank: int, world: int) -> int:
        """Positions in a rank's sequence per epoch (the same every epoch)."""
        a, b = split_range(self.epoch_samples, world, rank)
        return b - a

    def rank_sequence(self, epoch: int, rank: int, world: int) -> Sequence[int]:
        """The rank's epoch: a fixed sequence of references, independent of the number of workers."""
        allrefs = self.epoch_order(epoch)
        a, b = split_range(len(allrefs), world, rank)
        mine = allrefs[a:b]
        if self.shuffle:
            mine = shuffle_buffer(mine, self.buffer, random.Random(_seed(self.seed, "buf", epoch, rank)))
        return mine

    def stream(
        self, epoch: int, rank: int, world: int, worker: int, num_workers: int, consumed: "Consumed | None" = None
    ) -> array:
        """Worker ``worker``'s references: every ``num_workers``-th position not consumed yet."""
        seq = self.rank_sequence(epoch, rank, world)
        positions = worker_positions(len(seq), worker_slice(worker, epoch, num_workers), num_workers, consumed)
        return array("q", (seq[p] for p in positions))


@dataclass
class Consumed:
    """Consumed positions of a rank's sequence: all ``< prefix`` plus ``extra`` (sorted, ``> prefix``)."""

    prefix: int = 0
    extra: tuple = ()

    @classmethod
    def of(cls, positions) -> "Consumed":
        s = set(positions)
        p = 0
        while p in s:
            p += 1
        return cls(p, tuple(sorted(x for x in s if x > p)))

    @classmethod
    def from_json(cls, d: dict) -> "Consumed":
        return cls(int(d["prefix"]), ()).plus_positions([int(x) for x in d.get("extra", [])])

    def plus_positions(self, new) -> "Consumed":
        s = set(self.extra).union(new)
        p = self.prefix
        while p in s:
            p += 1
        return Consumed(p, tuple(sorted(x for x in s if x > p)))

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "extra": list(self.extra)}

    def remaining(self, n: int) -> list[int]:
        ex = set(self.extra)
        return [p for p in range(self.prefix, n) if p not in ex]

    def plus(self, n: int, num_workers: int, counts: list[int], epoch: int = 0) -> "Consumed":
        """This state after worker ``w`` (of ``num_workers`` started from it, in ``epoch``) consumed
        ``counts[w]`` positions: the first ``counts[w]`` of ``remaining(n)[worker_slice(w) :: num_workers]``.

        The loader calls this for every batch, so it never lists the remaining positions (that cost O(n) a
        batch: 41 ms at a million samples per rank). In index space (``i`` = the i-th remaining position)
        worker ``w`` consumed ``s_w, s_w + W, ...``; every index below the first one some worker has not
        reached (``m``) is consumed, the few above it are extras, and indices map to positions by a merge
        with the sorted ``extra``: O(workers + extra + indices above m)."""
        if not any(counts):
            return self
        step = max(1, num_workers)
        left = n - self.prefix - sum(1 for e in self.extra if e < n)  # len(remaining(n))
        firsts = {r: r for r in range(step)}  # per residue, the first index not consumed
        for w, c in enumerate(counts):
            s = worker_slice(w, epoch, num_workers)
            firsts[s] = s + c * step
        m = min(min(firsts.values()), left)
        above: list[int] = []  # consumed indices >= m: worker w's s + k * step for k0 <= k < counts[w]
        for w, c in enumerate(counts):
            s = worker_slice(w, epoch, num_workers)
            k0 = max(0, -(-(m - s) // step))
            above.extend(range(s + k0 * step, min(s + c * step, left), step))
        above.sort()
        if m < left:
            prefix, *extra = self._positions([m, *above])
        else:  # every remaining position consumed
            prefix, extra = n, []
        kept = [e for e in self.extra if e > prefix]
        return Consumed(prefix, tuple(sorted({*kept, *extra})))

    def _positions(self, indices: list[int]) -> list[int]:
        """Positions of sorted indices into ``remaining(n)`` (any ``n`` beyond them)."""
        out, j, shift = [], 0, 0
        ex = self.extra
        for i in indices:
            pos = self.prefix + i + shift
            while j < len(ex) and ex[j] <= pos:
                j, shift, pos = j + 1, shift + 1, pos + 1
            out.append(pos)
        return out


def worker_slice(worker: int, epoch: int, num_workers: int) -> int:
    """The slice of an epoch's positions that ``worker`` takes (rotating with the epoch)."""
    return (worker + epoch) % max(1, num_workers)


def worker_positions(n: int, worker: int, num_workers: int, consumed: Consumed | None = None) -> Sequence[int]:
    """The positions of a rank's sequence that ``worker`` takes: every ``num_workers``-th one not consumed."""
    if consumed is None or consumed == Consumed():
        return range(worker, n, num_workers)
    return consumed.remaining(n)[worker::num_workers]


# ----------------------------------------------------------------------------- reading samples


@dataclass
class Stats:
    """Counts a loader exposes: samples yielded, batches, skipped samples with shard, key and reason, and the
    samples yielded truncated to seq_length (key, tokens, tokens cut: text only, as Bridge truncates)."""

    samples: int = 0
    batches: int = 0
    skipped_samples: list[dict] = field(default_factory=list)
    truncated_samples: list[dict] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.skipped_samples)

    def skipped_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.skipped_samples:
            out[s["reason"]] = out.get(s["reason"], 0) + 1
        return dict(sorted(out.items()))

    def to_json(self) -> dict:
        return {
            "samples": self.samples,
            "batches": self.batches,
            "skipped": self.skipped,
            "skipped_by_reason": self.skipped_by_reason(),
            "skipped_samples": list(self.skipped_samples),
            "truncated": len(self.truncated_samples),
            "truncated_samples": list(self.truncated_samples),
        }


LENGTH_REASONS = ("too_long", "image_truncated")  # skips decided by seq_length, not by the data


def check_fit(epoch: int, samples: int, skipped: list[dict], seq_length: int | None) -> None:
    """Stop any loader (finite ones too) whose ``seq_length`` fits none of an epoch's samples: every sample
    skipped as too long is the option's problem, not the data's (``make_loader(D, seq_length=1)``).

    Args:
        epoch: the epoch number.
        samples: samples yielded in that epoch.
        skipped: that epoch's skip records.
        seq_length: the loader's option.

    Returns:
        None; raises EmptyEpochError naming ``seq_length`` when nothing fit."""
    if samples or not skipped or not all(s.get("reason") in LENGTH_REASONS for s in skipped):
        return
    first = skipped[0]
    raise EmptyEpochError(
        f"`seq_length`={seq_length} fits none of the {len(skipped)} samples of epoch {epoch} (first: shard "
        f"{first.get('shard')} key {first.get('key')}: {first.get('detail')})"
    )


def check_epoch(epoch: int, samples: int, skipped: list[dict]) -> None:
    """Stop an endless loader on an epoch without samples.

    Called by the loader at the end of every complete epoch, so ``num_epochs=None`` on an empty or all-bad
    dataset stops with the reasons instead of looping forever.

    Args:
        epoch: the epoch number (for the message).
        samples: samples yielded in that epoch.
        skipped: that epoch's skip records (``record_skip`` dicts).

    Returns:
        None; raises EmptyEpochError when ``samples == 0``."""
    if samples:
        return
    if not skipped:
        raise EmptyEpochError(
            f"epoch {epoch} had no samples for this rank (an empty dataset, or fewer samples than ranks)"
        )
    reasons: dict[str, int] = {}
    for s in skipped:
        reasons[s.get("reason", "?")] = reasons.get(s.get("reason", "?"), 0) + 1
    first = skipped[0]
    raise EmptyEpochError(
        f"epoch {epoch}: every sample was skipped ({len(skipped)}: "
        + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda t: -t[1]))
        + f"; first: shard {first.get('shard')} key {first.get('key')}: {first.get('detail')})"
    )
