"""``write_dataset``: in-memory samples (synthetic ones, mocks) -> a dataset in exactly the ``build`` format.

The samples come from the caller (``vlmdata synth``, the audit's profile source); they are packed in order
(``packing.pack``) and written through the one ``DatasetWriter``, with the build's output-folder rules, lock and
write order. Only local output folders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vlmdata import storage
from vlmdata.dataset.schema import Sample
from vlmdata.dataset.shards import Entry
from vlmdata.ingest.engines import Engine, engine_context
from vlmdata.ingest.options import DEFAULT_ENERGON_TARGET, DEFAULT_MAX_COUNT, DEFAULT_PREFIX, BuildError, ShardSpec
from vlmdata.ingest.output import output_error
from vlmdata.ingest.packing import pack
from vlmdata.ingest.writer import DatasetWriter


def write_dataset(
    out: str,
    samples: Iterable[Sample],
    *,
    kind: str,
    options: dict,
    source: dict,
    overwrite: bool = False,
    prefix: str = DEFAULT_PREFIX,
    max_count: int = DEFAULT_MAX_COUNT,
    max_size: int | None = None,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    energon: bool = True,
    energon_target: str = DEFAULT_ENERGON_TARGET,
    engine: Engine | str | None = None,
    address: str | None = None,
) -> dict:
    """Write in-memory samples as a dataset in folder ``out``; return the manifest.

    Args:
        out: a local output folder (empty, or a vlmdata dataset with ``overwrite``).
        samples: the samples, keys unique and increasing.
        kind: the manifest's ``kind`` (what tells the datasets apart: "synth", ...).
        options, source: the manifest's ``options`` and ``source`` records.
        overwrite: replace the vlmdata dataset in ``out``.
        prefix, max_count, max_size: the shards (``ShardSpec``; max_size None: no limit). A sample larger
            than ``max_size`` on its own is skipped (``sample_too_large``).
        workers: processes of the engine and of the Energon index.
        progress: called with 1 per sample.
        energon, energon_target: the Energon index, as ``build``'s.
        engine: where the per-shard writes run (None: inline; "local"; "ray" with ``address``); the output does
            not depend on it.
        address: with the ray engine, an existing cluster.
    """
    spec = ShardSpec(prefix, max_count, max_size)
    try:
        out = storage.local(out)
    except storage.CredentialsInURL as e:
        raise BuildError(str(e)) from None
    if storage.is_url(out):
        raise BuildError(f"{storage.redact(out)}: in-memory samples are written to local folders only")
    try:
        with DatasetWriter(out, overwrite=overwrite, energon=bool(energon), energon_target=energon_target) as writer:
            writer.start({"kind": kind})  # the state marks an interrupted write as vlmdata's own (replaced on rerun)
            results = ((i, Entry.from_sample(s, i)) for i, s in enumerate(samples))
            with engine_context(engine, 1 if engine is None else workers, address) as eng:
                records, seen, tail = pack(results, spec.planner(), writer.write, eng, 0, progress)
            return writer.finish(
                records,
                seen=seen,
                tail=tail,
                workers=workers,
                kind=kind,
                prefix=prefix,
                options=options,
                source=source,
            )
    except OSError as e:
        raise output_error(e, out) from None
