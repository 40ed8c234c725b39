"""What a run will cost before anything is built: parameters, peak memory and time, estimated
(``count_params``, ``peak_memory``, ``step_seconds``, ``available_memory``, ``device_flops``). The audit's plan
(``vlmdata.audit.phases.preview``) shows them, ``resolve`` picks the slice that fits, and a run that will not fit is
refused before it allocates (``fit_slice``).

**Parameters** are counted on PyTorch's meta device (no memory): the part one GPU builds (``ModelShape.sliced``:
``layers`` decoder layers, experts / EP per layer), with the run's PEFT adapters (``vlmdata.audit.workload.lora``) and
freezing (``workloads.apply_freeze``), by part (language, vision, projection) and trainable.

**Memory** (bytes, a rough upper estimate; the measured ``peak_mem_bytes`` replaces it): the training state,
every parameter's weights (bf16 on CUDA, fp32 on CPU) and, for the trainable ones, gradients and the optimizer
(bf16 with fp32 masters: +2 +4 +4 +8 B; bf16 without: +2 +4; fp32: +4 +8) — plus one micro-batch's activations at
its largest (``MBS x seq_length`` tokens, a quarter of them visual, every visual token 4 patches), with the
per-element sizes docs/reference-workload.md measured on the H200: per token and decoder layer ``6h + 3 nq d``
(attention) + ``2h + k (h + 2f)`` (MoE) or ``2h + 3F`` (dense) elements, per patch and vision block ``8 hv + 2.5
iv``, the logits ``2w + 8`` bytes per token and vocabulary row (``logits="loss"``: an eighth of the tokens).
Autograd keeps a part's activations only when something at or before it trains: a frozen tower keeps none, a
frozen decoder keeps its own when the projector or an adapter before it trains. Recompute keeps each decoder
layer's input only (``full``) or half (``selective``). 10% and a fixed 1 GiB (CUDA context, allocator) on top.

**Time**: a step's model FLOPs (``vlmdata.audit.workload.flops``, at the same batch) over the device's measured matmul
rate (``device_flops``: a few GEMMs, well under a second) times ``EFFICIENCY`` of it — a rough figure, said as
such. Light enough for ``vlmdata audit --plan``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vlmdata.audit.settings.model_config import ADAPTED_TOWERS, FAMILIES, ModelShape, vision_widths
from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.flops import lm_flops
from vlmdata.audit.workload.lora import apply_lora
from vlmdata.audit.workload.workloads import apply_freeze

__all__ = [
    "Params",
    "count_params",
    "peak_memory",
    "available_memory",
    "device_flops",
    "step_flops_estimate",
    "EFFICIENCY",
    "OVERHEAD_BYTES",
    "Fit",
    "fit_slice",
    "human_gib",
]

EFFICIENCY = {"cpu": 0.8, "cuda": 0.25}  # a training step's rate / the device's plain GEMM rate (rough)
OVERHEAD_BYTES = 1 << 30  # CUDA context, allocator fragmentation, the loaders' queues
VISUAL_SHARE = 0.25  # the estimate's share of visual tokens in a micro-batch
LOSS_SHARE = 8  # logits="loss": one token in LOSS_SHARE carries loss (an SFT answer)


@dataclass(frozen=True)
class Params:
    """Parameter counts of the part one GPU builds."""

    total: int
    trainable: int
    by_part: dict[str, int] = field(default_factory=dict)  # language, vision, projection, adapters
    trainable_by_part: dict[str, int] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "trainable": self.trainable,
            "by_part": dict(self.by_part),
            "trainable_by_part": dict(self.trainable_by_part),
        }


def count_params(shape: ModelShape, layers: int | None, experts: int | None, run: Any, peft: Any = None) -> Params:
    """Parameters of the slice (``layers`` decoder layers, ``experts`` per layer; None: all) under ``run``'s
    freezing and ``peft``, counted on the meta device."""
    import transformers  # heavy: only when a model is counted

    with torch.device("meta"):
        model = getattr(transformers, FAMILIES[shape.model_type][2])(shape.sliced(layers, experts))
        if peft is not None:
            apply_lora(model, peft)
    flags = {
        k: bool(getattr(run, k)) for k in ("freeze_language_model", "freeze_vision_model", "freeze_vision_projection")
    }
    if peft is not None and peft.freeze:
        flags = {k: v or bool(peft.freeze.get(k)) for k, v in flags.items()}
    if peft is None or peft.freeze:
        apply_freeze(model, **flags)
    vis = model.model.visual
    projection = [vis.merger, *getattr(vis, "deepstack_merger_list", [])]
    parts = {
        "language": [model.model.language_model, model.lm_head],
        "projection": projection,
        "vision": [vis],
    }
    seen: set[int] = set()
    by_part: dict[str, int] = {}
    trainable_by: dict[str, int] = {}
    adapters = {id(p) for p in model.parameters() if getattr(p, "_vlmdata_adapter", False)}
    for part in ("projection", "language", "vision", "adapters"):
        mods = parts.get(part, [model])
        params = list({id(p): p for m in mods for p in m.parameters() if id(p) not in seen}.values())  # tied: once
        params = [p for p in params if (id(p) in adapters) == (part == "adapters")]
        seen.update(id(p) for p in params)
        by_part[part] = sum(p.numel() for p in params)
        trainable_by[part] = sum(p.numel() for p in params if p.requires_grad)
    return Params(sum(by_part.values()), sum(trainable_by.values()), by_part, trainable_by)


def _bytes_per_param(device_kind: str, master_weights: bool) -> tuple[int, int]:
    """(frozen, trainable) bytes per parameter (module docstring)."""
    if device_kind == "cuda":
        return 2, (2 + 2 + 4 + 4 + 8) if master_weights else (2 + 2 + 4)
    return 4, 4 + 4 + 8


def _decoder_elements(tc: Any) -> int:
    h, nq = tc.hidden_size, tc.num_attention_heads
    d = getattr(tc, "head_dim", None) or h // nq
    attn = 6 * h + 3 * nq * d
    if getattr(tc, "num_experts", None):
        return attn + 2 * h + tc.num_experts_per_tok * (h + 2 * tc.moe_intermediate_size)
    return attn + 2 * h + 3 * tc.intermediate_size


def peak_memory(
    shape: ModelShape,
    layers: int | None,
    params: Params,
    run: Any,
    device_kind: str,
    logits: str,
    peft: Any = None,
) -> dict[str, int]:
    """Estimated peak bytes of one training step of the slice (module docstring), by component."""
    w = 2 if device_kind == "cuda" else 4
    frozen_b, train_b = _bytes_per_param(device_kind, shape.master_weights)
    state = (params.total - params.trainable) * frozen_b + params.trainable * train_b
    tokens = run.micro_batch_size * run.seq_length
    patches = int(tokens * VISUAL_SHARE) * shape.vision.spatial_merge_size**2
    tr = params.trainable_by_part
    vision_keeps = bool(tr.get("vision")) or (peft is not None and shape.model_type in ADAPTED_TOWERS)
    decoder_keeps = vision_keeps or bool(tr.get("language") or tr.get("projection") or tr.get("adapters"))
    n_layers = layers or shape.layers
    per_layer = tokens * _decoder_elements(shape.text) * w
    keep = {"none": 1.0, "selective": 0.5, "full": 0.0}.get(run.recompute, 1.0)
    decoder = (
        int(n_layers * (per_layer * keep + tokens * shape.text.hidden_size * w) + per_layer)
        if decoder_keeps
        else per_layer
    )
    v = shape.vision
    hv, iv = vision_widths(v)
    per_block = patches * int(8 * hv + 2.5 * iv) * w
    vision = int(v.depth * per_block * keep + per_block) if vision_keeps else per_block
    head_tokens = tokens if logits == "all" else tokens // LOSS_SHARE
    head = (
        head_tokens * shape.text.vocab_size * (2 * w + 8) if decoder_keeps else head_tokens * shape.text.vocab_size * w
    )
    activations = decoder + vision + head
    total = int((state + activations) * 1.1) + OVERHEAD_BYTES
    return {"state": state, "decoder": decoder, "vision": vision, "logits": head, "total": total}


def available_memory(device: str) -> tuple[int | None, str]:
    """(bytes this run may use, what they are): the GPU's free memory, or the host's available RAM."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free), f"free memory of {torch.cuda.get_device_name(dev)}"
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if ":" in line}
        avail, what = info.get("MemAvailable"), "available RAM"
    except (OSError, ValueError, IndexError):
        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        avail, what = (int(pages * os.sysconf("SC_PAGE_SIZE") * 0.5) or None), "half the RAM"
    limit = _cgroup_room()
    if limit is not None and (avail is None or limit < avail):
        return limit, "room left under this process group's memory limit (cgroup)"
    return avail, what


