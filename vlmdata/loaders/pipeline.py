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

import logging
import os
import random
from dataclasses import dataclass, field

from .. import storage
from ..images import ImageProblem, check_image
from ..manifest import ManifestError, load_manifest, shard_keys
from ..schema import BadJSON, Sample, conversation_problem, count_image_parts, loads
from ..tario import BadHeader, parse_header

log = logging.getLogger("vlmdata.loaders")


class BadSampleError(Exception):
    def __init__(self, message: str, shard: str | None = None, key: str | None = None, reason: str = "error"):
        super().__init__(message)
        self.shard, self.key, self.reason = shard, key, reason


class EmptyEpochError(ValueError):
    """An epoch ended without a single usable sample (an empty dataset, or every sample skipped): a loader
    asked for endless epochs would otherwise loop forever without yielding."""


# ----------------------------------------------------------------------------- shard index

@dataclass
class SampleRef:
    """Where one sample's members lie: ext -> (offset, size). ``error`` marks a sample known bad at index time."""

    shard: int
    key: str
    members: dict[str, tuple[int, int]] = field(default_factory=dict)
    error: tuple[str, str] | None = None  # (reason, detail)


_ZERO_BLOCK = bytes(512)
_MAX_PADDING = 20 * 512  # zero bytes a tar writer may leave after the end-of-archive blocks (record padding)


class _Broken(Exception):
    def __init__(self, reason: str, detail: str, pos: int):
        super().__init__(detail)
        self.reason, self.detail, self.pos = reason, detail, pos


def _regular(typ: bytes) -> bool:
    return typ in (b"0", b"\0", b"7")


def _add_member(refs: list[SampleRef], seen: set, shard_idx: int, name: str, at: int, size: int) -> None:
    d, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    key = f"{d}/{stem}" if d else stem
    cur = refs[-1] if refs else None
    if cur is None or cur.key != key or ext in cur.members:
        cur = SampleRef(shard_idx, key)
        if key in seen:
            cur.error = ("duplicate_key", f"key {key} occurs more than once in the shard")
        seen.add(key)
        refs.append(cur)
    cur.members[ext] = (at, size)


