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

import json
import logging
import random
from dataclasses import dataclass, field

from ..schema import Sample

log = logging.getLogger("vlmdata.loaders")


class BadSampleError(Exception):
    def __init__(self, message: str, shard: str | None = None, key: str | None = None, reason: str = "error"):
        super().__init__(message)
        self.shard, self.key, self.reason = shard, key, reason


# ----------------------------------------------------------------------------- shard index

@dataclass
class SampleRef:
    """Where one sample's members lie: ext -> (offset, size). ``error`` marks a sample known bad at index time."""

    shard: int
    key: str
    members: dict[str, tuple[int, int]] = field(default_factory=dict)
    error: tuple[str, str] | None = None  # (reason, detail)


def _octal(b: bytes) -> int:
    b = b.rstrip(b"\0 ").strip()
    return int(b, 8) if b else 0


def scan_shard(path: str, shard_idx: int = 0) -> list[SampleRef]:
    """Locate every sample's members by reading only the tar headers. A truncated or corrupt archive
    yields the samples before the break and one ``SampleRef`` with ``error=("truncated_tar", ...)``.
    ``path`` may be an fsspec URL (read through ``vlmdata.storage``)."""
    from .. import storage

    size = storage.size(path)
    refs: list[SampleRef] = []
    cur: SampleRef | None = None
    pos = 0
    long_name = None
    with storage.open(path, "rb") as f:
        while True:
            f.seek(pos)
            hdr = f.read(512)
            if len(hdr) < 512:
                err = ("truncated_tar", f"archive ends at byte {pos} without end-of-archive blocks")
                break
            if hdr == b"\0" * 512:
                err = None
                break
            try:
                if sum(hdr[:148]) + 256 + sum(hdr[156:]) != _octal(hdr[148:156]):
                    raise ValueError("header checksum mismatch")
                msize = _octal(hdr[124:136])
            except ValueError as e:
                err = ("truncated_tar", f"corrupt tar header at byte {pos}: {e}")
                break
            typ = hdr[156:157]
            data_at = pos + 512
            if data_at + msize > size:
                err = ("truncated_tar", f"member at byte {pos} needs {msize} bytes, archive has {size - data_at}")
                break
            pos = data_at + -(-msize // 512) * 512
            if typ == b"L":  # GNU long name for the next member
                f.seek(data_at)
                long_name = f.read(msize).rstrip(b"\0").decode("utf-8")
                continue
            if typ in (b"x", b"g"):  # pax headers: names here are plain ustar
                continue
            if typ not in (b"0", b"\0"):
                long_name = None
                continue
            name = long_name or hdr[:100].rstrip(b"\0").decode("utf-8")
            prefix = hdr[345:500].rstrip(b"\0").decode("utf-8") if hdr[257:262] == b"ustar" else ""
            if prefix and not long_name:
                name = f"{prefix}/{name}"
            long_name = None
            d, _, base = name.rpartition("/")
            stem, _, ext = base.partition(".")
            key = f"{d}/{stem}" if d else stem
            if cur is None or cur.key != key:
                cur = SampleRef(shard_idx, key)
                refs.append(cur)
            cur.members[ext] = (data_at, msize)
    if err is not None:
        # the sample being read when the archive broke is incomplete: bad, whatever it already has
        bad_key = cur.key if cur is not None else None
        if cur is not None:
            refs.pop()
        refs.append(SampleRef(shard_idx, bad_key or f"<after byte {pos}>", {}, err))
    return refs


def read_members(f, ref: SampleRef) -> dict[str, bytes]:
    out = {}
    for ext, (off, n) in ref.members.items():
        f.seek(off)
        out[ext] = f.read(n)
    return out


# ----------------------------------------------------------------------------- plan

def split_range(n: int, parts: int, i: int) -> tuple[int, int]:
    """The i-th of ``parts`` contiguous near-equal chunks of range(n)."""
    return n * i // parts, n * (i + 1) // parts


def shuffle_buffer(items: list, size: int, rng: random.Random) -> list:
    """The order a streaming shuffle buffer of ``size`` emits ``items`` in (reservoir swap-out)."""
    if size <= 1:
        return list(items)
    buf: list = []
    out: list = []
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

    def __init__(self, kind: str, *, refs_by_shard: list[list[SampleRef]] | None = None, epoch_samples: int = 0,
                 seed: int = 0, shuffle: bool = True, buffer: int = 256):
        self.kind = kind  # "shards" | "source"
        self.refs_by_shard = refs_by_shard or []
        self.epoch_samples = epoch_samples if kind == "source" else sum(len(r) for r in self.refs_by_shard)
        self.seed, self.shuffle, self.buffer = seed, shuffle, buffer

    def epoch_order(self, epoch: int) -> list:
        if self.kind == "source":
            return list(range(epoch * self.epoch_samples, (epoch + 1) * self.epoch_samples))
        order = list(range(len(self.refs_by_shard)))
        if self.shuffle:
            random.Random(_seed(self.seed, "shards", epoch)).shuffle(order)
        return [r for s in order for r in self.refs_by_shard[s]]

    def rank_size(self, rank: int, world: int) -> int:
        """Positions in a rank's sequence per epoch (the same every epoch)."""
        a, b = split_range(self.epoch_samples, world, rank)
        return b - a

    def rank_sequence(self, epoch: int, rank: int, world: int) -> list:
        """The rank's epoch: a fixed sequence of references, independent of the number of workers."""
        allrefs = self.epoch_order(epoch)
        a, b = split_range(len(allrefs), world, rank)
        mine = allrefs[a:b]
        if self.shuffle:
            mine = shuffle_buffer(mine, self.buffer, random.Random(_seed(self.seed, "buf", epoch, rank)))
        return mine

    def stream(self, epoch: int, rank: int, world: int, worker: int, num_workers: int,
               consumed: "Consumed | None" = None) -> list:
        """Worker ``worker``'s references: every ``num_workers``-th position not consumed yet."""
        seq = self.rank_sequence(epoch, rank, world)
        return [seq[p] for p in worker_positions(len(seq), worker_slice(worker, epoch, num_workers), num_workers,
                                                   consumed)]


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
        ``counts[w]`` positions."""
        rem = self.remaining(n)
        new = [p for w, c in enumerate(counts) for p in rem[worker_slice(w, epoch, num_workers)::num_workers][:c]]
        return self.plus_positions(new) if new else self


def worker_slice(worker: int, epoch: int, num_workers: int) -> int:
    """The slice of an epoch's positions that ``worker`` takes (rotating with the epoch)."""
    return (worker + epoch) % max(1, num_workers)


def worker_positions(n: int, worker: int, num_workers: int, consumed: Consumed | None = None) -> list[int]:
    rem = consumed.remaining(n) if consumed is not None else list(range(n))
    return rem[worker::num_workers]


# ----------------------------------------------------------------------------- reading samples

def parse_raw(files: dict[str, bytes], key: str) -> Sample:
    """A tar sample (ext -> bytes) -> Sample; raises BadSampleError(reason) when unusable."""
    if "json" not in files:
        raise BadSampleError(f"sample {key} has no {key}.json", key=key, reason="missing_json")
    try:
        meta = json.loads(files["json"])
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadSampleError(f"sample {key}: bad json ({e})", key=key, reason="bad_json") from None
    conv = meta.get("conversation") if isinstance(meta, dict) else None
    if not isinstance(conv, list):
        raise BadSampleError(f"sample {key}: json has no conversation list", key=key, reason="bad_json")
    infos = meta.get("images") or []
    images = []
    for i, info in enumerate(infos):
        name = info.get("file") if isinstance(info, dict) else None
        if name not in files:
            raise BadSampleError(f"sample {key}: image file {key}.{name} missing", key=key, reason="missing_image")
        images.append(files[name])
    return Sample(key=key, conversation=conv, images=images, source_id=meta.get("source_id", ""),
                  synthetic=meta.get("synthetic"))


class ShardReader:
    """Opens shard files lazily and keeps them open (one reader per worker). Shards on object storage
    (URLs) are read with one ranged GET per sample (its members are contiguous in the tar)."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self._files: dict[int, object] = {}

    def read(self, ref: SampleRef) -> dict[str, bytes]:
        from .. import storage

        path = self.paths[ref.shard]
        if storage.is_url(storage.local(path)):
            if not ref.members:
                return {}
            start = min(off for off, _ in ref.members.values())
            end = max(off + n for off, n in ref.members.values())
            fs, inner = storage.fs_and_path(path)
            blob = fs.cat_file(inner, start=start, end=end)
            return {ext: blob[off - start:off - start + n] for ext, (off, n) in ref.members.items()}
        f = self._files.get(ref.shard)
        if f is None:
            f = self._files[ref.shard] = open(self.paths[ref.shard], "rb")
        return read_members(f, ref)

    def close(self):
        for f in self._files.values():
            f.close()
        self._files.clear()


@dataclass
class Stats:
    """Counts a loader exposes: samples yielded, batches, skipped samples with shard, key and reason."""

    samples: int = 0
    batches: int = 0
    skipped_samples: list[dict] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.skipped_samples)

    def skipped_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.skipped_samples:
            out[s["reason"]] = out.get(s["reason"], 0) + 1
        return dict(sorted(out.items()))

    def to_json(self) -> dict:
        return {"samples": self.samples, "batches": self.batches, "skipped": self.skipped,
                "skipped_by_reason": self.skipped_by_reason(), "skipped_samples": list(self.skipped_samples)}


def record_skip(shard: str | None, key: str | None, reason: str, detail: str) -> dict:
    rec = {"shard": shard, "key": key, "reason": reason, "detail": detail}
    log.warning("vlmdata loader skipped sample: shard=%s key=%s reason=%s: %s", shard, key, reason, detail)
    return rec