def _cgroup_room() -> int | None:
    """Bytes left under a cgroup memory limit (v2, then v1), None without one."""
    for limit_at, used_at in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit_at) as f:
                text = f.read().strip()
            if text == "max" or int(text) >= 1 << 60:
                return None
            with open(used_at) as f:
                return max(0, int(text) - int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return None


def device_flops(device: str, seconds: float = 0.3) -> float:
    """The device's plain matrix-multiply rate in FLOP/s (bf16 on CUDA, fp32 on CPU), measured for ``seconds``."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    n = 4096 if cuda else 512
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    _ = a @ b  # the first call sets the kernels up
    if cuda:
        torch.cuda.synchronize(dev)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or done < 2:
        _ = a @ b
        done += 1
        if cuda:
            torch.cuda.synchronize(dev)
    return 2 * n**3 * done / (time.perf_counter() - t0)


def step_flops_estimate(shape: ModelShape, layers: int | None, run: Any, logits: str) -> float:
    """Model FLOPs of one global step of the slice at the estimate's batch (module docstring)."""
    tc = shape.sliced(layers, None).text_config
    tokens = run.micro_batch_size * run.seq_length
    head = None if logits == "all" else tokens // LOSS_SHARE
    lm = lm_flops(tc, run.micro_batch_size, run.seq_length, head_tokens=head)
    v = shape.vision
    patches = int(tokens * VISUAL_SHARE) * v.spatial_merge_size**2
    hv, iv = vision_widths(v)
    vision = 6 * patches * v.depth * (4 * hv**2 + 2 * hv * iv)
    return float((lm + vision) * run.micro_batches)


def human_gib(n: float | None) -> str:
    """Bytes as GiB with one decimal ("-" for None)."""
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


@dataclass(frozen=True)
class Fit:
    """The part of the model one GPU measures and what it is estimated to need (``fit_slice``)."""

    layers: int | None  # decoder layers built (None: all)
    experts: int | None  # routed experts per layer built (None: all)
    params: Params
    memory: dict[str, int]
    available: int | None
    available_what: str
    note: str | None = None
    refusal: str | None = None  # why this will not fit and what would (None: it fits, as far as estimated)

    @property
    def fits(self) -> bool:
        return self.refusal is None

    def check(self) -> None:
        """``AuditError`` with the refusal when the part to measure will not fit (before anything is allocated)."""
        if self.refusal is not None:
            raise AuditError(self.refusal)

    def describe(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "refusal": self.refusal,
            "layers": self.layers,
            "experts": self.experts,
            "params": self.params.describe(),
            "memory": dict(self.memory),
            "available_bytes": self.available,
            "available": self.available_what,
        }


def _device_words(device_kind: str) -> str:
    return "one GPU" if device_kind == "cuda" else "this machine"


def fit_slice(
    shape: ModelShape,
    run: Any,
    *,
    device: str,
    logits: str,
    slice_layers: int | None = None,
    peft: Any = None,
    available: tuple[int | None, str] | None = None,
) -> Fit:
    """The whole model when it fits the device's memory, else the largest slice that does (its DeepStack layers and
    two plain ones by default, down to one plain one); ``slice_layers`` as given. When nothing fits, the smallest
    slice with ``refusal``: the message that names the slice or the settings that would fit (``Fit.check`` raises
    it; the plan shows it)."""
    kind = "cuda" if torch.device(device).type == "cuda" else "cpu"
    avail, what = available if available is not None else available_memory(device)
    experts = max(1, shape.experts // run.ep) if shape.experts and run.ep > 1 else None
    deepstack = len(getattr(shape.vision, "deepstack_visual_indexes", None) or [])

    def need(layers: int | None) -> tuple[Params, dict[str, int]]:
        p = count_params(shape, layers, experts, run, peft)
        return p, peak_memory(shape, layers, p, run, kind, logits, peft)

    def fits(mem: dict[str, int]) -> bool:
        return avail is None or mem["total"] <= avail

    where = _device_words(kind)
    if slice_layers is not None:
        layers = min(slice_layers, shape.layers)
        p, mem = need(layers)
        if fits(mem):
            return Fit(layers, experts, p, mem, avail, what)
        why = _refusal(shape, layers, experts, p, mem, avail, what, where, _smaller(need, fits, layers, deepstack))
        return Fit(layers, experts, p, mem, avail, what, refusal=why)
    p, mem = need(None)
    if fits(mem):
        return Fit(None, experts, p, mem, avail, what)
    whole = (p, mem)
    default = min(max(4, deepstack + 2), shape.layers)
    for layers in range(default, max(1, deepstack + 1) - 1, -1):
        p, mem = need(layers)
        if fits(mem):
            note = (
                f"the whole model on {where} ({whole[0].total / 1e9:.1f}B parameters{_experts_words(shape, experts)}, about "
                f"{human_gib(whole[1]['total'])} to train) does not fit its {human_gib(avail)} of {what}: measuring "
                f"{layers} of {shape.layers} decoder layers (about {human_gib(mem['total'])}) and composing the step "
                "(vlmdata.audit.analysis.compose)"
            )
            return Fit(layers, experts, p, mem, avail, what, note)
    smallest = max(1, deepstack + 1)
    why = _refusal(shape, smallest, experts, p, mem, avail, what, where, None)
    return Fit(smallest, experts, p, mem, avail, what, refusal=why)


def _experts_words(shape: ModelShape, experts: int | None) -> str:
    return f", {experts} of {shape.experts} experts per layer" if experts else ""


def _smaller(need, fits, layers: int, deepstack: int) -> int | None:
    for k in range(layers - 1, max(1, deepstack + 1) - 1, -1):
        if fits(need(k)[1]):
            return k
    return None


def _refusal(shape, layers, experts, p, mem, avail, what, where, smaller: int | None) -> str:
    """Why the part to be measured will not fit, and what would."""
    act = mem["total"] - mem["state"]
    head = (
        f"the part of the model to measure ({layers} of {shape.layers} decoder layers{_experts_words(shape, experts)}: "
        f"{p.total / 1e9:.2f}B parameters, {p.trainable / 1e6:.0f}M trained) needs about {human_gib(mem['total'])} "
        f"(training state {human_gib(mem['state'])}, activations and overhead {human_gib(act)}) but {where} has "
        f"{human_gib(avail)} of {what}"
    )
    if smaller is not None:
        return f"{head}; `slice_layers` {smaller} would fit"
    return (
        f"{head}, and no slice of this model fits; measure on a GPU (`device` cuda), or audit a smaller model "
        "(`preset`, `model_config`); a shorter `seq_length` or `micro_batch_size` changes the run but needs less"
    )
