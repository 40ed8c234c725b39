"""Packs samples into tar shards bounded by count and exact byte size, atomically.

Each shard is written to ``NAME.tmp`` and renamed when complete; then a small record of it
(stats, the input range it covers, the inputs skipped in that range) is written atomically to the
state folder, which is what ``--resume`` reads. Shard boundaries depend only on the sample
sequence, so a resumed build writes exactly what a clean build would.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from .schema import Sample
from .tario import END_BYTES, TarWriter, member_size


@dataclass
class ShardRecord:
    name: str
    samples: int
    images: int
    bytes: int
    sha256: str
    first_key: str
    last_key: str
    start_index: int  # first input index covered
    end_index: int  # one past the last input index covered
    image_bytes: int = 0
    skipped: list[dict] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # every file suffix that occurs ("json", "0.jpg", ...)

    def manifest_entry(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "samples", "images", "bytes", "sha256", "first_key", "last_key")}


def write_json_atomic(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ShardPacker:
    def __init__(self, out_dir: str, prefix: str, max_count: int, max_size: int | None, state_dir: str | None,
                 first_shard: int = 0, start_index: int = 0):
        self.out_dir, self.prefix = out_dir, prefix
        self.max_count, self.max_size = max_count, max_size
        self.state_dir = state_dir
        self.shard_no = first_shard
        self.start_index = start_index  # input index where the open shard's range begins
        self.records: list[ShardRecord] = []
        self._writer: TarWriter | None = None
        self._file = None
        self._open_stats: dict = {}
        self._pending_skips: list[dict] = []

    def shard_name(self, n: int) -> str:
        return f"{self.prefix}-{n:06d}.tar"

    def skip(self, record: dict) -> None:
        self._pending_skips.append(record)

    def add(self, sample: Sample, index: int) -> None:
        files = sample.files()
        size = sum(member_size(len(d)) for _, d in files)
        st = self._open_stats
        if self._writer is not None and (
            st["samples"] + 1 > self.max_count
            or (self.max_size is not None and st["bytes"] + size + END_BYTES > self.max_size)
        ):
            self._close(end_index=index)
        if self._writer is None:
            self._open()
            self._open_stats["first_key"] = sample.key
        for name, data in files:
            self._writer.add(name, data)
            self._open_stats["parts"].add(name[len(sample.key) + 1:])
        st = self._open_stats
        st["samples"] += 1
        st["images"] += len(sample.images)
        st["image_bytes"] += sum(len(b) for b in sample.images)
        st["bytes"] += size
        st["last_key"] = sample.key

    def finish(self, end_index: int) -> list[dict]:
        """Close the open shard; return skips after the last shard (only when no shard is open)."""
        if self._writer is not None:
            self._close(end_index)
            return []
        tail, self._pending_skips = self._pending_skips, []
        return tail

    def _open(self) -> None:
        path = os.path.join(self.out_dir, self.shard_name(self.shard_no))
        self._file = open(path + ".tmp", "wb", buffering=1 << 20)
        self._writer = TarWriter(self._file)
        self._open_stats = {"samples": 0, "images": 0, "image_bytes": 0, "bytes": 0, "parts": set()}

    def _close(self, end_index: int) -> None:
        sha = self._writer.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        name = self.shard_name(self.shard_no)
        path = os.path.join(self.out_dir, name)
        assert self._writer.size == self._open_stats["bytes"] + END_BYTES
        os.replace(path + ".tmp", path)
        st = self._open_stats
        rec = ShardRecord(name=name, samples=st["samples"], images=st["images"], bytes=self._writer.size, sha256=sha,
                          first_key=st["first_key"], last_key=st["last_key"], start_index=self.start_index,
                          end_index=end_index, image_bytes=st["image_bytes"], skipped=self._pending_skips,
                          parts=sorted(st["parts"]))
        if self.state_dir:
            write_json_atomic(os.path.join(self.state_dir, f"{self.shard_no:06d}.json"), asdict(rec))
        self.records.append(rec)
        self._pending_skips = []
        self._writer = self._file = None
        self.shard_no += 1
        self.start_index = end_index

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
