"""``manifest.json``: the shards of a dataset, their checksums, totals and the build accounting."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field

from . import storage
from .shardwriter import ShardRecord, write_json_atomic

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "vlmdata.manifest/1"


class ManifestError(Exception):
    pass


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Accounting:
    seen: int
    written: int
    skipped_samples: list[dict] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.skipped_samples)

    @classmethod
    def from_records(cls, seen: int, records: list[ShardRecord], tail: list[dict]) -> "Accounting":
        skips = [s for r in records for s in r.skipped] + tail
        acc = cls(seen=seen, written=sum(r.samples for r in records), skipped_samples=skips)
        if acc.seen != acc.written + acc.skipped:
            raise AssertionError(f"accounting broken: seen {acc.seen} != written {acc.written} + skipped {acc.skipped}")
        return acc

    def to_json(self) -> dict:
        return {
            "seen": self.seen,
            "written": self.written,
            "skipped": self.skipped,
            "skipped_by_reason": dict(sorted(Counter(s["reason"] for s in self.skipped_samples).items())),
            "skipped_samples": self.skipped_samples,
        }


def write_manifest(out: str, *, kind: str, prefix: str, records: list[ShardRecord], accounting: Accounting,
                   options: dict, source: dict, extra: dict | None = None) -> dict:
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "kind": kind,
        "prefix": prefix,
        "shards": [r.manifest_entry() for r in records],
        "totals": {
            "shards": len(records),
            "samples": sum(r.samples for r in records),
            "images": sum(r.images for r in records),
            "bytes": sum(r.bytes for r in records),
            "image_bytes": sum(r.image_bytes for r in records),
            "parts": sorted({p for r in records for p in r.parts}, key=lambda p: (p != "json", p)),
        },
        "accounting": accounting.to_json(),
        "options": options,
        "source": source,
        **(extra or {}),
    }
    write_json_atomic(os.path.join(out, MANIFEST_NAME), manifest)
    return manifest


def load_manifest(path: str) -> dict:
    """The manifest of a dataset folder (or a manifest.json path), checked for its schema."""
    path = storage.local(path)
    if storage.is_url(path):  # a dataset folder on object storage (or its manifest.json URL)
        p = path if path.endswith(".json") else storage.join(path, MANIFEST_NAME)
        shown = storage.redact(p)
        try:
            m = json.loads(storage.cat(p).decode("utf-8"))
        except FileNotFoundError:
            raise ManifestError(f"{storage.redact(path)}: no {MANIFEST_NAME} (not a vlmdata dataset?)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ManifestError(f"{shown}: not valid JSON ({e})") from None
        except (storage.StorageError, OSError) as e:
            raise ManifestError(f"{shown}: {e}") from None
        if not isinstance(m, dict) or m.get("schema") != MANIFEST_SCHEMA:
            raise ManifestError(f"{shown}: schema {m.get('schema') if isinstance(m, dict) else None!r}, expected {MANIFEST_SCHEMA!r}")
        return m
    p = os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path
    if not os.path.exists(p):
        raise ManifestError(f"{path}: no {MANIFEST_NAME} (not a vlmdata dataset?)")
    try:
        with open(p, encoding="utf-8") as f:
            m = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{p}: not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(f"{p}: schema {m.get('schema') if isinstance(m, dict) else None!r}, expected {MANIFEST_SCHEMA!r}")
    return m


def shard_paths(root: str, manifest: dict | None = None) -> list[str]:
    manifest = manifest or load_manifest(root)
    root = storage.local(root)
    return [storage.join(root, s["name"]) for s in manifest["shards"]]
