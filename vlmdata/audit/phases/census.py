"""Phase 1-2 of an audit: the inputs, and the census of what every source's batches will bring.

``take_census(run, shards)`` prepares each source's input (``inputs.prepare_input``; real first: the
synthetic twin covers the sample keys real's steps use) and runs its loader once in *shapes* mode (no decode:
the exact batches' shapes and token ids, zero pixels) for every micro-batch the measurement may use, each
batch padded as the run's step pads it (``RunSpec.prepare``). Every sample must fit ``seq_length``. The census
records, per micro-batch, the shape items it brings (``workload.shape_items``: the warm-up warms each new one),
its sample keys and each sample's epoch, tokens and image patches (the straggler model's input).

**Every micro-batch is whole**: the audit's loaders wrap across epochs (``LoaderOptions.wrap_epochs``: the next
epoch's first samples complete an epoch's last micro-batch, as Megatron's datasets wrap), so every census
micro-batch, and so every timed global step, holds ``micro_batch_size`` samples; a loader that hands out a short
micro-batch is refused (``AuditError``) before anything is timed. A data set with fewer samples per rank than one
global step holds (GBS / DP) is repeated, not refused: its samples recur within a step, as in Megatron's wrapped
datasets, and ``wrap_note`` says so.

It returns ``Sources``: the inputs, the censuses, and real's epoch (in micro-batches: until its last sample is
handed out; in global steps only when the epoch ends exactly on a step's end after the warm-up steps; under
torchrun every rank takes the longest, and the steps only when every rank's epoch ends on a step).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from vlmdata.audit.analysis.straggler_model import samples_from_batch
from vlmdata.audit.sources.registry import REAL, AuditError, Input, prepare_input
from vlmdata.audit.workload.batch_shapes import visual_tokens_per_sample
from vlmdata.audit.workload.distributed import agree_max, agree_min

__all__ = ["Census", "Sources", "census", "take_census", "iterate", "next_batch", "row_lengths", "wrap_note"]


def iterate(loader, inline: bool) -> Iterator:
    """The loader's batches (``iter_inline``: in this process, when it has one and ``inline``)."""
    if inline and hasattr(loader, "iter_inline"):
        return loader.iter_inline()
    return iter(loader)


def next_batch(it: Iterator, name: str, i: int, total: int):
    """The next batch of source ``name`` (its ``i``-th of ``total``); AuditError when the loader cannot give it."""
    try:
        return next(it)
    except StopIteration:
        raise AuditError(f"source {name}: the loader ran out of batches after {i} of {total} micro-batches") from None
    except ValueError as e:  # e.g. every sample skipped, or a row longer than seq_length
        raise AuditError(f"source {name}: {e}") from None


def row_lengths(loader, batch) -> list[int]:
    """Non-pad tokens of each sample of the loader's last batch (or the batch's width when it does not say)."""
    lengths = getattr(loader, "last_lengths", None)
    return list(lengths) if lengths else [int(torch.as_tensor(batch["input_ids"]).shape[1])]


@dataclass
class Census:
    """What one source's census saw, micro-batch by micro-batch."""

    batches: list = field(default_factory=list)  # shapes-only batches (zero-stride pixels: no pixel memory)
    items: list[frozenset] = field(default_factory=list)  # shape items of each micro-batch
    keys: list[list[str]] = field(default_factory=list)
    epochs: list = field(default_factory=list)  # latest epoch of each batch (None when the loader does not say)
    sample_epochs: list[list] = field(default_factory=list)  # the epoch of each sample of each batch
    sizes: list[int | None] = field(default_factory=list)  # samples of each batch (None: the loader does not say)
    samples: list[list] = field(default_factory=list)  # [tokens, [patches per image]] per sample
    rank_epoch: int | None = None  # samples (references) of one epoch on this rank, when the loader says
    longest: int = 0
    too_long: int = 0  # rows longer than their batch's width (an epoch repeated in the census counts again)
    too_long_keys: dict = field(default_factory=dict)  # distinct samples among them (key -> tokens), in order

    def _first(self):
        return next((e for es in self.sample_epochs for e in es if e is not None), None)

    def epoch_micro(self) -> int | None:
        """Micro-batches until the first epoch's last sample is handed out (the micro-batch that wraps into the
        next epoch included); None: no later epoch begins within the census."""
        first = self._first()
        if first is None or all(e in (None, first) for es in self.sample_epochs for e in es):
            return None
        return max(i for i, es in enumerate(self.sample_epochs) if first in es) + 1

    def epoch_whole(self) -> bool:
        """The first epoch ends on a micro-batch's end: the micro-batches before ``epoch_micro`` hold its samples
        and only them (none wraps into the next epoch)."""
        end, first = self.epoch_micro(), self._first()
        return end is not None and all(e == first for es in self.sample_epochs[:end] for e in es)

    def epoch_samples(self) -> list[list]:
        """The samples of the first epoch (of the whole census when no later epoch begins in it)."""
        first = self._first()
        out = []
        for b, es in zip(self.samples, self.sample_epochs):
            if len(es) == len(b):
                out += [s for s, e in zip(b, es) if e == first]
            elif all(e == first for e in es):  # the loader names no epoch per sample: whole batches of the first
                out += b
        return out


