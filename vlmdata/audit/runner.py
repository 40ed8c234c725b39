"""Run one training workload over every source, so that the figures depend on the data and nothing else.

Phases (``run_audit``):

1. **Inputs** (``vlmdata.audit.inputs``): real, the image-free view of real, the synthetic twin of real
   (paired: step k of each sees the same sample positions), the mocks.
2. **Census**: each source's loader is run once in *shapes* mode (no decode: the exact batches' shapes and
   token ids, zero pixels) for the ``warmup + max_steps`` steps the measurement may use. Every sample must
   fit ``seq_length`` (checked here, before any training). Every shape item a batch brings
   (``workload.shape_items``: per-image grids, total patches, (B, S)) that no earlier batch brought marks
   the batch for warm-up.
3. **Warm-up**: the marked batches are run through ``workload.warm`` (forward + backward, no optimizer
   step) untimed, so one-off per-shape costs (cuDNN plans, allocator growth) fall here and not on
   whichever source happens to see a size first. Under torchrun every rank warms the same number of
   batches. Then each source's live loader is started (DataLoader workers forked once; they stay alive
   across epochs) and ``warmup`` full training steps per source run untimed; the first batch's wait is
   recorded as the source's start-up wait.
4. **Measurement, interleaved**: rounds of ``block`` steps per source, the source order rotating every
   round (A B C D, B C D A, ...), so host load and clock drift fall on every source alike. Per step::

       t0 -> next(batches) -> t1 -> workload(batch) -> t2
       data_wait_ms = t1 - t0 (wait_kind "epoch_boundary" on the first batch of a new epoch, else "steady")
       step_ms = t2 - t0; plus stage times, shape, FLOPs (computed outside the timed region),
       first_seen_shapes (shape items not warmed: expected 0), census_match (the batch is the one the
       census saw at that step), keys (sample keys, for the pairing check).

   After each round past ``min_steps``, the paired bootstrap intervals of every gap are checked
   (``verdict.settled``): the run stops when they are tight enough for the verdict, at ``max_steps``, or
   when ``budget_s`` of measuring has passed (whichever comes first; stops fall on round ends, so every
   source has the same number of steps).

``clock`` is injectable (tests drive a fake workload on a fake clock).
"""

from __future__ import annotations

import math
import os
import platform
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch

from vlmdata import __version__, sample_data_path
from vlmdata.audit.distributed import agree_max, agree_min
from vlmdata.audit.inputs import MOCKS, REAL, SOURCES, AuditError, Input, check_sources, prepare_input, real_shards
from vlmdata.audit.verdict import DEFAULT_THRESHOLD, PROXY_TOLERANCE, settled
from vlmdata.audit.workloads import ReferenceWorkload, UserWorkload, batch_shape, materialize
from vlmdata.errors import OptionsError
from vlmdata.loaders.options import LoaderOptions

__all__ = ["AuditConfig", "AuditError", "run_audit", "SOURCES", "MOCKS"]


def default_real() -> str:
    """The embedded sample dataset (real photographs; see its README), in a checkout or an installed wheel."""

    try:
        return sample_data_path()
    except FileNotFoundError as e:
        raise AuditError(f"no real dataset given and {e}") from None


