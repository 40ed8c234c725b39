"""Data-parallel stragglers, simulated: how uneven real samples slow a step that waits for its slowest rank.

Real images make the work of data-parallel (DP) ranks uneven; a training step waits for the slowest
rank; a uniform mock (every sample the same) never shows it. From each source's *census* (the exact
tokens and vision patches of every sample, ``Sample``) and a per-micro-batch *cost model* measured by the
audit on one GPU (``CostModel``, ``fit_cost_model``), ``simulate`` predicts, for any list of DP sizes, the
expected step time (slowest rank), the mean rank time, the straggler factor and the mock/real
samples/s ratio with and without stragglers. Pure numpy/scipy: no torch, no GPU.

Cost model (one micro-batch's forward + backward on one rank, ms)::

    micro_ms  = fixed_ms + per_token_ms * B*S + per_patch_ms * sum_i n_i + per_patch_sq_ms * sum_i n_i**2
    step_ms   = (the ranks' micro-batches combined by the sync mode) + optimizer_ms

B = micro-batch size, S = ``padded_len(longest row's tokens, B)`` (the run's padding rule, e.g. Bridge
pads every row to ``seq_length`` when PP>1 or EP>1), n_i = vision patches (t*h*w of the grid) of image
i of the micro-batch; the n_i**2 term is the vision tower's per-image attention. ``optimizer_ms`` is paid
once per global step. ``fit_cost_model`` fits the four coefficients by non-negative least squares on
measured micro-batches of all sources jointly (one model runs them all).

Sync modes, with micro_ms(r, j) the time of rank r's micro-batch j (j < M = micro-batches per rank):

- ``"micro_batch"`` (expert parallelism, EP>1: every MoE layer's all-to-all makes the ranks wait for the
  slowest on every micro-batch): step_ms = sum_j max_r micro_ms(r, j) + optimizer_ms.
- ``"step"`` (pure data parallel, EP=1: gradients are reduced once, at the end of the step):
  step_ms = max_r sum_j micro_ms(r, j) + optimizer_ms.

The mean rank time is mean_r sum_j micro_ms(r, j) + optimizer_ms (what a step would cost without
stragglers); straggler_factor = E[step_ms] / E[mean_rank_ms], exactly 1.0 for a uniform source, and
``"micro_batch"`` >= ``"step"`` always (a max of sums never exceeds a sum of maxes).

Sampling: each source has one stream of shuffled epochs: ``numpy.random.Generator(seed)`` permutations of
its census, epoch after epoch (a fresh stream per source and DP size, so sources with censuses of the
same size see the same positions, as the audit's paired sources do). Global step s takes the next
N = DP * M * B samples of the stream; within a step, sample (j*DP + r)*B + b is sample b of rank r's
micro-batch j (Megatron's ``MegatronPretrainingSampler`` order: each micro-step's DP*B consecutive
samples are split among the ranks, rank-major). When N * steps exceeds the census, epochs repeat: the
simulation then samples from the census's distribution (without replacement within an epoch), which is
what a dataset much larger than the census would give if the census is representative. The slowest rank
can never exceed the census's worst micro-batch, so at large DP the factor saturates at that bound: the
census's tail (its largest images and longest rows) decides the large-DP figures. For large DP the
number of simulated steps is reduced so that at most ``MAX_SAMPLES`` samples are drawn per source and DP
size (never below ``MIN_STEPS``); the output's ``steps`` says how many were used per DP size, and
``step_ms_se`` is the Monte Carlo standard error of E[step_ms] (std over steps / sqrt(steps); steps of
one epoch are drawn without replacement, so it is an approximation).

Assumptions: ranks are identical hardware; the cost model fitted on one GPU holds on every rank; no
communication time (no all-reduce, all-to-all or pipeline bubbles: only the wait for the slowest rank);
the padding rule is a pure function of (longest row, batch size). Not modelled: packing across samples,
dynamic batching or length-grouped samplers (which reduce stragglers), noise of the hardware itself
(clock, thermals, a slow node), data-loader stalls, tensor/pipeline parallel splits of the work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vlmdata.audit.analysis.straggler_check import check_ranks, plot_stragglers
from vlmdata.audit.analysis.straggler_cost import MICRO_KEYS, TERMS, CostModel, calibrate, cost_ms, fit_cost_model
from vlmdata.audit.settings.run_spec import MAX_GLOBAL_BATCH, MAX_MICRO_BATCH, MAX_PARALLEL
from vlmdata.audit.sources.registry import AuditError

__all__ = [  # the model's names, importable from here (the cost model and the rank check have their own modules)
    "Sample",
    "CostModel",
    "fit_cost_model",
    "calibrate",
    "micro_batch_ms",
    "simulate",
    "samples_from_batch",
    "plot_stragglers",
    "check_ranks",
    "TERMS",
    "MICRO_KEYS",
    "SYNC_MODES",
    "DEFAULT_DP_SIZES",
]

SYNC_MODES = ("micro_batch", "step")
DEFAULT_DP_SIZES = (8, 64, 512, 4096)
MAX_SAMPLES = 1 << 22  # samples drawn per source and DP size at most (steps are reduced for large DP)
MIN_STEPS = 16  # never fewer simulated steps than this, whatever MAX_SAMPLES says
MAX_STEP_SAMPLES = 1 << 26  # samples of one simulated global step (DP x M x B) at most
CHUNK_SAMPLES = 1 << 20  # samples processed at once (bounds memory)


@dataclass(frozen=True)
class Sample:
    """One sample as the census saw it."""

    tokens: int  # non-pad tokens of the sample (text + visual)
    image_patches: tuple[int, ...] = ()  # vision patches of each of its images (t*h*w of the grid); () if text-only


def micro_batch_ms(cost: CostModel, samples: Sequence[Sample], padded_len: Callable[[int, int], int]) -> float:
    """Forward+backward time of one micro-batch under the cost model (no optimizer).

    Args:
        cost: the cost model.
        samples: the micro-batch's samples (its rows).
        padded_len: ``padded_len(longest_row_tokens, batch_size)`` -> the padded row length S the step
            computes (the run's padding rule); tokens_total = batch_size * S.

    Returns:
        The micro-batch's time in ms.
    """
    if not samples:
        raise AuditError("`samples`: a micro-batch needs at least one sample")
    tokens, patches, patch_sq = _census_arrays("samples", samples)
    b = len(samples)
    s = _padded(padded_len, int(tokens.max()), b)
    return float(cost_ms(cost, b * s, int(patches.sum()), float(patch_sq.sum())))


def _padded(padded_len: Callable[[int, int], int], longest: int, b: int) -> int:
    s = padded_len(longest, b)
    if isinstance(s, bool) or not isinstance(s, int | np.integer) or s < longest:
        raise AuditError(
            f"`padded_len`({longest}, {b}) returned {s!r}: it must be an int >= the longest row ({longest})"
        )
    return int(s)


def _census_arrays(where: str, samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample tokens, patches and sum of patches**2, validated (``where`` names the input in errors)."""
    if len(samples) == 0:
        raise AuditError(f"{where}: the census is empty")
    tokens = np.empty(len(samples), dtype=np.int64)
    patches = np.empty(len(samples), dtype=np.int64)
    patch_sq = np.empty(len(samples), dtype=np.float64)
    for i, s in enumerate(samples):
        if not isinstance(s, Sample):
            raise AuditError(f"{where}[{i}] must be a Sample, got {type(s).__name__}")
        if isinstance(s.tokens, bool) or not isinstance(s.tokens, int | np.integer) or s.tokens < 0:
            raise AuditError(f"{where}[{i}].tokens must be an int >= 0, got {s.tokens!r}")
        p = s.image_patches
        if any(isinstance(n, bool) or not isinstance(n, int | np.integer) or n <= 0 for n in p):
            raise AuditError(f"{where}[{i}].image_patches must be ints > 0, got {p!r}")
        tokens[i], patches[i], patch_sq[i] = s.tokens, sum(p), float(sum(int(n) * int(n) for n in p))
    return tokens, patches, patch_sq


# --------------------------------------------------------------------------- simulation


class _EpochStream:
    """Shuffled epochs of range(n), epoch after epoch, from one Generator; ``take(k)`` the next k indices."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.rng = n, np.random.default_rng(seed)
        self.buf = np.empty(0, dtype=np.int64)

    def take(self, k: int) -> np.ndarray:
        if len(self.buf) < k:
            epochs = -(-(k - len(self.buf)) // self.n)
            perms = self.rng.permuted(np.tile(np.arange(self.n, dtype=np.int64), (epochs, 1)), axis=1)
            self.buf = np.concatenate([self.buf, perms.ravel()])
        out, self.buf = self.buf[:k], self.buf[k:]
        return out


def _seq_sum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 1 in index order (one fixed order, so sums of elementwise-larger terms stay larger)."""
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        out += a[:, j]
    return out


def _steps_for(n_per_step: int, steps: int) -> int:
    return min(steps, max(MIN_STEPS, MAX_SAMPLES // n_per_step))


def _simulate_source(
    name: str, census: tuple, cost: CostModel, b: int, m: int, dp: int, steps: int, sync: str, seed: int
) -> dict:
    """Monte Carlo over ``steps`` global steps of one source at one DP size (an error, never a division by
    zero, when the cost model gives the source's steps no time)."""
    tokens, patches, patch_sq, rank_of, s_table = census
    n_step = dp * m * b
    stream = _EpochStream(len(tokens), seed)
    step_ms, mean_ms = [], []
    per_chunk = max(1, CHUNK_SAMPLES // n_step)
    for start in range(0, steps, per_chunk):
        k = min(per_chunk, steps - start)
        idx = stream.take(k * n_step).reshape(k, m, dp, b)
        s = s_table[rank_of[idx].max(axis=-1)]  # padded length of each micro-batch: (k, m, dp)
        micro = cost_ms(cost, b * s, patches[idx].sum(axis=-1), patch_sq[idx].sum(axis=-1))
        rank_sum = _seq_sum(micro)  # (k, dp)
        rank_max = rank_sum.max(axis=1)
        step = _seq_sum(micro.max(axis=2)) if sync == "micro_batch" else rank_max
        step_ms.append(step + cost.optimizer_ms)
        # max - mean(max - x): exactly the max when every rank is equal (a uniform source has factor 1.0)
        mean_ms.append(rank_max - (rank_max[:, None] - rank_sum).mean(axis=1) + cost.optimizer_ms)
    step_all, mean_all = np.concatenate(step_ms), np.concatenate(mean_ms)
    e_step, e_mean = float(step_all.mean()), float(mean_all.mean())
    if not e_mean > 0:
        raise AuditError(
            f"the cost model predicts 0 ms for every step of source {name!r} (its measured micro-batch times are "
            "0): no straggler figure or samples/s can be simulated from it"
        )
    return {
        "step_ms": e_step,
        # std of the shift by the first step: the same value, and exactly 0 when every step is equal
        "step_ms_se": float((step_all - step_all[0]).std(ddof=1) / np.sqrt(len(step_all))),
        "mean_rank_ms": e_mean,
        "straggler_factor": e_step / e_mean,
        "samples_per_s": n_step / (e_step / 1000.0),
    }


def _prepare(name: str, samples: Sequence[Sample], b: int, padded_len: Callable[[int, int], int]) -> tuple:
    """Census arrays plus the padded length of every distinct row length (padded_len called once per value)."""
    tokens, patches, patch_sq = _census_arrays(f"sources[{name!r}]", samples)
    uniq, rank_of = np.unique(tokens, return_inverse=True)
    s_table = np.array([_padded(padded_len, int(t), b) for t in uniq], dtype=np.int64)
    return tokens, patches, patch_sq, rank_of.reshape(-1), s_table


def _check_simulate_args(
    sources: dict,
    micro_batch_size: int,
    micro_batches_per_rank: int,
    dp_sizes: Sequence[int],
    sync: str,
    steps: int,
    real: str,
) -> None:
    def positive_int(name: str, v: Any, high: int) -> None:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 1 <= v <= high:
            shown = f"an integer of {int(v).bit_length()} bits" if isinstance(v, int) and abs(v) >> 64 else f"{v!r:.60}"
            raise AuditError(f"{name} must be an int 1..{high}, got {shown}")

    positive_int("`micro_batch_size`", micro_batch_size, MAX_MICRO_BATCH)
    positive_int("`micro_batches_per_rank`", micro_batches_per_rank, MAX_GLOBAL_BATCH)
    if isinstance(dp_sizes, str) or not isinstance(dp_sizes, Sequence) or len(dp_sizes) == 0:
        raise AuditError("`dp_sizes` must be a non-empty sequence of data-parallel sizes")
    for dp in dp_sizes:
        positive_int("every `dp_sizes` entry", dp, MAX_PARALLEL)
        if dp * micro_batches_per_rank * micro_batch_size > MAX_STEP_SAMPLES:  # at least MIN_STEPS such steps
            raise AuditError(
                f"`dp_sizes` {dp} x `micro_batches_per_rank` {micro_batches_per_rank} x `micro_batch_size` "
                f"{micro_batch_size} samples per global step: at most {MAX_STEP_SAMPLES} are simulated"
            )
    if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= 1 << 20:
        raise AuditError(f"`steps` must be an int 2..{1 << 20} (2 for a standard error), got {steps!r:.60}")
    if not isinstance(sync, str) or sync not in SYNC_MODES:
        raise AuditError(f"`sync` must be one of {', '.join(SYNC_MODES)}, got {sync!r:.60}")
    if not isinstance(sources, dict) or not sources:
        raise AuditError("`sources` must be a dict holding at least one census")
    if not isinstance(real, str) or real not in sources:
        raise AuditError(f"`real`={real!r:.60} is not one of the sources ({', '.join(map(str, sources))})")


def simulate(
    sources: dict[str, Sequence[Sample]],
    cost: CostModel | dict[str, CostModel],
    *,
    micro_batch_size: int,
    micro_batches_per_rank: int,
    dp_sizes: Sequence[int] = DEFAULT_DP_SIZES,
    padded_len: Callable[[int, int], int],
    sync: str = "micro_batch",
    steps: int = 200,
    seed: int = 0,
    real: str = "real",
) -> dict:
    """Expected step time with stragglers for every source at every DP size (see the module docstring).

    Args:
        sources: census per source name (one ``Sample`` per sample); one of them is ``real``.
        cost: the per-micro-batch cost model, or one per source (``calibrate``).
        micro_batch_size: B, samples per micro-batch (MBS).
        micro_batches_per_rank: M = GBS / (MBS * DP) micro-batches each rank runs per global step.
        dp_sizes: the data-parallel sizes to simulate.
        padded_len: ``padded_len(longest_row_tokens, B)`` -> padded row length S (a pure function).
        sync: ``"micro_batch"`` (EP>1) or ``"step"`` (pure data parallel).
        steps: global steps simulated per source and DP size (reduced for large DP: see ``steps``).
        seed: seed of every source's epoch stream.
        real: the source the others are compared with.

    Returns:
        ``{"dp_sizes", "sync", "micro_batch_size", "micro_batches_per_rank", "global_batch_size": {dp: GBS},
        "steps": {dp: steps used}, "steps_requested", "sources": {name: {dp: {"step_ms", "step_ms_se",
        "mean_rank_ms", "straggler_factor", "samples_per_s"}}}, "ratio_vs_real": {name: {dp: samples/s of
        name / real}}, "ratio_vs_real_no_stragglers": {name: {dp: the same from mean-rank times}},
        "cost": asdict(cost) (or {name: asdict} per source), "method": text}``; ratios cover every source except ``real``.
    """
    _check_simulate_args(sources, micro_batch_size, micro_batches_per_rank, dp_sizes, sync, steps, real)
    b, m, dps = int(micro_batch_size), int(micro_batches_per_rank), [int(d) for d in dp_sizes]
    censuses = {name: _prepare(name, samples, b, padded_len) for name, samples in sources.items()}
    steps_used = {dp: _steps_for(dp * m * b, steps) for dp in dps}
    costs = cost if isinstance(cost, dict) else {name: cost for name in censuses}
    per_source = {
        name: {dp: _simulate_source(name, c, costs[name], b, m, dp, steps_used[dp], sync, seed) for dp in dps}
        for name, c in censuses.items()
    }
    ref = per_source[real]
    others = [n for n in per_source if n != real]
    reduced = [dp for dp in dps if steps_used[dp] < steps]
    return {
        "dp_sizes": dps,
        "sync": sync,
        "micro_batch_size": b,
        "micro_batches_per_rank": m,
        "global_batch_size": {dp: dp * m * b for dp in dps},
        "steps": steps_used,
        "steps_requested": steps,
        "sources": per_source,
        "ratio_vs_real": {
            n: {dp: per_source[n][dp]["samples_per_s"] / ref[dp]["samples_per_s"] for dp in dps} for n in others
        },
        "ratio_vs_real_no_stragglers": {
            n: {dp: ref[dp]["mean_rank_ms"] / per_source[n][dp]["mean_rank_ms"] for dp in dps} for n in others
        },
        "cost": {n: asdict(c) for n, c in costs.items()} if isinstance(cost, dict) else asdict(cost),
        "method": _method_text(sync, seed, reduced),
    }


def _method_text(sync: str, seed: int, reduced: list[int]) -> str:
    combine = (
        "sum over micro-batches of the slowest rank's micro-batch (EP>1: all-to-all every micro-batch)"
        if sync == "micro_batch"
        else "the slowest rank's sum over its micro-batches (pure DP: one gradient reduction per step)"
    )
    text = (
        f"Monte Carlo over global steps: each source's census shuffled epoch after epoch (numpy Generator({seed})), "
        "each step taking the next DP*M*B samples in Megatron's sampler order; micro-batch time from the fitted "
        f"cost model; step time = {combine} + optimizer; straggler factor = E[step] / E[mean rank time]. "
        "No communication time; identical ranks; cost model fitted on one GPU."
    )
    if reduced:
        text += (
            f" Steps reduced for DP {', '.join(map(str, reduced))} to draw at most {MAX_SAMPLES} samples "
            f"(at least {MIN_STEPS} steps); the maximum over many ranks varies little, step_ms_se says how much."
        )
    return text


# --------------------------------------------------------------------------- census helper


def samples_from_batch(
    lengths: Sequence[int], grids: Sequence[Sequence[int]], visual_per_row: Sequence[int], merge: int = 2
) -> list[Sample]:
    """Split one census batch into samples: each row's images are the next consecutive grids.

    Args:
        lengths: non-pad tokens of each row (text + visual).
        grids: ``(t, h, w)`` of every image of the batch, in row-major image order.
        visual_per_row: ``<|image_pad|>`` tokens of each row.
        merge: the spatial merge size (an image of grid (t, h, w) yields t*h*w / merge**2 visual tokens).

    Returns:
        One ``Sample`` per row, its ``image_patches`` the t*h*w of each of its images.

    Raises:
        AuditError: lengths and visual_per_row differ in length, a grid is not divisible by merge**2,
            a row's visual tokens are not a whole number of its images, or images are left over.
    """
    if len(lengths) != len(visual_per_row):
        raise AuditError(f"lengths has {len(lengths)} rows but visual_per_row has {len(visual_per_row)}")
    if isinstance(merge, bool) or not isinstance(merge, int) or merge < 1:
        raise AuditError(f"`merge` must be an int >= 1, got {merge!r}")
    patches = [_grid_patches(i, g, merge) for i, g in enumerate(grids)]
    out, k = [], 0
    for row, (length, visual) in enumerate(zip(lengths, visual_per_row, strict=True)):
        if visual < 0 or visual > length:
            raise AuditError(f"visual_per_row[{row}] = {visual} must be between 0 and lengths[{row}] = {length}")
        mine, got = [], 0
        while got < visual:
            if k == len(patches):
                raise AuditError(f"row {row} has {visual} visual tokens but the grids run out after {got}")
            mine.append(patches[k])
            got += patches[k] // merge**2
            k += 1
        if got != visual:
            raise AuditError(
                f"row {row} has {visual} visual tokens but its images give {got} (grids {k - len(mine)}..{k - 1})"
            )
        out.append(Sample(tokens=int(length), image_patches=tuple(mine)))
    if k != len(patches):
        raise AuditError(f"grids has {len(patches)} images but the rows' visual tokens account for only {k}")
    return out


def _grid_patches(i: int, grid: Sequence[int], merge: int) -> int:
    if len(grid) != 3 or any(isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in grid):
        raise AuditError(f"grids[{i}] must be (t, h, w) of ints >= 1, got {tuple(grid)!r}")
    n = int(grid[0]) * int(grid[1]) * int(grid[2])
    if n % merge**2:
        raise AuditError(f"grids[{i}] = {tuple(grid)}: t*h*w = {n} is not divisible by merge**2 = {merge**2}")
    return n