def _census_samples(loader, batch, merge: int) -> list[list]:
    """[tokens, [patches per image]] of each sample of a census batch."""
    ids = torch.as_tensor(batch["input_ids"])
    grid = batch.get("visual_inputs")
    grid = grid.get("image_grid_thw") if isinstance(grid, dict) else getattr(grid, "image_grid_thw", None)
    grids = [] if grid is None else [tuple(map(int, g)) for g in torch.as_tensor(grid).tolist()]
    lengths = row_lengths(loader, batch)
    visual = visual_tokens_per_sample(batch)  # of each row, or of each segment of a packed row
    if len(lengths) != len(visual) and batch.get("cu_seqlens_q") is None:
        lengths = [int(x) for x in (ids != 0).sum(1).tolist()]
    return [[s.tokens, list(s.image_patches)] for s in samples_from_batch(lengths, grids, visual, merge)]


def census(name: str, loader, micro_batches: int, workload, prepare: Callable = lambda b: b, merge: int = 2) -> Census:
    """Run ``loader`` (shapes mode, in this process) for ``micro_batches`` batches and record what each brings."""
    it = iterate(loader, inline=True)
    c = Census()
    for i in range(micro_batches):
        batch = prepare(next_batch(it, name, i, micro_batches))
        c.batches.append(batch)
        c.items.append(workload.shape_items(batch))
        c.keys.append(list(getattr(loader, "last_keys", []) or []))
        c.epochs.append(getattr(loader, "last_epoch", None))
        said = getattr(loader, "last_lengths", None) or c.keys[-1]  # what the loader says its batch holds
        c.sizes.append(len(said) if said else None)
        c.sample_epochs.append(list(getattr(loader, "last_epochs", None) or [c.epochs[-1]] * (c.sizes[-1] or 1)))
        lens = row_lengths(loader, batch)
        c.longest = max(c.longest, max(lens))
        width = int(torch.as_tensor(batch["input_ids"]).shape[1])
        over = [j for j, n in enumerate(lens) if n > width] if batch.get("cu_seqlens_q") is None else []
        too_long = len(over)
        c.too_long += too_long
        for j in over:  # keyed by sample (a repeated epoch names it once); unkeyed rows by position
            c.too_long_keys.setdefault(c.keys[-1][j] if j < len(c.keys[-1]) else f"micro-batch {i} row {j}", lens[j])
        c.samples.append([] if too_long else _census_samples(loader, batch, merge))  # truncated: refused below
    size = getattr(loader, "epoch_samples", None)
    n = size() if callable(size) else None
    c.rank_epoch = n if isinstance(n, int) else None
    return c


def check_whole(name: str, c: Census, micro_batch_size: int) -> None:
    """AuditError when a micro-batch of the census holds other than ``micro_batch_size`` samples (module
    docstring): no timed step may be a partial global batch."""
    short = [(i, n) for i, n in enumerate(c.sizes) if n is not None and n != micro_batch_size]
    if short:
        i, n = short[0]
        raise AuditError(
            f"source {name}: micro-batch {i} holds {n} samples, not `micro_batch_size`={micro_batch_size} "
            f"({len(short)} such of {len(c.sizes)}); every timed step must be a whole global batch: the loader must "
            "wrap across epochs (`wrap_epochs`)"
        )


