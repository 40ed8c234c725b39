"""A remote OUT (an fsspec URL such as ``s3://bucket/prefix``): shards are written in a node-local staging folder
and uploaded atomically, one at a time; the index, the metadata and ``manifest.json`` last.

- ``default_staging(out)``: the staging folder, stable per OUT (so that ``resume`` finds it).
- ``upload_shard``: the shard, then its record in ``OUT/.vlmdata-build/NNNNNN.json``, written only after the
  upload completed, so a record in OUT always means a complete shard in OUT; the staging folder keeps its own
  records so that ``resume`` can upload a written-but-not-uploaded shard without writing it again.
- ``stage_for_index`` / ``publish``: around the Energon index, which is written in staging (from the shards'
  recorded layouts; a resumed shard not staged here is fetched to read its headers) and uploaded with the
  metadata; ``manifest.json`` goes up last: its presence in OUT marks a complete dataset.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

from vlmdata import storage
from vlmdata.dataset.manifest import MANIFEST_NAME
from vlmdata.dataset.shards import ShardRecord
from vlmdata.ingest.output import STATE_DIR


def default_staging(out: str) -> str:
    """Node-local folder where shards for a remote OUT are written before upload (stable per OUT, for resume)."""
    tag = hashlib.sha256(storage.redact(out).encode()).hexdigest()[:16]
    return os.path.join(os.environ.get("VLMDATA_STAGING", os.path.join(tempfile.gettempdir(), "vlmdata-staging")), tag)


def upload_shard(rec: ShardRecord, staging: str, out: str, no: int) -> None:
    """Upload shard ``no`` from staging, then record it in OUT's state folder."""
    storage.put(os.path.join(staging, rec.name), storage.join(out, rec.name))
    storage.write_json(storage.join(out, STATE_DIR, f"{no:06d}.json"), rec.state_dict())


def stage_for_index(out: str, staging: str, records: list[ShardRecord], index: bool) -> None:
    """Make the staging folder; with ``index``, fetch into it every shard the index needs to read (no recorded
    layout, not staged here)."""
    os.makedirs(staging, exist_ok=True)
    for r in records if index else []:
        p = os.path.join(staging, r.name)
        if r.layout is None and (not os.path.exists(p) or os.path.getsize(p) != r.bytes):
            storage.get(storage.join(out, r.name), p)  # no layout (resumed) and not staged here: fetch it to index


def publish(out: str, staging: str, records: list[ShardRecord], indexed: bool) -> None:
    """Upload what staging holds besides the shards (the index and ``.nv-meta`` when ``indexed``), then
    ``manifest.json``; remove OUT's state folder and the staging folder."""
    if indexed:
        for r in records:
            storage.put(os.path.join(staging, r.name + ".idx"), storage.join(out, r.name + ".idx"))
        meta = os.path.join(staging, ".nv-meta")
        for d, _, files in os.walk(meta):
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(d, f), staging)
                storage.put(os.path.join(d, f), storage.join(out, *rel.split(os.sep)))
    storage.put(os.path.join(staging, MANIFEST_NAME), storage.join(out, MANIFEST_NAME))
    storage.rm(storage.join(out, STATE_DIR), recursive=True)
    shutil.rmtree(staging, ignore_errors=True)