def _strict_scan(f, size: int, shard_idx: int) -> list[SampleRef]:
    """Header-only walk from member to member; _Broken at the first inconsistency (the refs so far are
    in the exception's ``refs`` attribute)."""
    refs: list[SampleRef] = []
    seen: set = set()
    pos = 0
    long_name = None
    try:
        while True:
            if pos + 512 > size:
                raise _Broken("truncated_tar", f"archive ends at byte {size} without end-of-archive blocks", pos)
            f.seek(pos)
            hdr = f.read(512)
            if len(hdr) < 512:
                raise _Broken("truncated_tar", f"archive ends at byte {pos + len(hdr)} without end-of-archive blocks", pos)
            if hdr == _ZERO_BLOCK:
                rest = size - pos
                if rest > _MAX_PADDING or f.read(rest).strip(b"\0"):
                    raise _Broken("corrupt_tar", f"data after an end-of-archive block at byte {pos}", pos)
                return refs
            try:
                name, msize, typ = parse_header(hdr)
            except BadHeader as e:
                raise _Broken("corrupt_tar", f"corrupt tar header at byte {pos}: {e}", pos) from None
            data_at = pos + 512
            if data_at + msize > size:
                raise _Broken("truncated_tar", f"member at byte {pos} needs {msize} bytes, the archive has "
                              f"{size - data_at}", pos)
            pos = data_at + -(-msize // 512) * 512
            if typ == b"L":  # GNU long name for the next member
                f.seek(data_at)
                long_name = f.read(msize).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                continue
            if typ in (b"x", b"g"):  # pax headers: vlmdata writes none; a pax path is read by the deep scan
                continue
            if not _regular(typ):
                long_name = None
                continue
            _add_member(refs, seen, shard_idx, long_name or name, data_at, msize)
            long_name = None
    except _Broken as e:
        e.refs = refs
        raise


def _deep_scan(f, size: int, shard_idx: int) -> list[SampleRef]:
    """Every block with a valid ustar header, wherever it is (recovers the samples after a corrupt header or
    an inflated size field). A member whose data runs past the end (``truncated_tar``) or over the next
    header (``corrupt_tar``), and a sample without its JSON or an image its JSON lists, is an error ref."""
    found: list[tuple[int, str, int, bytes]] = []
    chunk = 1 << 20
    base = 0
    while base < size:
        f.seek(base)
        buf = f.read(min(chunk + 512, size - base))
        if not buf:
            break
        j = buf.find(b"ustar", 257)
        while j >= 0:
            at = j - 257
            if at % 512 == 0 and at < chunk and at + 512 <= len(buf):
                try:
                    name, msize, typ = parse_header(buf[at:at + 512])
                    found.append((base + at, name, msize, typ))
                except BadHeader:
                    pass
            j = buf.find(b"ustar", j + 1)
        base += chunk
    refs: list[SampleRef] = []
    seen: set = set()
    bad: dict[int, tuple[str, str]] = {}
    long_name = None
    for i, (at, name, msize, typ) in enumerate(found):
        nxt = found[i + 1][0] if i + 1 < len(found) else size
        past_end = at + 512 + msize > size
        overlaps = not past_end and at + 512 + msize > nxt
        if typ == b"L" and not (past_end or overlaps):
            f.seek(at + 512)
            long_name = f.read(msize).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        if not _regular(typ):
            long_name = None
            continue
        _add_member(refs, seen, shard_idx, long_name or name, at + 512, 0 if past_end or overlaps else msize)
        long_name = None
        if past_end:
            bad.setdefault(id(refs[-1]), ("truncated_tar", f"member at byte {at} needs {msize} bytes, the archive "
                                          f"has {max(0, size - at - 512)}"))
        elif overlaps:
            bad.setdefault(id(refs[-1]), ("corrupt_tar", f"member at byte {at} claims {msize} bytes, over the next "
                                          "member (corrupt size field)"))
    for r in refs:
        if r.error is None and id(r) in bad:
            r.error = bad[id(r)]
        elif r.error is None and not _complete(f, r):
            r.error = ("corrupt_tar", "sample incomplete: its JSON or an image it lists is missing from the shard")
    return refs


def _complete(f, ref: SampleRef) -> bool:
    """Whether a sample has its JSON and every image its JSON lists (used for the sample at a break)."""
    if "json" not in ref.members:
        return False
    off, n = ref.members["json"]
    if n > 64 << 20:
        return False
    f.seek(off)
    try:
        meta = loads(f.read(n))
    except BadJSON:
        return False
    infos = meta.get("images") if isinstance(meta, dict) else None
    if not isinstance(infos, list):
        return False
    return all(isinstance(i, dict) and i.get("file") in ref.members for i in infos)


_MANIFESTS: dict[str, tuple[tuple, dict | None]] = {}


def manifest_entry(path: str) -> dict | None:
    """The manifest entry of the shard at ``path`` from the ``manifest.json`` beside it (cached per folder
    and manifest version), or None when there is none or it cannot be read."""
    folder, name = storage.dirname(path), storage.basename(path)
    mpath = storage.join(folder, "manifest.json")
    try:
        if storage.is_url(storage.local(mpath)):
            tag: tuple = ("url",)
        else:
            st = os.stat(mpath)
            tag = (st.st_mtime_ns, st.st_size)
    except (OSError, storage.StorageError, ValueError):
        return None
    hit = _MANIFESTS.get(folder)
    if hit is None or hit[0] != tag:
        try:
            m = load_manifest(folder)
        except (ManifestError, OSError, storage.StorageError):
            m = None
        _MANIFESTS[folder] = hit = (tag, m)
    m = hit[1]
    if m is None:
        return None
    return next((e for e in m["shards"] if e["name"] == name), None)


def _lost(shard_idx: int, key: str, reason: str, detail: str) -> SampleRef:
    return SampleRef(shard_idx, key, {}, (reason, detail))


def _reconcile(refs: list[SampleRef], broken: _Broken | None, entry: dict | None, shard_idx: int) -> list[SampleRef]:
    """``refs`` made to account for exactly the manifest's samples: a lost sample becomes an error ref with its
    true key (from ``key_runs``), or, for a manifest without runs, with a key naming its place."""
    reason, detail = (broken.reason, broken.detail) if broken else ("missing_sample", "sample listed in the manifest "
                                                                     "is not in the shard")
    if entry is None:
        if broken and not any(r.error for r in refs):  # an unknown number of samples lost: name the place
            return refs + [_lost(shard_idx, f"<after {refs[-1].key if refs else 'start'}>", reason, detail)]
        return refs
    keys = shard_keys(entry)
    n = entry["samples"]
    if keys is not None:
        pool: dict[str, list[SampleRef]] = {}
        for r in refs:
            pool.setdefault(r.key, []).append(r)
        out = []
        for k in keys:
            got = pool.get(k)
            if got:
                r = got.pop(0)
                out.append(r)
            else:
                out.append(_lost(shard_idx, k, reason, detail))
        return out
    # an older manifest (no key runs): keep what is there, drop unlisted duplicates, pad with named losses
    out = [r for r in refs if not (r.error and r.error[0] == "duplicate_key")]
    dups = [r for r in refs if r.error and r.error[0] == "duplicate_key"]
    while len(out) < n and dups:
        out.append(dups.pop(0))
    if len(out) > n:
        out = out[:n]
    last = out[-1].key if out else "start"
    out += [_lost(shard_idx, entry["last_key"] if i == n - len(out) - 1 else f"<sample {len(out) + i + 1} of {n}, after {last}>",
                  reason, detail) for i in range(n - len(out))]
    return out


def scan_shard(path: str, shard_idx: int = 0, expected: "dict | None | bool" = None) -> list[SampleRef]:
    """Locate every sample's members by reading only the tar headers (``path`` may be an fsspec URL).

    The result accounts for exactly the shard's samples in the manifest beside it (``expected``: its
    manifest entry; None: looked up with ``manifest_entry``; False: no manifest): every sample that cannot
    be read is a ``SampleRef`` whose ``error`` is (reason, detail) and whose key is the sample's true key
    (``truncated_tar``, ``corrupt_tar``, ``duplicate_key``, ``missing_sample``, ``missing_shard``,
    ``read_error``). After a break (a corrupt header, a member past the end, data after the end of the
    archive) or a disagreement with the manifest, the whole file is scanned for intact headers
    (``_deep_scan``), so the samples after a damaged member are still read. Never raises for a damaged
    or missing shard."""
    entry = manifest_entry(path) if expected is None else (expected or None)
    broken: _Broken | None = None
    try:
        size = storage.size(path)
        with storage.open(path, "rb") as f:
            try:
                refs = _strict_scan(f, size, shard_idx)
                if entry is not None and (len(refs) != entry["samples"] or (refs and (
                        refs[0].key != entry.get("first_key") or refs[-1].key != entry.get("last_key")))):
                    raise _Broken("corrupt_tar", "the shard's samples differ from its manifest entry", 0)
                if any(r.error for r in refs):
                    raise _Broken("corrupt_tar", "a key occurs twice in the shard (a sample renamed or copied)", 0)
            except _Broken as e:
                broken = e
                refs = _deep_scan(f, size, shard_idx)
    except FileNotFoundError:
        broken = _Broken("missing_shard", "shard file missing", 0)
        refs = []
    except (OSError, storage.StorageError, ValueError) as e:
        broken = _Broken("read_error", f"shard unreadable: {getattr(e, 'strerror', None) or e}", 0)
        refs = []
    return _reconcile(refs, broken, entry, shard_idx)


def read_members(f, ref: SampleRef) -> dict[str, bytes]:
    """The bytes of a sample's members; OSError when the file is shorter than the index says."""
    out = {}
    for ext, (off, n) in ref.members.items():
        f.seek(off)
        data = f.read(n)
        if len(data) != n:
            raise OSError(f"member {ref.key}.{ext} cut short: {len(data)} of {n} bytes (the shard changed?)")
        out[ext] = data
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
        if kind == "shards" and self.epoch_samples == 0:
            raise EmptyEpochError("the shards hold no samples: nothing to load")
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

def parse_raw(files: dict[str, bytes], key: str, check_images: bool = True, with_images: bool = True) -> Sample:
    """A tar sample (ext -> bytes) -> Sample; raises BadSampleError(reason) when unusable.

    The checks are the validity rule the build applies (``schema.conversation_problem``, and with
    ``check_images`` ``images.check_image`` at header level), so a sample is skipped here under the
    same reason the build would have given: ``missing_json``, ``bad_json``, ``bad_record``,
    ``empty_caption``, ``bad_text``, ``control_token``, ``missing_image``, ``corrupt_sample`` (an image
    whose size differs from its JSON), ``undecodable_image``, ``too_large``, ``bad_aspect_ratio``,
    ``unsupported_format``. ``with_images=False`` parses the JSON alone (the image members need not be
    read: the image-free view); the sample then has no image bytes."""
    if "json" not in files:
        raise BadSampleError(f"sample {key} has no {key}.json", key=key, reason="missing_json")
    try:
        meta = loads(files["json"])
    except BadJSON as e:
        raise BadSampleError(f"sample {key}: bad json ({e})", key=key, reason="bad_json") from None
    conv = meta.get("conversation") if isinstance(meta, dict) else None
    if not isinstance(conv, list):
        raise BadSampleError(f"sample {key}: json has no conversation list", key=key, reason="bad_json")
    bad = conversation_problem(conv)
    if bad:
        raise BadSampleError(f"sample {key}: {bad[1]}", key=key, reason=bad[0])
    infos = meta.get("images") or []
    if not isinstance(infos, list):
        raise BadSampleError(f"sample {key}: json 'images' is not a list", key=key, reason="bad_json")
    if count_image_parts(conv) != len(infos):
        raise BadSampleError(f"sample {key}: {count_image_parts(conv)} image parts but {len(infos)} images",
                             key=key, reason="bad_json")
    images = []
    for i, info in enumerate(infos if with_images else []):
        name = info.get("file") if isinstance(info, dict) else None
        if not isinstance(name, str) or name == "json" or name not in files:
            raise BadSampleError(f"sample {key}: image file {key}.{name} missing", key=key, reason="missing_image")
        data = files[name]
        if check_images:
            try:
                check_image(data)
            except ImageProblem as e:
                raise BadSampleError(f"sample {key}: image {name}: {e.detail}", key=key, reason=e.reason) from None
        if isinstance(info.get("bytes"), int) and info["bytes"] != len(data):
            raise BadSampleError(f"sample {key}: image {name} has {len(data)} bytes, its json says {info['bytes']}",
                                 key=key, reason="corrupt_sample")
        images.append(data)
    source_id = meta.get("source_id", "")
    return Sample(key=key, conversation=conv, images=images, source_id=source_id if isinstance(source_id, str) else "",
                  synthetic=meta.get("synthetic") if isinstance(meta.get("synthetic"), dict) else None)


class ShardReader:
    """Opens shard files lazily and keeps them open (one reader per worker). Shards on object storage
    (URLs) are read with one ranged GET per sample (its members are contiguous in the tar)."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self._files: dict[int, object] = {}

    def read(self, ref: SampleRef) -> dict[str, bytes]:
        """The sample's members; OSError when the shard is shorter than its index (it changed)."""
        path = self.paths[ref.shard]
        if storage.is_url(storage.local(path)):
            if not ref.members:
                return {}
            start = min(off for off, _ in ref.members.values())
            end = max(off + n for off, n in ref.members.values())
            fs, inner = storage.fs_and_path(path)
            blob = fs.cat_file(inner, start=start, end=end)
            if len(blob) != end - start:
                raise OSError(f"sample {ref.key}: read {len(blob)} of {end - start} bytes (the shard changed?)")
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
        raise EmptyEpochError(f"epoch {epoch} had no samples for this rank (an empty dataset, or fewer samples "
                              "than ranks)")
    reasons: dict[str, int] = {}
    for s in skipped:
        reasons[s.get("reason", "?")] = reasons.get(s.get("reason", "?"), 0) + 1
    first = skipped[0]
    raise EmptyEpochError(f"epoch {epoch}: every sample was skipped ({len(skipped)}: "
                          + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda t: -t[1]))
                          + f"; first: shard {first.get('shard')} key {first.get('key')}: {first.get('detail')})")


def record_skip(shard: str | None, key: str | None, reason: str, detail: str) -> dict:
    rec = {"shard": shard, "key": key, "reason": reason, "detail": detail}
    log.warning("vlmdata loader skipped sample: shard=%s key=%s reason=%s: %s", shard, key, reason, detail)
    return rec