@dataclass(frozen=True)
class AuditConfig:
    """Everything one audit run needs. Validated by ``check()``; defaults are the CPU demo's."""

    real: str | None = None  # None: the embedded sample data
    profile: str | None = None  # sample the synthetic source from this profile (unpaired) instead of the twin
    sources: tuple[str, ...] = SOURCES
    preset: str = "tiny"
    device: str = "cpu"
    seed: int = 0
    logits: str | None = None  # "all" | "loss"; None: "all" on CUDA, "loss" on CPU
    step: str | None = None  # "module:function" user workload
    model_family: str = "qwen3-vl"  # visual-token model the loader prepares batches for
    seq_length: int = 2048
    micro_batch_size: int = 2
    num_workers: int | None = None  # loader workers per source and rank; None: 0 on CPU, auto on CUDA
    loader_options: dict[str, Any] = field(default_factory=dict)  # other make_loader options
    warmup: int = 0  # untimed full training steps per source after its loader starts
    min_steps: int | None = None  # steps per source before stopping; None: one epoch of real (at most max_steps)
    max_steps: int = 60  # measured steps per source at most (the census covers this many)
    block: int = 2  # consecutive steps of one source within a round
    budget_s: float = 90.0  # measuring stops after this many seconds (at the end of a round)
    precision: float = 0.05  # stop when every gap's interval is within ±precision of its ratio (and decided)
    threshold: float = DEFAULT_THRESHOLD
    proxy_tolerance: float = PROXY_TOLERANCE
    warm_shapes: bool = True  # False skips the shape warm-up: only to show what it prevents
    workload_options: dict[str, Any] = field(default_factory=dict)  # freeze_vision, recompute, parallel (sweeps)

    def check(self) -> None:
        check_sources(tuple(self.sources))
        min_steps = self.max_steps if self.min_steps is None else self.min_steps
        if self.block < 1 or min_steps < 1 or self.max_steps < min_steps or self.warmup < 0:
            raise AuditError(
                f"need block >= 1, 1 <= min_steps <= max_steps and warmup >= 0 (got block={self.block}, "
                f"min_steps={self.min_steps}, max_steps={self.max_steps}, warmup={self.warmup})"
            )
        if self.budget_s <= 0 or not 0 < self.precision < 1:
            raise AuditError(f"need budget_s > 0 and 0 < precision < 1 (got {self.budget_s}, {self.precision})")
        if self.seq_length < 1 or self.micro_batch_size < 1:
            raise AuditError("seq_length and micro_batch_size must be positive")
        if self.num_workers is not None and self.num_workers < 0:
            raise AuditError(f"num_workers must be >= 0, got {self.num_workers}")

    def resolved_logits(self) -> str:
        return self.logits or ("all" if torch.device(self.device).type == "cuda" else "loss")

    def resolved_real(self) -> str:
        return self.real or default_real()

    def steps_cap(self) -> int:
        """max_steps rounded up to whole rounds."""
        return self.block * math.ceil(self.max_steps / self.block)


