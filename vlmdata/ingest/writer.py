"""``DatasetWriter``: the one way a dataset is written. ``build``, ``write_dataset`` and the synthetic twin
(``synthetic.twin``) all write through it; it owns the output folder, local or remote, for one write.

A write goes through these steps, in this order (the write order makes the manifest the commit point):

1. ``with DatasetWriter(out, ...) as w``: the output-folder rules that need no lock (``output.precheck_out``),
   then the lock; a folder this write created is removed again if the write fails before anything is in it.
2. ``w.check()``: the output-folder rules under the lock (``output.check_out_dir``); remembers what
   ``overwrite`` will replace. ``build`` calls it once the source is open, before reading its first record.
3. ``w.start(fingerprint, prefix)``: replaces what ``overwrite`` replaces, then sets up the state of a build
   (``options.json``: a new build; the verified records of an interrupted one: ``resume``) and returns the
   records of the shards already done. Without a fingerprint (in-memory samples, the twin) there is no state.
4. ``w.write(plan) -> ShardRecord`` per shard (picklable: engines run it in workers): a local shard is written
   atomically into OUT; a remote one into the staging folder, then uploaded (``remote``). A plan without
   entries (the twin of an empty real shard) is an empty archive.
5. ``w.finish(records, ...)``: the Energon index (``.nv-meta``), then ``manifest.json`` (which records the
   index and the shards' keys), then the state folder goes; a remote OUT gets the index and the manifest
   uploaded last.

``energon``: True writes the Energon index and records it in the manifest's ``energon``; False records
``energon: null``; None writes neither (the twin: an audit artifact that no Energon reader opens).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
from collections.abc import Callable

from vlmdata import storage
from vlmdata.dataset.manifest import Accounting, write_manifest
from vlmdata.dataset.shards import ShardPlan, ShardRecord, write_shard
from vlmdata.dataset.tar import END_BYTES
from vlmdata.ingest import output, remote, resume
from vlmdata.ingest.options import DEFAULT_ENERGON_TARGET, BuildError
from vlmdata.ingest.output import LOCK_NAME, STATE_DIR


class DatasetWriter:
    """One dataset being written into one output folder (module docstring).

    Args:
        out: the output folder: a local path, or an fsspec URL (``build`` only).
        resume: finish an interrupted build in ``out``.
        overwrite: replace the vlmdata dataset in ``out``.
        protected: paths ``out`` must not be or contain (the source first, then the image root).
        staging: with a remote ``out``: the local folder shards are written to before upload (default:
            ``remote.default_staging``).
        fsync: flush each shard before its rename.
        energon: write the Energon index (True), record its absence (False), or neither (None).
        energon_target: the class ``.nv-meta/dataset.yaml`` names ("vlmdata" or "bridge").
    """

    def __init__(
        self,
        out: str,
        *,
        resume: bool = False,
        overwrite: bool = False,
        protected: list[str] | None = None,
        staging: str | None = None,
        fsync: bool = False,
        energon: bool | None = True,
        energon_target: str = DEFAULT_ENERGON_TARGET,
    ):
        self.out, self.resume, self.overwrite = out, resume, overwrite
        self.protected = protected or []
        self.remote = storage.is_url(out)
        self.staging = (staging or remote.default_staging(out)) if self.remote else None
        self.fsync, self.energon, self.energon_target = fsync, energon, energon_target
        self.state: str | None = None  # the local state folder of a build (None: no state)
        self._to_delete: list[str] | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> DatasetWriter:
        created = not self.remote and not os.path.lexists(self.out)
        output.precheck_out(self.out, self.resume, self.protected)
        if self.staging is not None:
            output.check_staging(self.staging, self.protected)
        with self._stack as stack:
            stack.enter_context(output.lock(self.out if self.staging is None else self.staging))
            stack.enter_context(output.remove_if_left_empty(self.out if created else None))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)  # the lock and the clean-up never swallow an error

    def check(self) -> None:
        """The output-folder rules under the lock; remembers what ``overwrite`` will delete."""
        self._to_delete = output.check_out_dir(self.out, self.resume, self.overwrite, self.protected)

    def start(self, fingerprint: dict | None = None, prefix: str = "") -> list[ShardRecord]:
        """Replace what ``overwrite`` replaces, then set up the build's state (module docstring).

        Args:
            fingerprint: what a build records in ``options.json`` (and ``resume`` compares); None: no state.
            prefix: the shards' prefix (``resume`` removes the shard files no record covers).

        Returns:
            The records of the shards an interrupted build had written (``resume``), else [].
        """
        if self._to_delete is None:
            self.check()
        output.clear(self._to_delete or [])
        if fingerprint is None:
            return []
        if self.remote:
            return self._start_remote(fingerprint, prefix)
        self.state = os.path.join(self.out, STATE_DIR)
        if self.resume:
            return resume.load_resume_state(self.out, self.state, prefix, fingerprint)
        os.makedirs(self.state, exist_ok=True)
        storage.write_json(os.path.join(self.state, "options.json"), fingerprint)
        return []

    def _start_remote(self, fingerprint: dict, prefix: str) -> list[ShardRecord]:
        assert self.staging is not None
        done: list[ShardRecord] = []
        if self.resume:
            done = resume.load_remote_resume_state(self.out, self.staging, prefix, fingerprint)
        else:
            for p in os.listdir(self.staging):
                if p != LOCK_NAME:
                    storage.rm(os.path.join(self.staging, p), recursive=True)
            storage.write_json(storage.join(self.out, STATE_DIR, "options.json"), fingerprint)
        os.makedirs(os.path.join(self.staging, STATE_DIR), exist_ok=True)
        return done

    @property
    def write(self) -> Callable[[ShardPlan], ShardRecord]:
        """``write(plan) -> ShardRecord``: writes one shard (picklable, for the engines' workers); take it after
        ``start`` (it carries the state folder ``start`` set up)."""
        if self.staging is not None:
            return functools.partial(write_remote, out=self.out, staging=self.staging, fsync=self.fsync)
        return functools.partial(write_local, out=self.out, state=self.state, fsync=self.fsync)

    def finish(
        self,
        records: list[ShardRecord],
        *,
        seen: int,
        tail: list[dict],
        workers: int,
        kind: str,
        prefix: str,
        options: dict,
        source: dict,
    ) -> dict:
        """The index, the manifest (the commit point), then the state goes; returns the manifest.

        Args:
            records: every shard's record, in order.
            seen: inputs seen; tail: skips after the last shard (``Accounting.from_records``).
            workers: processes for the Energon index.
            kind, prefix, options, source: the manifest's fields of the same names.
        """
        acc = Accounting.from_records(seen, records, tail)
        root = self.staging if self.staging is not None else self.out
        if self.staging is not None:
            remote.stage_for_index(self.out, self.staging, records, index=bool(self.energon))
        extra = None
        if self.energon is not None:
            extra = {"energon": index_energon(root, records, workers, self.energon_target) if self.energon else None}
        manifest = write_manifest(
            root, kind=kind, prefix=prefix, records=records, accounting=acc, options=options, source=source, extra=extra
        )
        if self.staging is not None:
            remote.publish(self.out, self.staging, records, indexed=bool(extra and extra["energon"] is not None))
        elif self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)
        return manifest


def write_local(plan: ShardPlan, out: str, state: str | None, fsync: bool = False) -> ShardRecord:
    """Write one shard into local ``out`` (its record into ``state`` when there is one)."""
    if not plan.entries:
        return _write_empty(plan, out)
    return write_shard(plan, out, state, fsync)  # looked up at call time (tests patch it)


def write_remote(plan: ShardPlan, out: str, staging: str, fsync: bool = False) -> ShardRecord:
    """Write a shard in the (node-local) staging folder, upload it atomically, then record it in OUT
    (``remote.upload_shard``)."""
    local_state = os.path.join(staging, STATE_DIR)
    os.makedirs(local_state, exist_ok=True)
    rec = write_shard(plan, staging, local_state, fsync)
    remote.upload_shard(rec, staging, out, plan.no)
    return rec


def _write_empty(plan: ShardPlan, out: str) -> ShardRecord:
    """An empty archive for a plan without entries (the twin of an empty real shard keeps the shard count)."""
    empty = b"\0" * END_BYTES
    with open(os.path.join(out, plan.name), "wb") as f:
        f.write(empty)
    return ShardRecord(
        plan.name, 0, 0, END_BYTES, hashlib.sha256(empty).hexdigest(), "", "", plan.start_index, plan.end_index
    )


def index_energon(root: str, records: list[ShardRecord], workers: int, target: str) -> dict | None:
    """Write the Energon index of the shards in ``root``; its manifest record (None without shards)."""
    if not records:
        return None
    # imports sqlite3 and importlib.metadata (25-45 ms on top of `vlmdata build`'s imports, -X importtime):
    # only when metadata is written, kept out of `vlmdata build --help`
    from vlmdata.dataset.nvmeta import prepare_energon

    try:
        return prepare_energon(
            root,
            [r.name for r in records],
            workers=max(1, workers),
            target=target,
            layouts={r.name: r.layout for r in records if r.layout is not None},
        )
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - Energon's own errors: the shards are there, resume redoes this step
        raise BuildError(
            f"{root}: Energon indexing failed ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); "
            "the shards are complete: `resume` retries"
        ) from None
