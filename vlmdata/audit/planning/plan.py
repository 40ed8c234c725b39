"""What one audit run will measure, settled before anything is measured: ``make_plan(cfg, dist)``.

An ``AuditPlan`` is the config resolved (``vlmdata.audit.planning.resolve``: the ``RunSpec``, the model, the slice),
the default ``seq_length`` fitted to the real data (``fit_default_seq_length``), the loader workers, the
measurement's ``block``, ``max_steps`` (whole rounds) and ``budget_s``, the untimed ``warmup`` steps, and the
device defaults filled in (``logits``, ``compile``, ``real``): the one resolution of the run, read by every phase
(none calls ``AuditConfig.resolved_*`` or ``resolve`` again); its ``config_dict()`` is the result's ``config``.
``loader_options(plan, inp, images)`` is the ``LoaderOptions`` one source is opened with: the audit's (model family, seed, workers, endless epochs that wrap: every micro-batch
holds ``micro_batch_size`` samples, the next epoch's first ones completing an epoch's last; pinned memory on CUDA),
the run's padding policy (``RunSpec.loader_changes``), the user's ``loader_options`` changes, the source's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from vlmdata.audit.planning.resolve import Resolved, resolve
from vlmdata.audit.settings.benchmark import Benchmark, arms, is_counterfactual, resolve_benchmark
from vlmdata.audit.settings.config import AuditConfig, default_workers
from vlmdata.audit.settings.run_spec import RunSpec
from vlmdata.audit.sources.registry import MOCK_SOURCES, AuditError, Input, fit_seq_length
from vlmdata.errors import OptionsError
from vlmdata.loaders.api import make_loader
from vlmdata.loaders.options import LoaderOptions

__all__ = ["AuditPlan", "make_plan", "fit_default_seq_length", "loader_options", "default_loader_factory"]


@dataclass(frozen=True)
class AuditPlan:
    """The settled run (module docstring)."""

    cfg: AuditConfig
    res: Resolved
    world: int  # data-parallel ranks under torchrun (1 without)
    device: str  # this rank's device
    workers: int  # loader workers per source and rank
    block: int  # consecutive global steps of one source per round
    cap: int  # global steps per source at most (whole rounds)
    budget_s: float
    warmup: int  # untimed global steps per source after its loader starts
    logits: str = "all"  # the device's default filled in: "all" | "loss"
    compile: str = "none"  # the blocks through torch.compile (the device's default filled in)
    real: str = ""  # the real dataset (the embedded sample data when none was given)
    bench: Benchmark | None = None  # the benchmark's configuration beside the run's (vlmdata.audit.settings.benchmark)
    arm_map: dict[str, tuple[str, RunSpec]] = dataclasses.field(default_factory=dict)  # name -> (data, spec)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name measured: the sources, then the counterfactual arms (``benchmark.arms``)."""
        return (*self.cfg.sources, *(n for n in self.arm_map if is_counterfactual(n)))

    def spec(self, name: str) -> RunSpec:
        """The run configuration ``name`` is measured under (the run's, or the benchmark's for a mock)."""
        return self.arm_map[name][1] if name in self.arm_map else self.res.run

    def base(self, name: str) -> str:
        """The source whose data ``name`` reads."""
        return self.arm_map[name][0] if name in self.arm_map else name

    def micro_of(self, name: str) -> int:
        """Micro-batches per global step of ``name`` on this rank."""
        return self.spec(name).micro_batches

    @property
    def n_micro(self) -> int:
        """Micro-batches per global step on this rank (GBS / (MBS * DP))."""
        return self.res.run.micro_batches

    @property
    def horizon(self) -> int:
        """Global steps the census covers (warm-up and measured)."""
        return self.warmup + self.cap

    def config_dict(self) -> dict[str, Any]:
        """The result's ``config``: every setting as given, and the resolved ones the run uses."""
        cfg, run = self.cfg, self.res.run
        return {
            **cfg.to_dict(),
            "logits": self.logits,
            "num_workers": self.workers,
            "real": self.real,
            "max_steps": self.cap,
            "block": self.block,
            "budget_s": self.budget_s,
            "seq_length": run.seq_length,
            "micro_batch_size": run.micro_batch_size,
            "global_batch_size": run.global_batch,
            "micro_batches": self.n_micro,
        }


def make_plan(cfg: AuditConfig, dist=None) -> AuditPlan:
    """The plan of ``cfg`` on this rank (``dist``: ``distributed.DistInfo`` under torchrun, else None).

    Args:
        cfg: the run's settings.
        dist: the process group's info, or None.

    Returns:
        The ``AuditPlan``.
    """
    world = dist.world_size if dist is not None else 1
    device = dist.device if dist is not None else cfg.device
    m = cfg.measure_settings()
    workers = cfg.num_workers if cfg.num_workers is not None else default_workers(device, len(cfg.sources), world)
    res = fit_default_seq_length(cfg, resolve(cfg, world))
    bench = resolve_benchmark(cfg, res.run)
    mocks = tuple(s for s in cfg.sources if s in MOCK_SOURCES)
    return AuditPlan(
        cfg=cfg,
        res=res,
        bench=bench,
        arm_map=arms(cfg.sources, mocks, bench),
        world=world,
        device=device,
        workers=workers,
        block=m["block"],
        cap=m["max_steps"],
        budget_s=m["budget_s"],
        warmup=cfg.resolved_warmup(),
        logits=cfg.resolved_logits(),
        compile=cfg.resolved_compile(),
        real=cfg.resolved_real(),
    )


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
        loader_options={**cfg.loader_changes(), "model": res.shape.loader_model},
    )
    if seq == run.seq_length:
        return res
    note = f"seq_length {seq}: the default {run.seq_length} is shorter than the real data's longest sample"
    return dataclasses.replace(res, run=run.replace(seq_length=seq), notes=(*res.notes, note))


def default_loader_factory() -> Callable:
    """``vlmdata.loaders.make_loader``: every source goes through it."""
    return make_loader


def loader_options(plan: AuditPlan, inp: Input, workers: int | None = None, images: str | None = None) -> LoaderOptions:
    """The ``LoaderOptions`` one source is opened with (module docstring); the plan is the one resolution of the
    run (``make_plan``), never resolved again here.

    Args:
        plan: the settled run.
        inp: the source's input (``inputs.prepare_input``).
        workers: loader workers (default: the plan's).
        images: the census's "shapes" (a "drop" source stays "drop").

    Returns:
        The source's ``LoaderOptions``.
    """
    plan_cfg, res = plan.cfg, plan.res
    if workers is None:
        workers = plan.workers
    spec = plan.spec(inp.name)
    changes = {**spec.loader_changes(), **plan_cfg.loader_changes(), **inp.options}
    if images is not None and changes.get("images", "decode") == "decode":  # "drop" stays "drop"
        changes["images"] = images
    if changes.get("images", "decode") != "decode":  # planning and image-free loaders decode nothing anywhere
        changes.update(image_device=None, image_decoder="nvjpeg")
    try:
        return LoaderOptions(
            model=res.shape.loader_model,
            seed=plan_cfg.seed,
            num_workers=workers,
            num_epochs=None,
            wrap_epochs=True,  # every step a whole global batch: the next epoch's first samples complete the last
            pin_memory=torch.device(plan_cfg.device).type == "cuda" and workers > 0,
        ).replace(**changes)
    except OptionsError as e:
        raise AuditError(f"source {inp.name}: {e}") from None
