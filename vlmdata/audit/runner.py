"""Run one training workload over each source through the same loader and record every step.

For each source: seeds fixed (torch, the loader's ``seed``), peak memory reset, ``warmup`` steps run
and dropped, then ``steps`` measured steps.  Per step::

    t0 -> next(batches) -> t1 -> workload(batch) -> t2
    data_wait_ms = t1 - t0 (time blocked on the loader iterator), step_ms = t2 - t0

plus the workload's own stage times (CUDA events on GPU, ``perf_counter`` on CPU; the reference
step synchronises once at its end, so ``t2`` is after the GPU finished), and the batch's shape:
samples, images, patches, total/useful/visual/padding tokens, model FLOPs (``flops.step_flops``),
visual tokens per sample.  FLOPs and shapes are computed outside the timed region.

Loaders come from ``vlmdata.loaders.make_loader(source, model=..., seq_length=...,
micro_batch_size=..., seed=..., **loader_kwargs)``; keyword arguments the factory does not accept
are dropped and listed in the result (``loader["dropped_kwargs"]``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

import torch

from .flops import count_tokens, step_flops
from .model import IMAGE_TOKEN_ID

SOURCES = ("imagefree", "bridge-noise", "synthetic", "real")
MOCKS = ("imagefree", "bridge-noise")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_SHARDS = os.path.join(REPO, "sample_shards")


class AuditError(Exception):
    """The audit cannot run as asked (bad source, loader missing, workload not found): one line for the user."""


@dataclass
class AuditConfig:
    real: str = SAMPLE_SHARDS
    profile: str | None = None  # profile.json for the synthetic source; None: profile ``real`` now
    sources: tuple[str, ...] = SOURCES
    preset: str = "tiny"
    device: str = "cpu"
    steps: int = 10
    warmup: int = 2
    seq_length: int = 1024
    micro_batch_size: int = 2
    seed: int = 0
    logits: str | None = None  # "all" | "loss"; None: "all" on CUDA, "loss" on CPU
    step: str | None = None  # "module:function" user workload
    model_family: str = "qwen3-vl"  # visual-token model the loader prepares batches for
    loader_kwargs: dict[str, Any] = field(default_factory=dict)
    profile_decode_images: int = 20  # decode timing sample when profiling ``real`` for synthetic
    synthetic_in_process: bool = False  # generate synthetic samples in the loader instead of reading synth shards

    def resolved_logits(self) -> str:
        return self.logits or ("all" if torch.device(self.device).type == "cuda" else "loss")


# ----------------------------------------------------------------------------- loaders

def default_loader_factory() -> Callable:
    """``vlmdata.loaders.make_loader`` (the shared loader every source goes through)."""
    try:
        mod = importlib.import_module("vlmdata.loaders")
        return getattr(mod, "make_loader")
    except (ImportError, AttributeError):
        try:
            return importlib.import_module("vlmdata.loaders.api").make_loader
        except (ImportError, AttributeError) as e:
            raise AuditError(f"vlmdata.loaders.make_loader is not available ({e})") from None


def open_loader(factory: Callable, source: str, cfg: AuditConfig) -> tuple[Iterable, dict]:
    """Call ``factory(source, ...)`` with the audit's settings; returns (batches, loader record)."""
    kwargs = dict(model=cfg.model_family, seq_length=cfg.seq_length, micro_batch_size=cfg.micro_batch_size,
                  seed=cfg.seed, **cfg.loader_kwargs)
    params = inspect.signature(factory).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        dropped = sorted(k for k in kwargs if k not in params)
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    else:
        dropped = []
    try:
        batches = factory(source, **kwargs)
    except (ValueError, OSError, FileNotFoundError) as e:
        raise AuditError(f"cannot open source {source!r}: {e}") from None
    record = {"source": source, "factory": f"{factory.__module__}.{factory.__qualname__}",
              "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool, type(None)))},
              "dropped_kwargs": dropped}
    return batches, record


def synthetic_profile(cfg: AuditConfig, out_dir: str | None) -> str:
    """The profile.json the synthetic source samples: ``cfg.profile`` or a profile of ``cfg.real`` made now."""
    if cfg.profile:
        if not os.path.isfile(cfg.profile):
            raise AuditError(f"profile {cfg.profile!r} does not exist")
        return cfg.profile
    from ..profile import ProfileError, ProfileOptions, profile_dataset, write_profile

    path = os.path.join(out_dir or tempfile.mkdtemp(prefix="vlmdata-audit-"), "real-profile.json")
    try:
        prof = profile_dataset(cfg.real, ProfileOptions(model=cfg.model_family, seed=cfg.seed,
                                                        decode_images=cfg.profile_decode_images))
        write_profile(prof, path)
    except ProfileError as e:
        raise AuditError(f"cannot profile {cfg.real!r} for the synthetic source: {e}") from None
    return path