def default_workers(device: str, n_sources: int, world_size: int = 1) -> int:
    """Loader workers per source and rank: 0 on CPU (the step already uses every core); on CUDA the
    rank's share of the CPUs, minus two for the training process, split over the sources, 1..4."""
    if torch.device(device).type != "cuda":
        return 0
    cpus = (os.cpu_count() or 1) // max(1, world_size)
    return max(1, min(4, (cpus - 2) // max(1, n_sources)))


def default_loader_factory() -> Callable:
    """``vlmdata.loaders.make_loader``: every source goes through it."""
    from vlmdata.loaders.api import make_loader  # heavy imports stay out of the CLI's start-up

    return make_loader


# ----------------------------------------------------------------------------- helpers


def loader_options(cfg: AuditConfig, inp: Input, workers: int, images: str | None = None) -> LoaderOptions:
    """The ``LoaderOptions`` one source is opened with: the audit's settings, then ``cfg.loader_options``
    (the user's), then the source's own (e.g. the image-free view's ``images="drop"``)."""
    changes = {**cfg.loader_options, **inp.options}
    if images is not None and changes.get("images", "decode") == "decode":  # "drop" stays "drop"
        changes["images"] = images
    if changes.get("images", "decode") != "decode":  # planning and image-free loaders decode nothing anywhere
        changes.update(image_device=None, image_decoder="nvjpeg")
    try:
        opts = LoaderOptions(
            model=cfg.model_family,
            seq_length=cfg.seq_length,
            micro_batch_size=cfg.micro_batch_size,
            seed=cfg.seed,
            num_workers=workers,
            num_epochs=None,
            pin_memory=torch.device(cfg.device).type == "cuda" and workers > 0,
        ).replace(**changes)
    except OptionsError as e:
        raise AuditError(f"source {inp.name}: {e}") from None
    return opts


def _open(factory: Callable, inp: Input, cfg: AuditConfig, workers: int, images: str | None = None):
    opts = loader_options(cfg, inp, workers, images)
    try:
        return factory(inp.source, opts), opts.to_dict()
    except (ValueError, OSError) as e:
        raise AuditError(f"cannot open source {inp.name}: {e}") from None


def _iterate(loader, inline: bool) -> Iterator:
    if inline and hasattr(loader, "iter_inline"):
        return loader.iter_inline()
    return iter(loader)


def _next(it: Iterator, name: str, i: int, total: int):
    try:
        return next(it)
    except StopIteration:
        raise AuditError(f"source {name}: the loader ran out of batches after {i} of {total} steps") from None
    except ValueError as e:  # e.g. every sample skipped, or a row longer than seq_length
        raise AuditError(f"source {name}: {e}") from None


def _lengths(loader, batch) -> list[int]:
    lengths = getattr(loader, "last_lengths", None)
    return list(lengths) if lengths else [int(torch.as_tensor(batch["input_ids"]).shape[1])]


@dataclass
class _Census:
    batches: list  # shapes-only batches (zero-stride pixels: no pixel memory)
    items: list[frozenset]  # shape items of each step
    keys: list[list[str]]
    epochs: list  # epoch of each batch (None when the loader does not say)
    longest: int
    too_long: int
    samples: int

    def epoch_steps(self) -> int | None:
        """Steps until the first batch of the next epoch (None: no epoch ends within the census)."""
        for i, e in enumerate(self.epochs):
            if e is not None and e != self.epochs[0]:
                return i
        return None


def census(name: str, loader, steps: int, workload) -> _Census:
    """Run ``loader`` (shapes mode, in this process) for ``steps`` batches and record what each brings."""
    it = _iterate(loader, inline=True)
    c = _Census([], [], [], [], 0, 0, 0)
    for i in range(steps):
        batch = _next(it, name, i, steps)
        c.batches.append(batch)
        c.items.append(workload.shape_items(batch))
        c.keys.append(list(getattr(loader, "last_keys", []) or []))
        c.epochs.append(getattr(loader, "last_epoch", None))
        lens = _lengths(loader, batch)
        c.samples += len(lens)
        c.longest = max(c.longest, max(lens))
        c.too_long += sum(n > int(torch.as_tensor(batch["input_ids"]).shape[1]) for n in lens)
    return c


def environment(device: str) -> dict:
    import numpy
    import transformers

    dev = torch.device(device)
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "vlmdata": __version__,
        "device": str(dev),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    if dev.type == "cuda":
        env.update(
            device_name=torch.cuda.get_device_name(dev),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            # torch.cuda.nccl is loaded by `import torch` but torch.cuda does not import it by name
            nccl=".".join(map(str, torch.cuda.nccl.version())),  # pyright: ignore[reportAttributeAccessIssue]
        )
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def _record(
    workload,
    batch,
    r: dict,
    *,
    name: str,
    step: int,
    rnd: int,
    t0: float,
    t1: float,
    t2: float,
    wait_kind: str,
    new_items: int,
    match: bool | None,
    keys: list[str],
) -> dict:
    f = workload.flops(batch)
    return {
        "step": step,
        "round": rnd,
        "data_wait_ms": (t1 - t0) * 1e3,
        "step_ms": (t2 - t0) * 1e3,
        "wait_kind": wait_kind,
        "times_ms": r["times_ms"],
        "peak_mem_bytes": r.get("peak_mem_bytes"),
        "loss": r.get("loss"),
        "flops": f.get("total_flops"),
        "lm_flops": f.get("lm_flops"),
        "vision_flops": f.get("vision_flops"),
        **{k: f[k] for k in ("tokens_total", "tokens_nonpad", "tokens_loss", "tokens_visual", "tokens_padding")},
        **batch_shape(batch),
        "first_seen_shapes": new_items,
        "census_match": match,
        "keys": keys,
    }


# ----------------------------------------------------------------------------- the run


def run_audit(
    cfg: AuditConfig,
    *,
    loader_factory: Callable | None = None,
    out_dir: str | None = None,
    dist=None,
    progress: Callable | None = None,
    clock: Callable[[], float] = time.perf_counter,
    workload=None,
) -> dict:
    """Measure every source of ``cfg`` (see the module docstring).

    Args:
        cfg: the run's settings.
        loader_factory: ``make_loader``-compatible factory (default ``vlmdata.loaders.make_loader``).
        out_dir: where generated inputs (the synthetic twin) are written (a temporary folder when None).
        dist: ``distributed.DistInfo`` under torchrun, else None.
        progress: ``progress(total)`` -> context manager yielding ``advance(n=1)``.
        clock: seconds; the timer of every measured interval.
        workload: a workload object (``vlmdata.audit.workloads``' interface) instead of the one ``cfg`` names.

    Returns:
        ``{"config", "environment", "workload", "measurement", "sources": {name: {"records", "loader",
        "world_size", "paired", "definition", "startup_wait_ms", "census"}}}``.
    """
    cfg.check()
    factory = loader_factory or default_loader_factory()
    main = dist is None or dist.is_main
    world = dist.world_size if dist is not None else 1
    device = dist.device if dist is not None else cfg.device
    work_dir = out_dir if (out_dir and main) else tempfile.mkdtemp(prefix="vlmdata-audit-")
    logits = cfg.resolved_logits()
    workers = cfg.num_workers if cfg.num_workers is not None else default_workers(device, len(cfg.sources), world)
    cap = cfg.steps_cap()
    horizon = cfg.warmup + cap
    t_start = clock()

    shards = real_shards(cfg.resolved_real())
    if workload is None:
        workload = (
            UserWorkload(cfg.step, device, cfg.workload_options)
            if cfg.step
            else ReferenceWorkload(cfg.preset, device, logits, dist, seed=cfg.seed, **cfg.workload_options)
        )
    oom: dict[str, dict] = {}  # source -> where it ran out of memory (the run goes on without it)

    def out_of_memory(name: str, where: str, e: BaseException) -> None:
        if dist is not None:  # ranks cannot agree to skip a collective half-way: an OOM ends a torchrun audit
            raise e
        oom[name] = {
            "where": where,
            "error": str(e).splitlines()[0][:300],
            "peak_mem_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        }
        workload.recover()

    result: dict[str, Any] = {
        "config": {
            **asdict(cfg),
            "sources": list(cfg.sources),
            "logits": logits,
            "num_workers": workers,
            "real": cfg.resolved_real(),
            "max_steps": cap,
        },
        "environment": environment(device),
        "workload": workload.describe(),
        "sources": {},
    }
    try:
        # 1-2. inputs and census (real first: the synthetic twin covers the keys real's steps use)
        t_prep = clock()
        inputs: dict[str, Input] = {}
        censuses: dict[str, _Census] = {}
        for name in [REAL] + [s for s in cfg.sources if s != REAL]:
            # the twin covers the census steps plus what the loader's workers prefetch beyond them
            twin_keys = {k for ks in censuses[REAL].keys for k in ks} if REAL in censuses else None
            inputs[name] = prepare_input(
                name,
                shards,
                profile=cfg.profile,
                seed=cfg.seed,
                model=cfg.model_family,
                work_dir=work_dir,
                twin_keys=twin_keys,
            )
            loader, _ = _open(factory, inputs[name], cfg, workers, images="shapes")
            ahead = (max(1, workers) * 2 + cfg.block) if name == REAL else 0  # DataLoader prefetch: 2 per worker
            censuses[name] = c = census(name, loader, horizon + ahead, workload)
            if c.too_long:
                raise AuditError(
                    f"source {name}: {c.too_long} of {c.samples} samples in the first {len(c.items)} steps need more "
                    f"than seq_length={cfg.seq_length} tokens (the longest needs {c.longest}); use seq_length >= "
                    f"{-(-c.longest // 128) * 128}"
                )
        epoch = censuses[REAL].epoch_steps()
        if epoch is not None:
            epoch = max(1, epoch - cfg.warmup) if cfg.warmup else epoch
        if dist is not None:  # ranks' shares differ by a sample: one window for all (the longest epoch)
            epoch = int(agree_max(dist, epoch or 0)) or None
        min_steps = cfg.min_steps if cfg.min_steps is not None else min(epoch or cap, cap)
        prep_s = clock() - t_prep

        # 3. warm-up: one full step (optimizer, gradient sync), then every shape item of the first round
        warmed: set = set()
        warm_stats = {"batches": 0, "seconds": 0.0, "in_rounds": 0.0}
        rounds = 0
        first = censuses[REAL].batches[0]
        t_w = clock()
        workload.begin_step()
        try:
            workload(materialize(first))
        except torch.OutOfMemoryError as e:
            out_of_memory(REAL, "first training step", e)
        warm_stats["seconds"] += clock() - t_w
        warm_stats["full_steps"] = 1

        def warm_up(indices: dict[str, range]) -> None:
            """Warm every shape item the given census steps bring that nothing warmed yet (untimed)."""
            todo: list[tuple[str, dict]] = []
            if not cfg.warm_shapes:
                return
            for name, idx in indices.items():
                if name in oom:
                    continue
                for i in idx:
                    if censuses[name].items[i] - warmed:
                        todo.append((name, censuses[name].batches[i]))
                        warmed.update(censuses[name].items[i])
            n = int(agree_max(dist, len(todo)))  # every rank runs the same number of warm-up steps
            t = clock()
            for i in range(n):
                name, batch = todo[min(i, len(todo) - 1)] if todo else (REAL, first)
                if name in oom:
                    continue
                try:
                    workload.warm(materialize(batch))
                except torch.OutOfMemoryError as e:
                    out_of_memory(name, "warm-up", e)
            dt = clock() - t
            warm_stats["batches"] += n
            warm_stats["seconds"] += dt
            if rounds:  # warm-ups between rounds: not part of the measuring budget
                warm_stats["in_rounds"] += dt

        live: dict[str, Any] = {}
        its: dict[str, Iterator] = {}
        pending: dict[str, Any] = {}
        startup: dict[str, float] = {}
        loader_records: dict[str, dict] = {}
        last_epoch: dict[str, Any] = {}
        warm_up({name: range(0, min(horizon, cfg.warmup + cfg.block)) for name in cfg.sources})
        t_lw = clock()
        for name in cfg.sources:  # start each loader; its first batch's wait is start-up, reported apart
            live[name], opts = _open(factory, inputs[name], cfg, workers)
            loader_records[name] = {
                "source": inputs[name].name,
                "kwargs": {k: v for k, v in opts.items() if isinstance(v, (int, float, str, bool, type(None)))},
                "factory": f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', '?')}",
            }
            its[name] = _iterate(live[name], inline=False)
            t0 = clock()
            pending[name] = _next(its[name], name, 0, horizon)
            startup[name] = (clock() - t0) * 1e3
            if getattr(live[name], "last_epoch", None) is not None:
                last_epoch[name] = live[name].last_epoch
        for i in range(cfg.warmup):  # optional untimed full steps per source
            for name in cfg.sources:
                batch = pending.pop(name) if name in pending else _next(its[name], name, i, horizon)
                workload.begin_step()
                workload(batch)
                if getattr(live[name], "last_epoch", None) is not None:
                    last_epoch[name] = max(live[name].last_epoch, last_epoch.get(name, 0))
        loader_warm_s = clock() - t_lw

        # 4. interleaved rounds
        records: dict[str, list] = {name: [] for name in cfg.sources}
        n = len(cfg.sources)
        done, stop_reason = 0, None
        t_measure = clock()
        ctx = progress(n * min_steps) if progress else nullcontext(lambda k=1: None)  # the expected steps
        with ctx as advance:
            while stop_reason is None:
                if done == min_steps and hasattr(advance, "set_total"):  # measuring on past min_steps
                    advance.set_total(n * cap)
                if rounds:
                    warm_up(
                        {
                            name: range(cfg.warmup + done, cfg.warmup + min(cap, done + cfg.block))
                            for name in cfg.sources
                        }
                    )
                for name in [cfg.sources[(rounds + j) % n] for j in range(n)]:
                    for j in range(cfg.block):
                        if name in oom:
                            advance(1)
                            continue
                        k = done + j
                        idx = cfg.warmup + k
                        t0 = clock()
                        if name in pending:  # fetched at start-up: its wait is reported as start-up
                            batch, kind = pending.pop(name), "startup_excluded"
                        else:
                            batch, kind = _next(its[name], name, idx, horizon), "steady"
                        t1 = clock()
                        workload.begin_step()
                        try:
                            r = workload(batch)
                        except torch.OutOfMemoryError as e:
                            out_of_memory(name, f"step {k}", e)
                            records[name] = []
                            advance(1)
                            continue
                        t2 = clock()
                        items = workload.shape_items(batch)
                        new = items - warmed
                        warmed.update(new)
                        ep = getattr(live[name], "last_epoch", None)
                        if kind == "steady" and ep is not None and ep > last_epoch.get(name, ep):
                            kind = "epoch_boundary"  # the first batch of an epoch later than any before
                        if ep is not None:
                            last_epoch[name] = max(ep, last_epoch.get(name, ep))
                        records[name].append(
                            _record(
                                workload,
                                batch,
                                r,
                                name=name,
                                step=k,
                                rnd=rounds,
                                t0=t0,
                                t1=t1,
                                t2=t2,
                                wait_kind=kind,
                                new_items=len(new),
                                match=items == censuses[name].items[idx],
                                keys=list(getattr(live[name], "last_keys", []) or []),
                            )
                        )
                        advance(1)
                done += cfg.block
                rounds += 1
                elapsed = clock() - t_measure - warm_stats["in_rounds"]  # the budget counts measuring only
                measured = {k: v for k, v in records.items() if k not in oom}
                if not measured:
                    stop_reason = "out_of_memory"
                elif REAL in oom or len(measured) < 2:  # no gap to settle: the others' figures still count
                    stop_reason = "out_of_memory" if done >= min(min_steps, cap) else None
                else:
                    stop_reason = _stop(measured, cfg, world, done, cap, min_steps, epoch, elapsed)
                if dist is not None:  # every rank stops together
                    stop_reason = _agree_stop(dist, stop_reason)
        measure_s = clock() - t_measure - warm_stats["in_rounds"]
        window = _window(done, epoch)
        records = {name: recs[:window] for name, recs in records.items()}
        measured = {k: v for k, v in records.items() if k not in oom}
        open_items = []
        if REAL in measured and len(measured) > 1:
            _, open_items = settled(
                _runs(measured, world),
                threshold=cfg.threshold,
                proxy_tolerance=cfg.proxy_tolerance,
                precision=cfg.precision,
                seed=cfg.seed,
            )
        for name in cfg.sources:
            stats = getattr(live[name], "stats", None)
            if stats is not None and hasattr(stats, "to_json"):
                loader_records[name]["stats"] = stats.to_json()
            c = censuses[name]
            result["sources"][name] = {
                "records": records[name],
                "loader": loader_records[name],
                "world_size": world,
                "paired": inputs[name].paired,
                "definition": inputs[name].definition,
                "startup_wait_ms": startup.get(name),
                "census": {
                    "steps": len(c.items),
                    "samples": c.samples,
                    "longest_tokens": c.longest,
                    "mismatched_steps": sum(1 for r in records[name] if r["census_match"] is False),
                },
                "pairing": _pairing(records[name], records[REAL]) if inputs[name].paired and REAL not in oom else None,
                "oom": oom.get(name),
            }
        result["measurement"] = {
            "method": "interleaved",
            "block": cfg.block,
            "rounds": rounds,
            "steps_run": done,
            "steps_per_source": window,
            "real_epoch_steps": epoch,
            "stop": stop_reason,
            "open": open_items,
            "min_steps": min_steps,
            "max_steps": cap,
            "budget_s": cfg.budget_s,
            "precision": cfg.precision,
            "order_first_round": [cfg.sources[j % n] for j in range(n)],
            "warmup": {
                "shape_batches": warm_stats["batches"],
                "full_steps": warm_stats["full_steps"],
                "shape_items": len(warmed),
                "seconds": warm_stats["seconds"],
                "loader_steps_per_source": cfg.warmup,
                "loader_seconds": loader_warm_s,
            },
            "prepare_seconds": prep_s,
            "measure_seconds": measure_s,
            "total_seconds": clock() - t_start,
            "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        }
    finally:
        workload.close()
    return result


def _window(done: int, epoch: int | None) -> int:
    """Steps the figures use: whole epochs of real when at least one was measured (every sample weighs the
    same), else every step run."""
    return done if not epoch or done < epoch else done - done % epoch


def _stop(
    records: dict[str, list],
    cfg: AuditConfig,
    world: int,
    done: int,
    cap: int,
    min_steps: int,
    epoch: int | None,
    elapsed: float,
) -> str | None:
    """Why to stop after this round (None: go on). The settled check runs on the whole-epoch window."""
    if done >= cap:
        return "max_steps"
    if elapsed >= cfg.budget_s and done >= min(min_steps, cap):
        return "budget"
    if done >= min_steps:
        window = _window(done, epoch)
        fresh = epoch is None or window == done or done - window < cfg.block  # a window just completed
        if fresh and _settled({k: v[:window] for k, v in records.items()}, cfg, world):
            return "settled"
    if elapsed >= 4 * cfg.budget_s:  # min_steps cannot be reached in reasonable time
        return "budget"
    return None


def _runs(records: dict[str, list], world: int) -> dict[str, dict]:
    return {name: {"records": recs, "world_size": world, "interleaved": True} for name, recs in records.items()}


def _settled(records: dict[str, list], cfg: AuditConfig, world: int) -> bool:
    ok, _ = settled(
        _runs(records, world),
        threshold=cfg.threshold,
        proxy_tolerance=cfg.proxy_tolerance,
        precision=cfg.precision,
        seed=cfg.seed,
    )
    return ok


def _agree_stop(dist, reason: str | None) -> str | None:
    """One stop decision for all ranks: the cap and the budget stop everyone; 'settled' only when every
    rank is settled."""
    hard = agree_max(dist, 1 if reason in ("max_steps", "budget") else 0)
    if hard:
        return reason or "budget"
    return "settled" if agree_min(dist, 1 if reason == "settled" else 0) else None


def _pairing(records: list[dict], real: list[dict]) -> dict:
    """How many measured steps of a paired source saw exactly the samples (keys) real saw at that step."""
    same = sum(1 for a, b in zip(records, real) if a.get("keys") and a.get("keys") == b.get("keys"))
    return {"steps": len(records), "same_samples": same, "paired_fraction": same / len(records) if records else None}


def iter_records(result: dict) -> Iterable[tuple[str, dict]]:
    """(source, record) of every measured step."""
    for name, src in result["sources"].items():
        for r in src["records"]:
            yield name, r
