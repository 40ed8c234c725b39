"""``build``: a source of image-text inputs -> WebDataset shards + manifest + Energon metadata.

Inputs are enumerated in a deterministic order; they are read and checked (``prepare``) inline or, where
worker processes pay (``ingest.policy``: heavy per-input work and a free core), by workers; the main process
packs samples into shards in input order (``packing``); everything lands in the output folder through the one
``DatasetWriter`` (``writer``: the folder rules, the lock, resume, remote outputs, the write order). Every input
is either written or skipped with a reason, and ``seen == written + skipped`` always holds.

The phases of one build, each a function below: check the arguments (``_check_types``, ``_Run``), take the output folder
(``DatasetWriter``), open the source and read its first record before anything in OUT is replaced
(``_open``), set up or resume the state, choose the number of processes (``_workers``), pack, finish.

Safety rules (docs/RELIABILITY.md has the reasons): one bad input never stops a build (it is a skip);
problems of the output (a full disk, a read-only folder) raise ``BuildError`` naming the path and the OS
error, and ``resume`` finishes the build once the problem is fixed; nothing is deleted before the new source
has been opened and its first record read. ``build_shortfall`` (``shortfall``) says when a finished build
wrote too little. Option names appear in messages in backquotes (```max_size```); the CLI shows them as flags.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain, islice

from vlmdata import storage
from vlmdata.dataset.shards import SourceChanged
from vlmdata.ingest.engines import DEFAULT_ENGINE, Engine, EngineError, engine_class, engine_context
from vlmdata.ingest.options import DEFAULT_ENERGON_TARGET, ENERGON_TARGETS, BuildError, BuildOptions
from vlmdata.ingest.output import output_error
from vlmdata.ingest.packing import run_build_pipeline
from vlmdata.ingest.policy import SMALL_INPUT, auto_workers
from vlmdata.ingest.resume import source_key
from vlmdata.ingest.writer import DatasetWriter
from vlmdata.sources import SourceError, SourceItem, open_source, source_fingerprint


@dataclass(frozen=True)
class _Run:
    """One ``build`` call's arguments, normalised (what its phases are handed); checks the ones that need no
    I/O on construction (nothing is touched yet)."""

    source: str
    out: str
    opts: BuildOptions
    resume: bool
    overwrite: bool
    progress: Callable[[int], None] | None
    energon: bool
    energon_target: str
    engine: Engine | str | None
    address: str | None
    staging: str | None

    def __post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise BuildError("`resume` and `overwrite` exclude each other")
        if self.energon_target not in ENERGON_TARGETS:
            targets = " or ".join(map(repr, ENERGON_TARGETS))
            raise BuildError(f"`energon_target` must be {targets}, not {self.energon_target!r}")
        if not isinstance(self.engine, Engine):  # fail before touching OUT: an unknown engine, Ray not installed
            engine_class(self.engine or DEFAULT_ENGINE).check_available()
        if not storage.is_url(self.out) and "\0" in self.out:
            raise BuildError("output path contains a NUL byte")
        if not storage.is_url(self.source) and "\0" in self.source:
            raise SourceError("source path contains a NUL byte")
        if self.opts.image_root is not None and "\0" in self.opts.image_root:
            raise SourceError("`image_root` contains a NUL byte")

    def writer(self) -> DatasetWriter:
        """The writer of OUT; OUT must not be or contain the source or the image root."""
        protected = [self.source] + ([storage.local(self.opts.image_root)] if self.opts.image_root else [])
        return DatasetWriter(
            self.out,
            resume=self.resume,
            overwrite=self.overwrite,
            protected=protected,
            staging=self.staging,
            fsync=self.opts.fsync,
            energon=self.energon,
            energon_target=self.energon_target,
        )


def build(
    source: str,
    out: str,
    opts: BuildOptions | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
    energon: bool = True,
    energon_target: str = DEFAULT_ENERGON_TARGET,
    engine: Engine | str | None = None,
    address: str | None = None,
    staging: str | None = None,
) -> dict:
    """Build shards from ``source`` into ``out``; return the manifest dict.

    Args:
        source, out: local paths or fsspec URLs (``s3://bucket/prefix``, ``file://...``).
        opts: the build's options (default ``BuildOptions()``); ``opts.workers=None`` lets ``ingest.policy``
            choose (inline unless worker processes pay).
        resume: finish an interrupted build in ``out`` (same source, options and source content).
        overwrite: replace the vlmdata dataset in ``out`` (only once the new source has been read).
        progress: called with the number of inputs done.
        energon: write the Energon index (``.nv-meta``).
        energon_target: the class ``.nv-meta/dataset.yaml`` names ("vlmdata" or "bridge").
        engine: "local" (default; ``opts.workers`` processes), "ray" (Ray tasks; local Ray with
            ``opts.workers`` CPUs, or the cluster at ``address``) or an Engine instance. The output does not
            depend on the engine or the number of workers.
        address: with the ray engine, an existing cluster.
        staging: for a remote ``out``, where shards are written before upload (default: a folder under the
            temp dir, stable per OUT so that ``resume`` finds it).

    Returns:
        The manifest (``manifest.json``'s content).

    Raises:
        SourceError (bad source), BuildError (bad options / output folder / output not writable), EngineError.
    """
    _check_types(source, out, opts, progress, {"resume": resume, "overwrite": overwrite, "energon": energon})
    if staging is not None and not storage.is_url(out):  # it would be ignored: say so rather than pretend
        raise BuildError(
            f"`staging` applies to a remote `out` (s3://..., gs://...); {storage.redact(str(out))!r} is local"
        )
    run = _Run(
        source=_path(source),
        out=_path(out),
        opts=opts or BuildOptions(),
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        energon=energon,
        energon_target=energon_target,
        engine=engine,
        address=address,
        staging=staging,
    )
    writer = run.writer()
    try:
        with writer:
            return _build_locked(run, writer)
    except SourceChanged as e:
        raise BuildError(f"{e} (the build stopped; run again with `resume`)") from None
    except (BuildError, SourceError, EngineError, storage.StorageError):
        raise
    except OSError as e:
        raise output_error(e, run.out) from None


def _check_types(source, out, opts, progress, flags: dict[str, object]) -> None:
    """BuildError naming the first of ``build``'s arguments that has the wrong type."""
    for name, value in (("source", source), ("out", out)):
        if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
            raise BuildError(f"`{name}` must be a path or URL, got {value!r}"[:200])
    if opts is not None and not isinstance(opts, BuildOptions):
        raise BuildError(f"`opts` must be a BuildOptions, got {type(opts).__name__} (BuildOptions(**d) builds one)")
    if progress is not None and not callable(progress):
        raise BuildError(f"`progress` must be a callable or None, got {type(progress).__name__}")
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise BuildError(f"`{name}` must be True or False, got {flag!r}")


def _path(p) -> str:
    """A path or URL as ``storage`` takes it (``file://`` made local; BuildError for credentials in a URL)."""
    try:
        return storage.local(str(os.fspath(p)))
    except storage.CredentialsInURL as e:
        raise BuildError(str(e)) from None


def _build_locked(run: _Run, writer: DatasetWriter) -> dict:
    """The build, with the output folder locked."""
    opts = run.opts
    fmt, items = _open(run, writer)
    fingerprint = _fingerprint(run, fmt)
    done = writer.start(fingerprint, opts.prefix)  # the source is open and its first record read: only now
    start = done[-1].end_index if done else 0
    planner = opts.shards.planner(first_shard=len(done), start_index=start)
    if run.progress and start:
        run.progress(start)
    workers, items = _workers(run, items)
    with engine_context(run.engine, workers, run.address) as eng:
        new, seen, tail = run_build_pipeline(
            islice(items, start, None), opts, planner, writer.write, eng, start, run.progress
        )
    return writer.finish(
        done + new,
        seen=seen,
        tail=tail,
        workers=workers,
        kind="build",
        prefix=opts.prefix,
        options={**opts.fingerprint(), "workers": workers},
        source={"format": fmt, "path": storage.redact(run.source), "fingerprint": fingerprint["source_fingerprint"]},
    )


def _open(run: _Run, writer: DatasetWriter) -> tuple[str, Iterator[SourceItem]]:
    """(format, inputs) of the source, its first record already read; the output-folder rules checked between
    opening the source and reading (so a source that cannot be opened fails before OUT is judged)."""
    fmt, items = open_source(run.source, run.opts.source, deferred=True)  # the request whole
    writer.check()
    return fmt, _peek(iter(items), run.source)


def _fingerprint(run: _Run, fmt: str) -> dict:
    """What ``options.json`` records (and ``resume`` compares): the source, the options, the source's state."""
    try:
        return {
            "source": source_key(run.source),
            "options": run.opts.fingerprint(),
            "source_fingerprint": source_fingerprint(
                run.source, fmt, exclude=None if storage.is_url(run.out) else run.out
            ),
        }
    except (OSError, storage.StorageError) as e:
        raise SourceError(f"{storage.redact(run.source)}: cannot read ({storage.redact_text(e)})") from None


def _workers(run: _Run, items: Iterator[SourceItem]) -> tuple[int, Iterator[SourceItem]]:
    """The number of processes (``opts.workers``, else ``ingest.policy``: the first inputs tell a small source
    from a large one) and the inputs (those read to decide, put back in front)."""
    opts = run.opts
    if opts.workers is not None:
        return opts.workers, items
    head = list(islice(items, SMALL_INPUT))
    heavy = (
        opts.verify == "full"
        or bool(opts.max_pixels)
        or storage.is_url(run.source)
        or bool(opts.image_root and storage.is_url(opts.image_root))
    )
    engine = run.engine if isinstance(run.engine, str) else "local"
    return auto_workers(heavy=heavy, small=len(head) < SMALL_INPUT, engine=engine), chain(head, items)


def _peek(items: Iterator[SourceItem], source: str) -> Iterator[SourceItem]:
    """``items`` with the first one already read (so a source that cannot be opened fails here, before the
    output folder is touched); SourceError when the source has no inputs at all."""
    try:
        first = next(items)
    except StopIteration:
        raise SourceError(f"{storage.redact(source)}: the source has no inputs") from None
    except (OSError, storage.StorageError) as e:
        raise SourceError(
            f"{storage.redact(source)}: cannot read ({storage.redact_text(getattr(e, 'strerror', None) or e)})"
        ) from None
    return chain([first], items)
