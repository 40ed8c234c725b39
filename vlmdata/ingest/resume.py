"""An interrupted build's state (``OUT/.vlmdata-build/``) and ``resume``.

A build records ``options.json`` (the source, the options that decide the output bytes and the source's
``source_fingerprint``) before its first shard, and one ``NNNNNN.json`` record per written shard. ``resume``
needs that state with the same source, options *and source fingerprint*; it keeps the shards whose record and
file agree (size and sha256 locally, size for an uploaded object) and removes everything past the first bad
one, so the build goes on from there. For a remote OUT, shards written to staging but not uploaded are
uploaded now.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from dataclasses import fields

from vlmdata import storage
from vlmdata.dataset.manifest import MANIFEST_NAME, sha256_file
from vlmdata.dataset.shards import ShardRecord
from vlmdata.ingest.options import BuildError
from vlmdata.ingest.output import STATE_DIR
from vlmdata.ingest.remote import upload_shard

_RECORD_FIELDS = {f.name for f in fields(ShardRecord)}


def source_key(source: str) -> str:
    """How options.json names the source: an absolute local path, or the URL without credentials."""
    return storage.redact(source) if storage.is_url(source) else os.path.abspath(source)


def load_resume_state(out: str, state: str, prefix: str, want: dict) -> list[ShardRecord]:
    """Shard records of a previous run into local ``out``, verified; partial files removed.

    Args:
        out: the output folder.
        state: its state folder.
        prefix: the shards' prefix.
        want: what this run would write into options.json (it must equal the interrupted build's).
    """
    opts_path = os.path.join(state, "options.json")
    if not os.path.exists(opts_path):
        if os.path.exists(os.path.join(out, MANIFEST_NAME)):
            raise BuildError(f"{out}: build already complete (manifest.json present); nothing to resume")
        raise BuildError(f"{out}: no interrupted build to resume (no {STATE_DIR}/options.json)")
    _check_resume_options(_read_options(opts_path, out), want, out)
    return verified_local_records(out, state, prefix)


def load_remote_resume_state(out: str, staging: str, prefix: str, want: dict) -> list[ShardRecord]:
    """Records of shards already in remote ``out``, then shards written to staging but not uploaded (uploaded now).

    A shard in OUT counts when its record exists and its object has the recorded size (uploads are
    atomic, so a present object is a complete one). Objects and records past the last good shard are
    removed, in OUT and in staging.
    """
    state = storage.join(out, STATE_DIR)
    shown = storage.redact(out)
    if not storage.exists(storage.join(state, "options.json")):
        if storage.exists(storage.join(out, MANIFEST_NAME)):
            raise BuildError(f"{shown}: build already complete (manifest.json present); nothing to resume")
        raise BuildError(f"{shown}: no interrupted build to resume (no {STATE_DIR}/options.json)")
    _check_resume_options(_read_options(storage.join(state, "options.json"), shown), want, shown)
    in_state = set(storage.ls(state))
    records = _uploaded_records(out, state, in_state)
    # staged shards that were written but whose upload did not finish: verify locally, upload now
    local_state = os.path.join(staging, STATE_DIR)
    staged = verified_local_records(staging, local_state, prefix) if os.path.isdir(local_state) else []
    for rec in staged[len(records) :]:
        if rec.start_index != (records[-1].end_index if records else 0):
            break
        upload_shard(rec, staging, out, len(records))
        records.append(rec)
    _remove_remote_leftovers(out, staging, prefix, records, in_state)
    return records


def verified_local_records(out: str, state: str, prefix: str) -> list[ShardRecord]:
    """Records in ``state`` whose shard in ``out`` has the recorded size and sha256, in order; shard files
    and records past the first bad one are removed."""
    records = []
    n = 0
    while os.path.exists(p := os.path.join(state, f"{n:06d}.json")):
        try:
            with open(p) as f:
                rec = _record(json.load(f))
        except (OSError, ValueError):
            rec = None
        if rec is None:
            break
        path = os.path.join(out, rec.name)
        if not os.path.exists(path) or os.path.getsize(path) != rec.bytes or sha256_file(path) != rec.sha256:
            break  # the record outlived its shard: redo from here
        records.append(rec)
        n += 1
    keep = {r.name for r in records}
    for p in glob.glob(os.path.join(glob.escape(out), f"{glob.escape(prefix)}-*.tar*")) + glob.glob(
        os.path.join(glob.escape(state), "*.json.tmp")
    ):
        if os.path.basename(p) not in keep:
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
    for m in range(n, n + 1_000_000):
        p = os.path.join(state, f"{m:06d}.json")
        if not os.path.exists(p):
            break
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
    return records


def _check_resume_options(prev: dict, want: dict, out: str) -> None:
    if prev.get("source") != want["source"] or prev.get("options") != want["options"]:
        diff = sorted(k for k in want["options"] if (prev.get("options") or {}).get(k) != want["options"][k])
        raise BuildError(
            f"{out}: `resume` with different source or options than the interrupted build ({diff or 'source'})"
        )
    if "source_fingerprint" not in prev:
        raise BuildError(
            f"{out}: the interrupted build was made by an older vlmdata that did not record the source's "
            "state, so resuming could mix old and new data; rebuild with `overwrite`"
        )
    if prev["source_fingerprint"] != want["source_fingerprint"]:
        raise BuildError(
            f"{out}: the source changed since the interrupted build (files added, removed or modified); "
            "resuming would mix old and new data: rebuild with `overwrite`"
        )


def _read_options(path: str, out: str) -> dict:
    try:
        d = json.loads(storage.cat(path).decode("utf-8"))
    except (OSError, ValueError, RecursionError, storage.StorageError):
        raise BuildError(
            f"{out}: the interrupted build's {STATE_DIR}/options.json is unreadable; rebuild with `overwrite`"
        ) from None
    if not isinstance(d, dict):
        raise BuildError(
            f"{out}: the interrupted build's {STATE_DIR}/options.json is malformed; rebuild with `overwrite`"
        )
    return d


def _record(data: dict) -> ShardRecord | None:
    try:
        return ShardRecord(**{k: v for k, v in data.items() if k in _RECORD_FIELDS})
    except TypeError:
        return None


def _uploaded_records(out: str, state: str, in_state: set[str]) -> list[ShardRecord]:
    """The records in OUT's state folder, in order, up to the first whose object is missing or of another size."""
    records: list[ShardRecord] = []
    while (p := storage.join(state, f"{len(records):06d}.json")) in in_state:
        rec = _record(storage.read_json(p))
        if rec is None:
            break
        try:
            ok = storage.size(storage.join(out, rec.name)) == rec.bytes
        except FileNotFoundError:
            ok = False
        if not ok:
            break
        records.append(rec)
    return records


def _remove_remote_leftovers(
    out: str, staging: str, prefix: str, records: list[ShardRecord], in_state: set[str]
) -> None:
    """Remove the shard objects, records and staged shards that no kept record covers."""
    keep = {r.name for r in records}
    for p in storage.ls(out):
        name = storage.basename(p)
        if name.startswith(f"{prefix}-") and ".tar" in name and name not in keep:
            storage.rm(p)
    for p in in_state:
        name = storage.basename(p)
        if name != "options.json" and not (
            name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < len(records)
        ):
            storage.rm(p)
    for name in os.listdir(staging) if os.path.isdir(staging) else []:
        if name.startswith(f"{prefix}-") and ".tar" in name and name not in keep:
            os.remove(os.path.join(staging, name))
