"""``manifest.json``: the shards of a dataset, their checksums, totals and the build accounting.

``load_manifest`` is the one reader and checks what every consumer relies on before any of them uses
it: the schema tag, the types of ``shards``/``totals``/``accounting``, and that every shard name is a
plain file name ending in ``.tar`` (no folder part, no ``..``, no NUL), so a manifest can never make
validate, profile or the loader open a file outside the dataset folder. Anything else is a
``ManifestError`` (a ValueError) with one line naming the file and the problem.

Each shard entry carries ``key_runs``: the shard's sample keys as runs ``[first_key, count]`` of keys
that count up (``s000000007``, ``s000000008``, ...), one run per gap, so a reader that loses samples
(a truncated shard) can name every lost key; manifests written before this field was added have no
runs and readers fall back to the count and the first and last key.

``energon`` records what the build wrote into ``.nv-meta/`` (``sample_loader_sha256``: the sha256 of
``.nv-meta/vlmdata_loader.py``, the code Energon executes when it reads the dataset), or null when no
Energon metadata was written; ``vlmdata validate`` checks the file against it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from dataclasses import dataclass, field

from vlmdata import storage
from vlmdata.dataset.schema import BadJSON, expand_key_runs, key_runs, loads  # noqa: F401 - key_runs re-exported with the manifest API
from vlmdata.dataset.shards import ShardRecord
from vlmdata.errors import VlmdataError

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "vlmdata.manifest/1"
SHARD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,250}\.tar$")


class ManifestError(VlmdataError, ValueError):
    """A manifest that cannot be used (missing, not JSON, wrong schema or structure, unsafe shard name)."""


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def shard_keys(entry: dict) -> list[str] | None:
    """Every key of a manifest shard entry in order, from its ``key_runs``; None for manifests without them
    (or with runs that do not match the entry's sample count and first/last key)."""
    n = entry.get("samples")
    if not isinstance(n, int) or "key_runs" not in entry:
        return None
    keys = expand_key_runs(entry["key_runs"], n)
    if (
        keys is None
        or len(keys) != n
        or (keys and (keys[0] != entry.get("first_key") or keys[-1] != entry.get("last_key")))
    ):
        return None
    return keys


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


def write_manifest(
    out: str,
    *,
    kind: str,
    prefix: str,
    records: list[ShardRecord],
    accounting: Accounting,
    options: dict,
    source: dict,
    extra: dict | None = None,
) -> dict:
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
    storage.write_json(os.path.join(out, MANIFEST_NAME), manifest)
    return manifest


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


MIN_SAMPLE_BYTES = 1024  # a sample's KEY.json member: a 512-byte header and at least one 512-byte data block
MAX_SHARD_SAMPLES = 1 << 20  # samples of one shard at most (build --max-count is bounded by it; a 512 MiB shard
# holds at most 524,288); a manifest claiming 16M made the loader enumerate 16M lost samples for minutes


def check_manifest(m, where: str) -> dict:
    """``m`` when it has the structure readers rely on (module docstring), else ManifestError."""
    if not isinstance(m, dict):
        raise ManifestError(f"{where}: not a JSON object")
    if m.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(
            f"{where}: schema {storage.redact_text(repr(m.get('schema')))[:80]}, expected {MANIFEST_SCHEMA!r}"
            " (not a vlmdata dataset?)"
        )
    shards = m.get("shards")
    if not isinstance(shards, list):
        raise ManifestError(f"{where}: 'shards' is missing or not a list")
    names = set()
    for i, e in enumerate(shards):
        if not isinstance(e, dict):
            raise ManifestError(f"{where}: shard entry {i} is not an object")
        name = e.get("name")
        if not isinstance(name, str) or not SHARD_NAME.match(name) or ".." in name:
            shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
            raise ManifestError(
                f"{where}: shard entry {i} has an unsafe or invalid name {shown} "
                "(must be a plain file name ending in .tar)"
            )
        if name in names:
            raise ManifestError(f"{where}: shard {name} is listed twice")
        names.add(name)
        for k in ("samples", "bytes"):
            if not _is_int(e.get(k)):
                raise ManifestError(f"{where}: shard {name}: '{k}' is missing or not a non-negative integer")
        if e["samples"] > MAX_SHARD_SAMPLES:  # 10**10 made readers expand 10**10 keys or lost samples: a hang
            raise ManifestError(
                f"{where}: shard {name}: {e['samples']} samples, more than a shard holds ({MAX_SHARD_SAMPLES})"
            )
        if e["samples"] * MIN_SAMPLE_BYTES > e["bytes"]:
            raise ManifestError(
                f"{where}: shard {name}: {e['samples']} samples cannot fit in its {e['bytes']} bytes "
                f"(a sample takes at least {MIN_SAMPLE_BYTES})"
            )
        if not isinstance(e.get("sha256"), str):
            raise ManifestError(f"{where}: shard {name}: 'sha256' is missing")
        for k in ("first_key", "last_key"):
            if e["samples"] and not isinstance(e.get(k), str):
                raise ManifestError(f"{where}: shard {name}: '{k}' is missing")
    totals = m.get("totals")
    if not isinstance(totals, dict) or not _is_int(totals.get("samples")):
        raise ManifestError(f"{where}: 'totals' is missing or has no sample count")
    for k in ("shards", "images", "bytes", "image_bytes"):
        if k in totals and not _is_int(totals[k]):
            raise ManifestError(f"{where}: totals '{k}' is not a non-negative integer")
    if "parts" in totals and not (
        isinstance(totals["parts"], list) and all(isinstance(p, str) for p in totals["parts"])
    ):
        raise ManifestError(f"{where}: totals 'parts' is not a list of names")
    acc = m.get("accounting")
    if not isinstance(acc, dict):
        raise ManifestError(f"{where}: 'accounting' is missing")
    for k in ("seen", "written", "skipped"):
        if not _is_int(acc.get(k)):
            raise ManifestError(f"{where}: accounting '{k}' is missing or not a non-negative integer")
    if not isinstance(acc.get("skipped_by_reason", {}), dict) or not isinstance(acc.get("skipped_samples", []), list):
        raise ManifestError(f"{where}: accounting 'skipped_by_reason'/'skipped_samples' malformed")
    if not all(isinstance(s, dict) for s in acc.get("skipped_samples", [])):
        raise ManifestError(f"{where}: accounting 'skipped_samples' entries are not objects")
    if "energon" in m and m["energon"] is not None and not isinstance(m["energon"], dict):
        raise ManifestError(f"{where}: 'energon' is not an object")
    if not isinstance(m.get("kind", ""), str) or not isinstance(m.get("prefix", ""), str):
        raise ManifestError(f"{where}: 'kind'/'prefix' are not strings")
    if not isinstance(m.get("options", {}), dict) or not isinstance(m.get("source", {}), dict):
        raise ManifestError(f"{where}: 'options'/'source' are not objects")
    return m


def load_manifest(path: str) -> dict:
    """The manifest of a dataset folder (or a manifest.json path), checked (``check_manifest``)."""
    path = storage.local(path)
    if storage.is_url(path):  # a dataset folder on object storage (or its manifest.json URL)
        p = path if path.endswith(".json") else storage.join(path, MANIFEST_NAME)
        shown = storage.redact(p)
        try:
            data = storage.cat(p)
        except FileNotFoundError:
            raise ManifestError(f"{storage.redact(path)}: no {MANIFEST_NAME} (not a vlmdata dataset?)") from None
        except (storage.StorageError, OSError) as e:
            raise ManifestError(f"{shown}: {storage.redact_text(e)}") from None
        try:
            return check_manifest(loads(data), shown)
        except BadJSON as e:
            raise ManifestError(f"{shown}: {e}") from None
    if "\0" in path:
        raise ManifestError("dataset path contains a NUL byte")
    if os.path.isfile(path) and path.endswith(".tar"):
        raise ManifestError(f"{path}: a shard file, not a dataset folder (give the folder with {MANIFEST_NAME})")
    p = os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path
    if not os.path.exists(p):
        raise ManifestError(f"{path}: no {MANIFEST_NAME} (not a vlmdata dataset?)")
    try:
        data = storage.read_regular(p, 1 << 30, MANIFEST_NAME)
    except OSError as e:
        raise ManifestError(f"{p}: {e.strerror or e}") from None
    try:
        return check_manifest(loads(data), p)
    except BadJSON as e:
        raise ManifestError(f"{p}: {e}") from None


def shard_paths(root: str, manifest: dict | None = None) -> list[str]:
    """Paths (or URLs) of the manifest's shards, in order; names are checked to stay inside ``root``."""
    manifest = manifest or load_manifest(root)
    root = storage.local(root)
    if root.endswith(".json"):
        root = storage.dirname(root)
    check_manifest(manifest, storage.redact(root))
    return [storage.join(root, s["name"]) for s in manifest["shards"]]