def synthetic_shards(cfg: AuditConfig, profile_path: str, out_dir: str | None) -> str:
    """The profile's synthetic twin written as shards (one sample per profile row), like ``vlmdata synth``.

    Read back through the same loader as the real shards, synthetic samples then cost what real ones
    cost on the host too (tar read + decode + preprocess), not the generator's (render + encode),
    which would compete with the training process for CPU and slow its kernel launches."""
    from ..build import write_dataset
    from ..profile import load_profile
    from ..synthetic.source import SyntheticSource

    prof = load_profile(profile_path)
    n = len(prof["rows"]["samples"]["n_images"])
    out = os.path.join(out_dir or tempfile.mkdtemp(prefix="vlmdata-audit-"), "synthetic-shards")
    src = SyntheticSource(prof, cfg.seed, variants=0, threads=0)
    write_dataset(out, src.take(n), kind="synth", options={"generator": "profile", "seed": cfg.seed, "samples": n},
                  source={"format": "synthetic", **src.describe()}, overwrite=True, max_count=64, energon=False)
    return out


def source_spec(name: str, cfg: AuditConfig, profile_path: str | None) -> str:
    """What to hand the loader for a source name."""
    if name in MOCKS:
        return name
    if name == "synthetic":
        return profile_path  # run_audit swaps in synthetic_shards() unless synthetic_in_process
    if name == "real":
        if not os.path.exists(cfg.real):
            raise AuditError(f"real shards {cfg.real!r} do not exist")
        return cfg.real
    raise AuditError(f"unknown source {name!r}; choose from {', '.join(SOURCES)}")


# ----------------------------------------------------------------------------- workloads

def _visual(batch: dict, key: str):
    v = batch.get("visual_inputs")
    if v is None:
        return None
    return v.get(key) if isinstance(v, dict) else getattr(v, key, None)


def batch_shape(batch: dict) -> dict:
    """Samples, images, patches and visual tokens per sample of a batch (no FLOPs)."""
    ids = torch.as_tensor(batch["input_ids"])
    grid = _visual(batch, "image_grid_thw")
    return {"samples": int(ids.shape[0]), "images": 0 if grid is None else int(len(grid)),
            "patches": 0 if grid is None else int(torch.as_tensor(grid).prod(-1).sum()),
            "visual_tokens_per_sample": (ids == IMAGE_TOKEN_ID).sum(1).tolist()}


class ReferenceWorkload:
    """The built-in Qwen3-VL-MoE model (``build_model``) trained by ``TrainStep``; gradients averaged over ranks under torchrun."""

    def __init__(self, preset: str, device: str, logits: str, dist=None, seed: int = 0):
        from .model import build_model, model_summary
        from .step import TrainStep

        self.model = build_model(preset, device, seed=seed)
        self.summary = model_summary(self.model)
        self.config, self.logits = self.model.config, logits
        sync = None
        if dist is not None and dist.world_size > 1:
            from .distributed import GradAllReduce

            sync = GradAllReduce(self.model, dist)
        self.step = TrainStep(self.model, logits=logits, after_backward=sync)
        self.name = f"reference:{preset}"

    def begin_source(self) -> None:
        self.step.reset_peak_memory()

    def __call__(self, batch: dict) -> dict:
        return self.step(batch)

    def flops(self, batch: dict) -> dict:
        return step_flops(self.config, batch, logits=self.logits)

    def describe(self) -> dict:
        return {"kind": "reference", "name": self.name, "logits": self.logits, "model": self.summary}

    def close(self) -> None:
        self.step.close()