def wrap_note(name: str, c: Census, step_samples: int) -> str | None:
    """A sentence when ``name`` holds fewer samples per epoch on this rank than one global step takes: they are
    repeated within a step (module docstring), not refused."""
    if c.rank_epoch is None or c.rank_epoch >= step_samples:
        return None
    return (
        f"{name}: {c.rank_epoch} samples per epoch on this rank, fewer than the {step_samples} of one global step "
        "(GBS / DP): repeated within each step (the loader wraps across epochs, as Megatron's datasets do)"
    )


@dataclass
class Sources:
    """The inputs and censuses of every source, and real's epoch (module docstring)."""

    inputs: dict[str, Input]
    censuses: dict[str, Census]
    epoch_micro: int | None  # micro-batches of real's first epoch (the longest over ranks); None: none ended
    epoch: int | None  # that epoch in global steps after the warm-up steps; None: not a whole number of them
    notes: list[str] = field(default_factory=list)  # sources repeated within a step (``wrap_note``)


def take_census(run: Any, shards: list[str]) -> Sources:
    """Inputs and census of every source of ``run`` (a ``runner.AuditRun``; module docstring).

    Args:
        run: the run's plan, workload and loader factory.
        shards: the real dataset's shards (generated inputs go to ``run.work_dir``).

    Returns:
        ``Sources``.
    """
    plan, cfg = run.plan, run.plan.cfg
    merge = plan.res.shape.vision.spatial_merge_size
    inputs: dict[str, Input] = {}
    censuses: dict[str, Census] = {}
    for name in [REAL] + [s for s in plan.names if s != REAL]:
        twin_keys = {k for ks in censuses[REAL].keys for k in ks} if REAL in censuses else None
        if plan.base(name) != name:  # a counterfactual arm reads its source's data under another configuration
            inputs[name] = dataclasses.replace(inputs[plan.base(name)], name=name)
        else:
            inputs[name] = prepare_input(
                name,
                shards,
                profile=cfg.profile,
                seed=cfg.seed,
                model=plan.res.shape.loader_model,
                work_dir=run.work_dir,
                twin_keys=twin_keys,
            )
        spec, n_micro = plan.spec(name), plan.micro_of(name)
        run.configure(name)  # the workload's shape items carry the configuration
        loader, _ = run.open(inputs[name], images="shapes")
        ahead = (max(1, plan.workers) * 2 + n_micro) if name == REAL else 0  # DataLoader prefetch
        c = census(name, loader, plan.horizon * n_micro + ahead, run.workload, spec.prepare, merge)
        censuses[name] = c
        check_whole(name, c, spec.micro_batch_size)
        if c.too_long:
            named = list(c.too_long_keys)
            shown = ", ".join(f"{k} ({c.too_long_keys[k]})" for k in named[:3]) + (", ..." if len(named) > 3 else "")
            given = (  # a value from the Bridge YAML is named there, not as a flag the user did not pass
                f"seq_length={plan.spec(name).seq_length} (the Bridge config {cfg.bridge_config}'s)"
                if plan.res.sources.get("seq_length") == "bridge config"
                else f"`seq_length`={plan.spec(name).seq_length}"
            )
            raise AuditError(
                f"source {name}: {len(named)} distinct samples in the first {len(c.items)} micro-batches need more "
                f"than {given} tokens: {shown} (the longest needs {c.longest}); use `seq_length` >= "
                f"{-(-c.longest // 128) * 128}"
            )
    micro, whole = censuses[REAL].epoch_micro(), censuses[REAL].epoch_whole()
    if run.dist is not None:  # ranks' shares differ by a sample: one window for all (the longest epoch)
        micro = int(agree_max(run.dist, micro or 0)) or None
        whole = bool(agree_min(run.dist, int(whole)))
    steps = {name: plan.micro_of(name) * plan.spec(name).micro_batch_size for name in plan.names}
    notes = [n for name in plan.names if (n := wrap_note(name, censuses[name], steps[name]))]
    return Sources(inputs, censuses, micro, _epoch_steps(micro, plan.warmup, plan.n_micro) if whole else None, notes)


def _epoch_steps(micro: int | None, warmup: int, n_micro: int) -> int | None:
    """Real's epoch in measured global steps (None: no epoch ended, or not a whole number of steps)."""
    if micro is None:
        return None
    micro = max(1, micro - warmup * n_micro) if warmup else micro
    return micro // n_micro if micro % n_micro == 0 else None
