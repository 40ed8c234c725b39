"""Run one training workload over every source, so that the figures depend on the data and nothing else.

A measured **step** is one global step of Megatron Bridge's ``train_step`` on one data-parallel rank:
``micro_batches = GBS / (MBS * DP)`` micro-batches of forward and backward, then one optimizer step
(``vlmdata.audit.run_spec``; the settings resolve in ``vlmdata.audit.config``). Phases (``run_audit``):

1. **Inputs** (``vlmdata.audit.inputs``): real, the image-free view of real, the synthetic twin of real
   (paired: step k of each sees the same sample positions), the mocks.
2. **Census** (``_census``): each source's loader runs once in *shapes* mode (no decode: the exact batches'
   shapes and token ids, zero pixels) for every micro-batch the measurement may use, each batch padded as
   the run's step pads it (``RunSpec.prepare``). Every sample must fit ``seq_length``. Every shape item a
   batch brings (``workload.shape_items``) that no earlier batch brought marks the batch for warm-up. The
   census also records each sample's tokens and image patches (the straggler model's input).
3. **Warm-up** (``_warm``): one full global step, then the marked batches run forward and backward untimed
   (no optimizer step), one round ahead, so one-off per-shape costs fall here. Under torchrun every rank
   warms the same number of batches. Then each source's live loader starts (workers forked once; they stay
   alive across epochs; the first batch's wait is reported as start-up) and ``warmup`` untimed global steps
   per source run.
4. **Measured rounds** (``_rounds``): rounds of ``block`` global steps per source, the order rotating every
   round (A B C D, B C D A, ...). Per global step::

       t0 -> for each micro-batch: next(loader) (wait), forward + backward -> optimizer -> sync -> t2
       step_ms = t2 - t0; stage times (data_wait = the device idle while the host waited for data),
       per-micro-batch device times and shapes, FLOPs (computed outside the timed region), first-seen
       shape items (expected 0), census_match, sample keys (for the pairing check).

5. **Stop rule** (``_stop``): after each round past ``min_steps`` (default one epoch of real), the paired
   bootstrap intervals of every gap are checked (``verdict.settled``): stop when they decide the verdict,
   at ``max_steps``, or after ``budget_s`` of measuring (at a round's end: every source has as many steps).

``clock`` is injectable (tests drive a fake workload on a fake clock).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from vlmdata import __version__
from vlmdata.audit.compose import Composition, compose_record, plan
from vlmdata.audit.config import AuditConfig, Resolved, default_real, default_workers, resolve
from vlmdata.audit.distributed import agree_max, agree_min
from vlmdata.audit.inputs import MOCKS, REAL, SOURCES, AuditError, Input, fit_seq_length, prepare_input, real_shards
from vlmdata.audit.model import IMAGE_TOKEN_ID
from vlmdata.audit.straggler_model import Sample, calibrate, fit_cost_model, samples_from_batch, simulate
from vlmdata.audit.verdict import settled
from vlmdata.audit.workloads import ReferenceWorkload, UserWorkload, as_global_steps, batch_shape, materialize
from vlmdata.errors import OptionsError
from vlmdata.loaders.options import LoaderOptions

__all__ = ["AuditConfig", "AuditError", "run_audit", "SOURCES", "MOCKS", "default_real", "default_workers"]
DP_SIZES = (8, 64, 512, 4096)  # data-parallel sizes the straggler model predicts


def fit_default_seq_length(cfg: AuditConfig, res: Resolved) -> Resolved:
    """A seq_length nobody gave (not a flag, not the Bridge config) raised to fit the real data's longest
    sample (``inputs.fit_seq_length``), said in the notes; a given one is never changed."""
    if res.sources.get("seq_length") != "default":
        return res
    run = res.run
    seq = fit_seq_length(
        cfg.resolved_real(),
        run.seq_length,
        micro_batch_size=run.micro_batch_size,
        seed=cfg.seed,
        loader_options={**cfg.loader_options, "model": res.shape.loader_model},
    )
    if seq == run.seq_length:
        return res
    note = f"seq_length {seq}: the default {run.seq_length} is shorter than the real data's longest sample"
    return dataclasses.replace(res, run=run.replace(seq_length=seq), notes=(*res.notes, note))


def default_loader_factory() -> Callable:
    """``vlmdata.loaders.make_loader``: every source goes through it."""
    from vlmdata.loaders.api import make_loader  # heavy imports stay out of the CLI's start-up

    return make_loader


# ----------------------------------------------------------------------------- loaders


def loader_options(
    cfg: AuditConfig, inp: Input, workers: int, images: str | None = None, res: Resolved | None = None
) -> LoaderOptions:
    """The ``LoaderOptions`` one source is opened with: the run's (model family, seq_length, micro-batch,
    padding policy), then ``cfg.loader_options`` (the user's), then the source's own (e.g. the image-free
    view's ``images="drop"``)."""
    res = res or resolve(cfg)
    changes = {**res.run.loader_changes(), **cfg.loader_options, **inp.options}
    if images is not None and changes.get("images", "decode") == "decode":  # "drop" stays "drop"
        changes["images"] = images
    if changes.get("images", "decode") != "decode":  # planning and image-free loaders decode nothing anywhere
        changes.update(image_device=None, image_decoder="nvjpeg")
    try:
        return LoaderOptions(
            model=res.shape.loader_model,
            seed=cfg.seed,
            num_workers=workers,
            num_epochs=None,
            pin_memory=torch.device(cfg.device).type == "cuda" and workers > 0,
        ).replace(**changes)
    except OptionsError as e:
        raise AuditError(f"source {inp.name}: {e}") from None


def _iterate(loader, inline: bool) -> Iterator:
    if inline and hasattr(loader, "iter_inline"):
        return loader.iter_inline()
    return iter(loader)


def _next(it: Iterator, name: str, i: int, total: int):
    try:
        return next(it)
    except StopIteration:
        raise AuditError(f"source {name}: the loader ran out of batches after {i} of {total} micro-batches") from None
    except ValueError as e:  # e.g. every sample skipped, or a row longer than seq_length
        raise AuditError(f"source {name}: {e}") from None


def _lengths(loader, batch) -> list[int]:
    lengths = getattr(loader, "last_lengths", None)
    return list(lengths) if lengths else [int(torch.as_tensor(batch["input_ids"]).shape[1])]


@dataclass
class _Census:
    batches: list = field(default_factory=list)  # shapes-only batches (zero-stride pixels: no pixel memory)
    items: list[frozenset] = field(default_factory=list)  # shape items of each micro-batch
    keys: list[list[str]] = field(default_factory=list)
    epochs: list = field(default_factory=list)  # epoch of each batch (None when the loader does not say)
    samples: list[list] = field(default_factory=list)  # [tokens, [patches per image]] per sample
    longest: int = 0
    too_long: int = 0

    def epoch_micro(self) -> int | None:
        """Micro-batches until the first batch of the next epoch (None: no epoch ends within the census)."""
        for i, e in enumerate(self.epochs):
            if e is not None and e != self.epochs[0]:
                return i
        return None

    def epoch_samples(self) -> list[list]:
        """The samples of the first epoch (or of the whole census)."""
        end = self.epoch_micro()
        return [s for b in self.samples[: end or len(self.samples)] for s in b]


def _census_samples(loader, batch, merge: int) -> list[list]:
    """[tokens, [patches per image]] of each sample of a census batch."""
    ids = torch.as_tensor(batch["input_ids"])
    grid = batch.get("visual_inputs")
    grid = grid.get("image_grid_thw") if isinstance(grid, dict) else getattr(grid, "image_grid_thw", None)
    grids = [] if grid is None else [tuple(map(int, g)) for g in torch.as_tensor(grid).tolist()]
    lengths = _lengths(loader, batch)
    cu = batch.get("cu_seqlens_q")
    if cu is not None:  # packed: one row of several samples
        b = torch.as_tensor(cu).tolist()
        visual = [int((ids[0, s:e] == IMAGE_TOKEN_ID).sum()) for s, e in zip(b[:-1], b[1:])]
    else:
        visual = (ids == IMAGE_TOKEN_ID).sum(1).tolist()
    if len(lengths) != len(visual):
        lengths = [int(x) for x in (ids != 0).sum(1).tolist()] if cu is None else lengths
    return [[s.tokens, list(s.image_patches)] for s in samples_from_batch(lengths, grids, visual, merge)]


def census(name: str, loader, micro_batches: int, workload, prepare: Callable = lambda b: b, merge: int = 2) -> _Census:
    """Run ``loader`` (shapes mode, in this process) for ``micro_batches`` batches and record what each brings."""
    it = _iterate(loader, inline=True)
    c = _Census()
    for i in range(micro_batches):
        batch = prepare(_next(it, name, i, micro_batches))
        c.batches.append(batch)
        c.items.append(workload.shape_items(batch))
        c.keys.append(list(getattr(loader, "last_keys", []) or []))
        c.epochs.append(getattr(loader, "last_epoch", None))
        lens = _lengths(loader, batch)
        c.longest = max(c.longest, max(lens))
        width = int(torch.as_tensor(batch["input_ids"]).shape[1])
        too_long = sum(n > width for n in lens) if batch.get("cu_seqlens_q") is None else 0
        c.too_long += too_long
        c.samples.append([] if too_long else _census_samples(loader, batch, merge))  # truncated: refused below
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


# ----------------------------------------------------------------------------- one global step's record

SUMMED = (
    "samples",
    "images",
    "patches",
    "tokens_total",
    "tokens_nonpad",
    "tokens_loss",
    "tokens_visual",
    "tokens_padding",
)
FLOP_FIELDS = ("total_flops", "lm_flops", "lm_layers_flops", "lm_head_flops", "vision_flops", "projector_flops")


def micro_shape(workload, batch) -> dict:
    """Shape, tokens and FLOPs of one micro-batch (outside any timed region)."""
    f = workload.flops(batch)
    shape = batch_shape(batch)
    grid = batch.get("visual_inputs")
    grid = grid.get("image_grid_thw") if isinstance(grid, dict) else getattr(grid, "image_grid_thw", None)
    per_image = [] if grid is None else torch.as_tensor(grid).prod(-1).tolist()
    return {
        **shape,
        **{k: f.get(k) for k in FLOP_FIELDS},
        **{k: f[k] for k in SUMMED if k in f},
        "patch_sq": int(sum(n * n for n in per_image)),
    }


def global_record(
    parts: list[dict], r: dict, *, step: int, rnd: int, step_ms: float, wait_kind: str, keys: list
) -> dict:
    """One record per global step: work summed over its micro-batches (``parts``: their ``micro_shape``
    plus ``wait_ms``, ``new_items``, ``match``), times from the workload's ``finish()`` (``r``)."""
    rec: dict[str, Any] = {
        "step": step,
        "round": rnd,
        "micro_batches": len(parts),
        "step_ms": step_ms,
        "data_wait_ms": float(r.get("data_wait_ms", sum(p["wait_ms"] for p in parts))),
        "loader_wait_ms": float(sum(p["wait_ms"] for p in parts)),
        "wait_kind": wait_kind,
        "times_ms": r["times_ms"],
        "peak_mem_bytes": r.get("peak_mem_bytes"),
        "loss": r.get("loss"),
    }
    for k in (*SUMMED, "patch_sq"):
        rec[k] = sum(int(p.get(k) or 0) for p in parts)
    for k in FLOP_FIELDS:
        vals = [p.get(k) for p in parts]
        rec["flops" if k == "total_flops" else k] = None if any(v is None for v in vals) else sum(v or 0 for v in vals)
    micro_ms = r.get("micro_ms") or [None] * len(parts)
    decoder_ms = r.get("micro_decoder_ms") or [None] * len(parts)
    rec["micro"] = [
        {
            "ms": ms,
            "decoder_ms": dec,
            "wait_ms": p["wait_ms"],
            "tokens_total": p.get("tokens_total"),
            "patches": p.get("patches"),
            "patch_sq": p.get("patch_sq"),
        }
        for p, ms, dec in zip(parts, micro_ms, decoder_ms)
    ]
    rec["plain_layers"] = r.get("plain_layers")
    rec["visual_tokens_per_sample"] = [v for p in parts for v in p.get("visual_tokens_per_sample") or []]
    rec["first_seen_shapes"] = sum(p["new_items"] for p in parts)
    rec["census_match"] = None if any(p["match"] is None for p in parts) else all(p["match"] for p in parts)
    rec["keys"] = keys
    return rec


# ----------------------------------------------------------------------------- the run


class _Audit:
    """One audit run's state; each phase is a method (see the module docstring)."""

    def __init__(self, cfg, factory, out_dir, dist, progress, clock, workload):
        self.cfg, self.factory, self.dist, self.progress, self.clock = cfg, factory, dist, progress, clock
        self.main = dist is None or dist.is_main
        self.world = dist.world_size if dist is not None else 1
        self.device = dist.device if dist is not None else cfg.device
        self.res = fit_default_seq_length(cfg, resolve(cfg, self.world))
        self.work_dir = out_dir if (out_dir and self.main) else tempfile.mkdtemp(prefix="vlmdata-audit-")
        self.workers = (
            cfg.num_workers
            if cfg.num_workers is not None
            else default_workers(self.device, len(cfg.sources), self.world)
        )
        m = cfg.measure_settings()
        self.block, self.cap, self.budget_s = m["block"], m["max_steps"], m["budget_s"]
        self.warmup = cfg.resolved_warmup()
        self.n_micro = self.res.run.micro_batches
        self.horizon = self.warmup + self.cap  # global steps the census covers
        self.workload: Any = as_global_steps(workload if workload is not None else self._workload())
        summary = (self.workload.describe() or {}).get("model") or {}
        self.comp = (
            plan(self.res.run, self.res.shape, summary, link_gbps=cfg.link_gbps)
            if summary.get("params_trainable")
            else Composition(1, 1, 1.0)
        )
        self.oom: dict[str, dict] = {}
        self.inputs: dict[str, Input] = {}
        self.censuses: dict[str, _Census] = {}
        self.warmed: set = set()
        self.warm_stats = {"batches": 0, "seconds": 0.0, "in_rounds": 0.0, "full_steps": 0}
        self.rounds = 0
        self.live: dict[str, Any] = {}
        self.its: dict[str, Iterator] = {}
        self.pending: dict[str, Any] = {}
        self.startup: dict[str, float] = {}
        self.loader_records: dict[str, dict] = {}
        self.last_epoch: dict[str, Any] = {}
        self.records: dict[str, list] = {name: [] for name in cfg.sources}

    def _workload(self):
        cfg, res = self.cfg, self.res
        if cfg.step:
            return UserWorkload(cfg.step, self.device, cfg.workload_options)
        run = res.run
        options = {
            "freeze_language_model": run.freeze_language_model,
            "freeze_vision_model": run.freeze_vision_model,
            "freeze_vision_projection": run.freeze_vision_projection,
            "recompute": run.recompute,
            "attention": cfg.attention,
            **cfg.workload_options,
        }
        return ReferenceWorkload(
            res.shape,
            self.device,
            cfg.resolved_logits(),
            self.dist,
            seed=cfg.seed,
            layers=res.layers,
            experts=res.experts,
            **options,
        )

    def out_of_memory(self, name: str, where: str, e: BaseException) -> None:
        if self.dist is not None:  # ranks cannot agree to skip a collective half-way: an OOM ends a torchrun audit
            raise e
        self.oom[name] = {
            "where": where,
            "error": str(e).splitlines()[0][:300],
            "peak_mem_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        }
        self.workload.recover()

    def _open(self, inp: Input, images: str | None = None):
        opts = loader_options(self.cfg, inp, self.workers, images, self.res)
        try:
            return self.factory(inp.source, opts), opts.to_dict()
        except (ValueError, OSError) as e:
            raise AuditError(f"cannot open source {inp.name}: {e}") from None

    # ---------------------------------------------------------------- phase 1-2: inputs and census

    def prepare(self, shards: list[str]) -> int | None:
        """Inputs and census (real first: the twin covers the keys real's steps use); returns real's epoch in
        global steps (None: no whole number of them, or no epoch ended)."""
        cfg = self.cfg
        merge = self.res.shape.vision.spatial_merge_size
        for name in [REAL] + [s for s in cfg.sources if s != REAL]:
            twin_keys = {k for ks in self.censuses[REAL].keys for k in ks} if REAL in self.censuses else None
            self.inputs[name] = prepare_input(
                name,
                shards,
                profile=cfg.profile,
                seed=cfg.seed,
                model=self.res.shape.loader_model,
                work_dir=self.work_dir,
                twin_keys=twin_keys,
            )
            loader, _ = self._open(self.inputs[name], images="shapes")
            ahead = (max(1, self.workers) * 2 + self.n_micro) if name == REAL else 0  # DataLoader prefetch
            total = self.horizon * self.n_micro + ahead
            c = census(name, loader, total, self.workload, self.res.run.prepare, merge)
            self.censuses[name] = c
            if c.too_long:
                raise AuditError(
                    f"source {name}: {c.too_long} samples in the first {len(c.items)} micro-batches need more than "
                    f"seq_length={self.res.run.seq_length} tokens (the longest needs {c.longest}); use "
                    f"seq_length >= {-(-c.longest // 128) * 128}"
                )
        return self._epoch_steps()

    def _epoch_steps(self) -> int | None:
        micro = self.censuses[REAL].epoch_micro()
        if self.dist is not None:  # ranks' shares differ by a sample: one window for all (the longest epoch)
            micro = int(agree_max(self.dist, micro or 0)) or None
        self.epoch_micro = micro
        if micro is None:
            return None
        micro = max(1, micro - self.warmup * self.n_micro) if self.warmup else micro
        return micro // self.n_micro if micro % self.n_micro == 0 else None

    def min_steps(self, epoch: int | None) -> int:
        if self.cfg.min_steps is not None:
            return min(self.cfg.min_steps, self.cap)
        micro = self.epoch_micro
        return min(self.cap, max(1, math.ceil(micro / self.n_micro))) if micro else self.cap

    # ---------------------------------------------------------------- phase 3: warm-up

    def first_step(self) -> None:
        """One full global step (optimizer state, gradient sync, main-gradient buffers), untimed."""
        t = self.clock()
        first = self.censuses[REAL].batches[0]
        try:
            self.workload.begin_step(1)
            self.workload.micro(materialize(first))
            self.workload.finish()
        except torch.OutOfMemoryError as e:
            self.out_of_memory(REAL, "first training step", e)
        self.warm_stats["seconds"] += self.clock() - t
        self.warm_stats["full_steps"] = 1

    def warm(self, steps: range) -> None:
        """Warm every shape item that the census's micro-batches of these global steps bring and nothing warmed
        yet (untimed; every rank runs the same number of warm-up batches)."""
        if not self.cfg.warm_shapes:
            return
        todo: list[tuple[str, dict]] = []
        for name in self.cfg.sources:
            if name in self.oom:
                continue
            c = self.censuses[name]
            for i in range(steps.start * self.n_micro, min(len(c.items), steps.stop * self.n_micro)):
                if c.items[i] - self.warmed:
                    todo.append((name, c.batches[i]))
                    self.warmed.update(c.items[i])
        n = int(agree_max(self.dist, len(todo)))
        t = self.clock()
        for i in range(n):
            name, batch = todo[min(i, len(todo) - 1)] if todo else (REAL, self.censuses[REAL].batches[0])
            if name in self.oom:
                continue
            try:
                self.workload.warm(materialize(batch))
            except torch.OutOfMemoryError as e:
                self.out_of_memory(name, "warm-up", e)
        dt = self.clock() - t
        self.warm_stats["batches"] += n
        self.warm_stats["seconds"] += dt
        if self.rounds:  # warm-ups between rounds: not part of the measuring budget
            self.warm_stats["in_rounds"] += dt

    def start_loaders(self) -> float:
        """Start each source's live loader (its first batch's wait is start-up, reported apart), then the
        optional untimed global steps; returns the seconds it took."""
        t_lw = self.clock()
        horizon = self.horizon * self.n_micro
        for name in self.cfg.sources:
            self.live[name], opts = self._open(self.inputs[name])
            self.loader_records[name] = {
                "source": self.inputs[name].name,
                "kwargs": {k: v for k, v in opts.items() if isinstance(v, (int, float, str, bool, type(None)))},
                "factory": f"{getattr(self.factory, '__module__', '?')}.{getattr(self.factory, '__qualname__', '?')}",
            }
            self.its[name] = _iterate(self.live[name], inline=False)
            t0 = self.clock()
            self.pending[name] = _next(self.its[name], name, 0, horizon)
            self.startup[name] = (self.clock() - t0) * 1e3
            if getattr(self.live[name], "last_epoch", None) is not None:
                self.last_epoch[name] = self.live[name].last_epoch
        for i in range(self.warmup):  # optional untimed global steps per source
            for name in self.cfg.sources:
                self.workload.begin_step(self.n_micro)
                for j in range(self.n_micro):
                    batch = self.pending.pop(name) if name in self.pending else _next(self.its[name], name, j, horizon)
                    self.workload.micro(self.res.run.prepare(batch))
                self.workload.finish()
                self._note_epoch(name)
        return self.clock() - t_lw

    def _note_epoch(self, name: str) -> bool:
        """Record the loader's epoch; True when this batch opened an epoch later than any before."""
        ep = getattr(self.live[name], "last_epoch", None)
        if ep is None:
            return False
        new = ep > self.last_epoch.get(name, ep)
        self.last_epoch[name] = max(ep, self.last_epoch.get(name, ep))
        return new

    # ---------------------------------------------------------------- phase 4: measured rounds

    def global_step(self, name: str, k: int) -> dict | None:
        """One measured global step of ``name`` (its k-th); None when it ran out of memory."""
        base = (self.warmup + k) * self.n_micro
        parts, keys, wait_kind = [], [], "steady"
        t0 = self.clock()
        self.workload.begin_step(self.n_micro)
        try:
            for j in range(self.n_micro):
                t_w = self.clock()
                if name in self.pending:  # fetched at start-up: its wait is reported as start-up
                    batch, kind = self.pending.pop(name), "startup_excluded"
                else:
                    batch, kind = _next(self.its[name], name, base + j, self.horizon * self.n_micro), "steady"
                wait = (self.clock() - t_w) * 1e3 if kind == "steady" else 0.0
                if self._note_epoch(name) and kind == "steady":
                    wait_kind = "epoch_boundary"
                batch = self.res.run.prepare(batch)
                self.workload.micro(batch, wait)
                parts.append({"batch": batch, "wait_ms": wait, "i": base + j})
                keys += list(getattr(self.live[name], "last_keys", []) or [])
            r = self.workload.finish()
        except torch.OutOfMemoryError as e:
            self.out_of_memory(name, f"step {k}", e)
            return None
        t2 = self.clock()
        shapes = []
        for p in parts:  # shapes and FLOPs: outside the timed region
            items = self.workload.shape_items(p["batch"])
            new = items - self.warmed
            self.warmed.update(new)
            c = self.censuses[name]
            match = items == c.items[p["i"]] if p["i"] < len(c.items) else None
            shapes.append(
                {
                    **micro_shape(self.workload, p["batch"]),
                    "wait_ms": p["wait_ms"],
                    "new_items": len(new),
                    "match": match,
                }
            )
        rec = global_record(shapes, r, step=k, rnd=self.rounds, step_ms=(t2 - t0) * 1e3, wait_kind=wait_kind, keys=keys)
        return compose_record(rec, self.comp)

    def run_rounds(self, min_steps: int, epoch: int | None) -> tuple[int, str | None, float]:
        """Interleaved rounds until the stop rule says stop; returns (steps run, why it stopped, seconds)."""
        cfg, n = self.cfg, len(self.cfg.sources)
        done, stop = 0, None
        t_measure = self.clock()
        ctx = self.progress(n * min_steps) if self.progress else nullcontext(lambda k=1: None)
        with ctx as advance:
            while stop is None:
                if done == min_steps and hasattr(advance, "set_total"):  # measuring on past min_steps
                    advance.set_total(n * self.cap)
                if self.rounds:
                    self.warm(range(self.warmup + done, self.warmup + min(self.cap, done + self.block)))
                for name in [cfg.sources[(self.rounds + j) % n] for j in range(n)]:
                    for j in range(self.block):
                        if name not in self.oom:
                            rec = self.global_step(name, done + j)
                            if rec is None:
                                self.records[name] = []
                            else:
                                self.records[name].append(rec)
                        advance(1)
                done += self.block
                self.rounds += 1
                elapsed = self.clock() - t_measure - self.warm_stats["in_rounds"]  # the budget counts measuring only
                stop = self.stop_reason(done, min_steps, epoch, elapsed)
        return done, stop, self.clock() - t_measure - self.warm_stats["in_rounds"]

    # ---------------------------------------------------------------- phase 5: stop rule

    def stop_reason(self, done: int, min_steps: int, epoch: int | None, elapsed: float) -> str | None:
        measured = {k: v for k, v in self.records.items() if k not in self.oom}
        if not measured:
            stop = "out_of_memory"
        elif REAL in self.oom or len(measured) < 2:  # no gap to settle: the others' figures still count
            stop = "out_of_memory" if done >= min(min_steps, self.cap) else None
        else:
            stop = _stop(
                measured, self.cfg, self.world, done, self.cap, min_steps, epoch, elapsed, self.budget_s, self.block
            )
        if self.dist is not None:  # every rank stops together
            stop = _agree_stop(self.dist, stop)
        return stop

    # ---------------------------------------------------------------- the result

    def straggler_model(self, window: int, dp_sizes=DP_SIZES) -> dict | None:
        """Data-parallel stragglers simulated from each source's census and a cost model fitted on every
        measured micro-batch (``vlmdata.audit.straggler_model``); None without per-micro-batch times."""
        recs = {n: v[:window] for n, v in self.records.items() if n not in self.oom and v}
        micro = [
            {**m, "source": n}
            for n, rs in recs.items()
            for r in rs
            for m in r.get("micro") or []
            if m.get("ms") is not None and m.get("tokens_total") is not None
        ]
        if REAL not in recs or len(micro) < 2:
            return None
        opt = [r["times_ms"].get("optimizer", 0.0) + r["times_ms"].get("grad_sync", 0.0) for r in recs[REAL]]
        try:
            cost = calibrate(fit_cost_model(micro, optimizer_ms=sum(opt) / len(opt)), micro)
            census: dict[str, Sequence[Sample]] = {
                n: [Sample(int(t), tuple(p)) for t, p in self.censuses[n].epoch_samples()] for n in recs
            }
            run = self.res.run
            sim = simulate(
                census,
                cost,
                micro_batch_size=run.micro_batch_size,
                micro_batches_per_rank=self.n_micro,
                dp_sizes=dp_sizes,
                padded_len=lambda longest, b: run.padded_length(longest),
                sync="micro_batch" if run.ep > 1 else "step",
                seed=self.cfg.seed,
            )
        except (AuditError, ValueError) as e:
            return {"error": str(e)}
        sim["scaling"] = (
            f"weak scaling: {self.n_micro} micro-batches of {run.micro_batch_size} per rank and step at every DP "
            "(GBS grows with DP)"
        )
        return sim

    def source_result(self, name: str, window: int) -> dict:
        stats = getattr(self.live.get(name), "stats", None)
        if stats is not None and hasattr(stats, "to_json"):
            self.loader_records[name]["stats"] = stats.to_json()
        c = self.censuses[name]
        recs = self.records[name][:window]
        return {
            "records": recs,
            "loader": self.loader_records.get(name),
            "world_size": self.world,
            "paired": self.inputs[name].paired,
            "definition": self.inputs[name].definition,
            "startup_wait_ms": self.startup.get(name),
            "census": {
                "micro_batches": len(c.items),
                "samples": sum(len(b) for b in c.samples),
                "longest_tokens": c.longest,
                "mismatched_steps": sum(1 for r in recs if r["census_match"] is False),
                "epoch_samples": c.epoch_samples(),
            },
            "pairing": (
                _pairing(recs, self.records[REAL][:window])
                if self.inputs[name].paired and REAL not in self.oom
                else None
            ),
            "oom": self.oom.get(name),
        }


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
        ``{"config", "run", "environment", "workload", "measurement", "sources": {name: {"records", "loader",
        "world_size", "paired", "definition", "startup_wait_ms", "census", "pairing", "oom"}}}``; a record
        is one global step.
    """
    cfg.check()
    t_start = clock()
    a = _Audit(cfg, loader_factory or default_loader_factory(), out_dir, dist, progress, clock, workload)
    shards = real_shards(cfg.resolved_real())
    result: dict[str, Any] = {
        "config": {
            **asdict(cfg),
            "sources": list(cfg.sources),
            "logits": cfg.resolved_logits(),
            "num_workers": a.workers,
            "real": cfg.resolved_real(),
            "max_steps": a.cap,
            "block": a.block,
            "budget_s": a.budget_s,
            "seq_length": a.res.run.seq_length,
            "micro_batch_size": a.res.run.micro_batch_size,
            "global_batch_size": a.res.run.global_batch,
            "micro_batches": a.n_micro,
        },
        "run": a.res.describe(),
        "environment": environment(a.device),
        "workload": a.workload.describe(),
        "sources": {},
    }
    try:
        t_prep = clock()
        epoch = a.prepare(shards)
        min_steps = a.min_steps(epoch)
        prep_s = clock() - t_prep
        a.first_step()
        a.warm(range(0, min(a.horizon, a.warmup + a.block)))
        loader_warm_s = a.start_loaders()
        done, stop, measure_s = a.run_rounds(min_steps, epoch)
        window = _window(done, epoch)
        measured = {k: v[:window] for k, v in a.records.items() if k not in a.oom}
        open_items = []
        if REAL in measured and len(measured) > 1:
            _, open_items = settled(
                _runs(measured, a.world),
                threshold=cfg.threshold,
                proxy_tolerance=cfg.proxy_tolerance,
                precision=cfg.precision,
                seed=cfg.seed,
            )
        for name in cfg.sources:
            result["sources"][name] = a.source_result(name, window)
        result["composition"] = a.comp.describe()
        result["straggler_model"] = a.straggler_model(window)
        n = len(cfg.sources)
        result["measurement"] = {
            "method": "interleaved",
            "unit": "global step",
            "micro_batches_per_step": a.n_micro,
            "block": a.block,
            "rounds": a.rounds,
            "steps_run": done,
            "steps_per_source": window,
            "real_epoch_steps": epoch,
            "real_epoch_micro_batches": a.epoch_micro,
            "stop": stop,
            "open": open_items,
            "min_steps": min_steps,
            "max_steps": a.cap,
            "budget_s": a.budget_s,
            "precision": cfg.precision,
            "order_first_round": [cfg.sources[j % n] for j in range(n)],
            "warmup": {
                "shape_batches": a.warm_stats["batches"],
                "full_steps": a.warm_stats["full_steps"],
                "shape_items": len(a.warmed),
                "seconds": a.warm_stats["seconds"],
                "loader_steps_per_source": a.warmup,
                "loader_seconds": loader_warm_s,
            },
            "prepare_seconds": prep_s,
            "measure_seconds": measure_s,
            "total_seconds": clock() - t_start,
            "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        }
    finally:
        a.workload.close()
    return result


def _window(done: int, epoch: int | None) -> int:
    """Global steps the figures use: whole epochs of real when an epoch is a whole number of global steps and
    at least one was measured (every sample weighs the same), else every step run."""
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
    budget_s: float,
    block: int,
) -> str | None:
    """Why to stop after this round (None: go on). The settled check runs on the whole-epoch window."""
    if done >= cap:
        return "max_steps"
    if elapsed >= budget_s and done >= min(min_steps, cap):
        return "budget"
    if done >= min_steps:
        window = _window(done, epoch)
        fresh = epoch is None or window == done or done - window < block  # a window just completed
        if fresh and _settled({k: v[:window] for k, v in records.items()}, cfg, world):
            return "settled"
    if elapsed >= 4 * budget_s:  # min_steps cannot be reached in reasonable time
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