class UserWorkload:
    """``--step module:function``: ``function(batch)`` runs one training step.  It may return a dict with
    ``times_ms`` (stage times, with ``total``), ``flops`` (model FLOPs of the step) and ``peak_mem_bytes``;
    otherwise the step is timed as one block and TFLOP/s are not reported."""

    def __init__(self, spec: str, device: str):
        mod_name, _, fn_name = spec.partition(":")
        if not mod_name or not fn_name:
            raise AuditError(f"--step must be module:function, got {spec!r}")
        sys.path.insert(0, os.getcwd())
        try:
            fn = getattr(importlib.import_module(mod_name), fn_name)
        except (ImportError, AttributeError) as e:
            raise AuditError(f"cannot load --step {spec!r}: {e}") from None
        if not callable(fn):
            raise AuditError(f"--step {spec!r} is not callable")
        self.fn, self.name, self.cuda = fn, spec, torch.device(device).type == "cuda"
        self._last: dict = {}

    def begin_source(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def __call__(self, batch: dict) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        ret = self.fn(batch)
        if self.cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        self._last = ret if isinstance(ret, dict) else {}
        times = dict(self._last.get("times_ms") or {"step": ms})
        times.setdefault("total", ms)
        peak = self._last.get("peak_mem_bytes", torch.cuda.max_memory_allocated() if self.cuda else None)
        return {"times_ms": times, "wall_ms": ms, "peak_mem_bytes": peak, "loss": self._last.get("loss")}

    def flops(self, batch: dict) -> dict:
        out = count_tokens(batch, IMAGE_TOKEN_ID)
        out["total_flops"] = self._last.get("flops")
        return out

    def describe(self) -> dict:
        return {"kind": "user", "name": self.name}

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- measuring

def run_source(workload, batches: Iterable, *, steps: int, warmup: int, seed: int = 0,
               advance: Callable[[int], None] = lambda n=1: None) -> list[dict]:
    """Warm up, then measure ``steps`` steps of ``workload`` on ``batches``; one record per measured step."""
    torch.manual_seed(seed)
    workload.begin_source()
    it = iter(batches)
    records = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            raise AuditError(f"the loader ran out of batches after {i} of {warmup + steps} steps") from None
        t1 = time.perf_counter()
        r = workload(batch)
        t2 = time.perf_counter()
        advance(1)
        if i < warmup:
            continue
        f = workload.flops(batch)
        rec = {"step": i - warmup, "data_wait_ms": (t1 - t0) * 1e3, "step_ms": (t2 - t0) * 1e3,
               "times_ms": r["times_ms"], "peak_mem_bytes": r.get("peak_mem_bytes"), "loss": r.get("loss"),
               "flops": f.get("total_flops"), "lm_flops": f.get("lm_flops"), "vision_flops": f.get("vision_flops"),
               **{k: f[k] for k in ("tokens_total", "tokens_useful", "tokens_visual", "tokens_padding")},
               **batch_shape(batch)}
        records.append(rec)
    return records


def environment(device: str) -> dict:
    import numpy
    import transformers

    from .. import __version__

    dev = torch.device(device)
    env = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
           "transformers": transformers.__version__, "numpy": numpy.__version__, "vlmdata": __version__,
           "device": str(dev), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if dev.type == "cuda":
        env.update(device_name=torch.cuda.get_device_name(dev), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(), nccl=".".join(map(str, torch.cuda.nccl.version())))
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def run_audit(cfg: AuditConfig, *, loader_factory: Callable | None = None, out_dir: str | None = None,
              dist=None, progress: Callable | None = None) -> dict:
    """Measure every source of ``cfg``; returns ``{"config", "environment", "workload", "sources": {name:
    {"records", "loader", "world_size"}}}``.  ``progress(total)`` is a context manager yielding advance."""
    for s in cfg.sources:
        if s not in SOURCES:
            raise AuditError(f"unknown source {s!r}; choose from {', '.join(SOURCES)}")
    if cfg.steps < 1 or cfg.warmup < 0:
        raise AuditError("--steps must be >= 1 and --warmup >= 0")
    factory = loader_factory or default_loader_factory()
    main = dist is None or dist.is_main  # under torchrun only rank 0 writes into out_dir
    profile_path = synthetic_profile(cfg, out_dir if main else None) if "synthetic" in cfg.sources else None
    specs = {s: source_spec(s, cfg, profile_path) for s in cfg.sources}
    if "synthetic" in specs and not cfg.synthetic_in_process:
        specs["synthetic"] = synthetic_shards(cfg, profile_path, out_dir if main else None)
    device = dist.device if dist is not None else cfg.device
    logits = cfg.resolved_logits()
    workload = UserWorkload(cfg.step, device) if cfg.step else \
        ReferenceWorkload(cfg.preset, device, logits, dist, seed=cfg.seed)
    result = {"config": {**asdict(cfg), "logits": logits, "profile": profile_path},
              "environment": environment(device), "workload": workload.describe(), "sources": {}}
    world = dist.world_size if dist is not None else 1
    from contextlib import nullcontext

    ctx = progress(len(cfg.sources) * (cfg.steps + cfg.warmup)) if progress else nullcontext(lambda n=1: None)
    try:
        with ctx as advance:
            for name in cfg.sources:
                batches, loader = open_loader(factory, specs[name], cfg)
                records = run_source(workload, batches, steps=cfg.steps, warmup=cfg.warmup, seed=cfg.seed,
                                     advance=advance)
                stats = getattr(batches, "stats", None)
                if stats is not None and hasattr(stats, "to_json"):
                    loader["stats"] = stats.to_json()
                result["sources"][name] = {"records": records, "loader": loader, "world_size": world}
    finally:
        workload.close()
    return result
