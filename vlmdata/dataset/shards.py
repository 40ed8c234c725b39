"""Packing samples into tar shards bounded by count and exact byte size, written atomically.

Packing is split in two so that many processes can write at once while the shard boundaries stay
a function of the sample sequence alone:

- ``Planner`` (one process, in input order) decides which samples go into which shard from their
  exact tar sizes. It holds only sizes and references, never image bytes.
- ``write_shard`` (any process) writes one planned shard to ``NAME.tmp``, hashes it, renames it
  into place, then records it (stats, the input range it covers, the inputs skipped in that range,
  its keys as runs) in the state folder that ``--resume`` reads.

Image files are copied with ``storage.read_regular`` (regular files only, size-capped); a file whose
size changed since it was checked raises ``SourceChanged``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Union

from vlmdata import storage
from vlmdata.dataset.schema import Sample, dumps, key_runs
from vlmdata.dataset.tar import END_BYTES, TarWriter, member_size
from vlmdata.errors import VlmdataError
from vlmdata.storage import FileTooLarge, cat, is_url, read_regular

MAX_PAYLOAD_BYTES = 8**11 - 1  # the largest member a ustar header can describe

ImagePayload = Union[str, bytes]  # a file to copy (path) or the bytes themselves


@dataclass
class Entry:
    """One sample ready to pack: its JSON and its images (paths or bytes) with their sizes."""

    index: int
    key: str
    meta: bytes
    images: list[tuple[str, ImagePayload, int]]  # (suffix "0.jpg", payload, size)
    input: str = ""  # where it came from (for a skip record)
    source_id: str = ""

    @classmethod
    def from_sample(cls, sample: Sample, index: int) -> "Entry":
        images: list[tuple[str, ImagePayload, int]] = [
            (info.file, data, len(data)) for info, data in zip(sample.image_info, sample.images)
        ]
        return cls(index, sample.key, dumps(sample.meta()), images, input=sample.key, source_id=sample.source_id)

    @property
    def tar_bytes(self) -> int:
        return member_size(len(self.meta)) + sum(member_size(n) for _, _, n in self.images)


@dataclass
class ShardPlan:
    no: int
    name: str
    entries: list[Entry]
    start_index: int  # first input index covered
    end_index: int  # one past the last input index covered
    skipped: list[dict]


@dataclass
class ShardRecord:
    name: str
    samples: int
    images: int
    bytes: int
    sha256: str
    first_key: str
    last_key: str
    start_index: int
    end_index: int
    image_bytes: int = 0
    skipped: list[dict] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # every file suffix that occurs ("json", "0.jpg", ...)
    key_runs: list[list] | None = None  # the keys as [first_key, count] runs (manifest.key_runs)
    # (member name, data size) in tar order: what the Energon index needs (vlmdata.dataset.nvmeta_index). Known
    # only to the process that wrote the shard; never in the state folder (a resumed shard is scanned).
    layout: list[tuple[str, int]] | None = None

    def state_dict(self) -> dict:
        """What the state folder records (everything but the layout)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "layout"}

    def manifest_entry(self) -> dict:
        e = {k: getattr(self, k) for k in ("name", "samples", "images", "bytes", "sha256", "first_key", "last_key")}
        if self.key_runs is not None:
            e["key_runs"] = self.key_runs
        return e


def shard_name(prefix: str, no: int) -> str:
    return f"{prefix}-{no:06d}.tar"


class Planner:
    """Greedy packing in input order: a shard closes when the next sample would break a bound."""

    def __init__(self, prefix: str, max_count: int, max_size: int | None, first_shard: int = 0, start_index: int = 0):
        self.prefix, self.max_count, self.max_size = prefix, max_count, max_size
        self.no, self.start_index = first_shard, start_index
        self.entries: list[Entry] = []
        self.size = 0
        self.skips: list[dict] = []

    def add(self, entry: Entry) -> ShardPlan | None:
        closed = None
        if self.entries and (
            len(self.entries) + 1 > self.max_count
            or (self.max_size is not None and self.size + entry.tar_bytes + END_BYTES > self.max_size)
        ):
            closed = self._close(entry.index)
        self.entries.append(entry)
        self.size += entry.tar_bytes
        return closed

    def skip(self, record: dict) -> None:
        self.skips.append(record)

    def finish(self, end_index: int) -> tuple[ShardPlan | None, list[dict]]:
        """The last plan (if any samples are open) and the skips no shard covers (only with no samples)."""
        if self.entries:
            return self._close(end_index), []
        tail, self.skips = self.skips, []
        return None, tail

    def _close(self, end_index: int) -> ShardPlan:
        plan = ShardPlan(
            self.no, shard_name(self.prefix, self.no), self.entries, self.start_index, end_index, self.skips
        )
        self.no += 1
        self.start_index = end_index
        self.entries, self.size, self.skips = [], 0, []
        return plan


class SourceChanged(VlmdataError):
    """An input file changed size between reading it and copying it into a shard."""


def write_shard(plan: ShardPlan, out_dir: str, state_dir: str | None, fsync: bool = False) -> ShardRecord:
    """Write one planned shard atomically (tmp + rename) and record it.

    Without ``fsync`` a shard is safe against the process being killed (rename is the commit
    point) but not against power loss; ``--resume`` re-hashes every recorded shard, so a shard torn
    by a crash is found and rebuilt either way. ``fsync=True`` flushes it before the rename, and its
    state record too (without it the record is not flushed either: a record lost or torn by a power loss
    only makes ``--resume`` rewrite that shard).
    """
    path = os.path.join(out_dir, plan.name)
    parts: set[str] = set()
    layout: list[tuple[str, int]] = []
    images = image_bytes = 0
    with open(path + ".tmp", "wb", buffering=1 << 20) as f:
        w = TarWriter(f)
        for e in plan.entries:
            name = f"{e.key}.json"
            w.add(name, e.meta)
            layout.append((name, len(e.meta)))
            parts.add("json")
            for suffix, payload, size in e.images:
                if isinstance(payload, str):
                    if is_url(payload):
                        payload = cat(payload)
                    else:
                        try:
                            payload = read_regular(payload, size, "image file")
                        except FileTooLarge:
                            raise SourceChanged(
                                f"{e.key}: an input image grew while building (was {size} bytes)"
                            ) from None
                    if len(payload) != size:
                        raise SourceChanged(
                            f"{e.key}: an input image changed while building ({size} -> {len(payload)} bytes)"
                        )
                name = f"{e.key}.{suffix}"
                w.add(name, payload)
                layout.append((name, len(payload)))
                parts.add(suffix)
                images += 1
                image_bytes += size
        sha = w.close()
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    expected = sum(e.tar_bytes for e in plan.entries) + END_BYTES
    if w.size != expected:
        raise AssertionError(f"{plan.name}: wrote {w.size} bytes, planned {expected}")
    os.replace(path + ".tmp", path)
    rec = ShardRecord(
        name=plan.name,
        samples=len(plan.entries),
        images=images,
        bytes=w.size,
        sha256=sha,
        first_key=plan.entries[0].key,
        last_key=plan.entries[-1].key,
        start_index=plan.start_index,
        end_index=plan.end_index,
        image_bytes=image_bytes,
        skipped=plan.skipped,
        parts=sorted(parts, key=lambda p: (p != "json", p)),
        key_runs=key_runs([e.key for e in plan.entries]),
        layout=layout,
    )
    if state_dir:
        storage.write_json(os.path.join(state_dir, f"{plan.no:06d}.json"), rec.state_dict(), fsync=fsync)
    return rec
