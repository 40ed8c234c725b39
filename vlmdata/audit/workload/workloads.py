"""The training workloads the audit times: the built-in reference model, or a user's step function.

A workload runs **global steps** (Megatron Bridge's ``train_step``): ``begin_step(micro_batches)``, then
``micro(batch, wait_ms)`` for each micro-batch (forward + backward; ``wait_ms`` is the host time just spent
waiting for the batch), then ``finish()``, which runs the optimizer once and returns
``{"times_ms": {stage: ms, "total": ms}, "micro_ms": [device ms per micro-batch], "data_wait_ms",
"wall_ms", "peak_mem_bytes", "loss"}``. A workload that runs one micro-batch per call (a ``--step``
function) is adapted by ``as_global_steps``. Besides that it says

- ``shape_items(batch)``: the set of shapes the batch makes the workload see for the first time at most
  once (the token matrix (B, S), total patches, per-image grids when the vision attention runs image by
  image, the loss-token count when logits run on loss tokens only). A new item can cost a one-off setup
  inside the step (PyTorch's cuDNN attention builds a plan per new sequence length: 44-65 ms per new image
  size in a Qwen3-VL vision tower on an H200 with transformers' per-image SDPA path, forward and again
  backward), so the runner warms every item before timing anything;
- ``warm(batch)``: run the batch untimed so that every such setup happens (reference: forward + backward,
  no gradient sync, no optimizer step, weights untouched; user step: one call); the reference workload also
  has ``warm_vision(batch)``, its vision tower alone (``TrainStep.warm_vision``), for a batch whose new items
  are all the tower's (``batch_shapes.vision_only``); it returns False where it ran nothing;
- ``flops(batch)``: model FLOPs and token counts of the batch (``vlmdata.audit.workload.flops``);
- ``recover()``: after an out-of-memory error, drop gradients and cached blocks so the run can go on.

The reference workload takes the tuning decisions a sweep varies (``WORKLOAD_OPTIONS``): Bridge's
``freeze_language_model``, ``freeze_vision_model``, ``freeze_vision_projection`` (``apply_freeze``) and
``freeze_vision`` (tower and projection together), ``recompute`` ("none"; "selective": activation
checkpointing of every attention and MoE block, decoder and vision; "full": of every whole layer and vision
block), ``attention`` ("varlen": ``vlmdata.audit.workload.kernels``; "sdpa": transformers' per-image path), ``compile``
("none", "vision", "decoder", "all": those blocks' forwards through ``torch.compile``,
``compiled.compile_blocks``; the audit's CUDA default is "all") and, under
torchrun, ``parallel`` ("ddp": replicated weights, gradients averaged once per global step; "fsdp": PyTorch
FSDP2 ``fully_shard`` of every decoder layer and vision block, fp32 sharded weights computed in bf16,
gradients reduce-scattered in fp32 on the last micro-batch).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from vlmdata.audit.settings.run_spec import RECOMPUTE
from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.batch_shapes import batch_shape, materialize, shape_items  # noqa: F401  # re-exported
from vlmdata.audit.workload.compiled import compile_blocks
from vlmdata.audit.workload.distributed import GradAllReduce, shard_fsdp
from vlmdata.audit.workload.flops import step_flops
from vlmdata.audit.workload.kernels import kernel_name
from vlmdata.audit.workload.lora import ADAPTER_ATTR, apply_lora
from vlmdata.audit.workload.model import build_model, model_summary
from vlmdata.audit.workload.step import LossForward, TrainStep
from vlmdata.audit.workload.user_step import UserWorkload  # noqa: F401  # re-exported (the class lives in user_step)

PARALLEL = ("ddp", "fsdp")
SWITCH = "switch"  # recompute chosen per configuration (``ReferenceWorkload.configure``)
# what a sweep may vary besides micro_batch_size
WORKLOAD_OPTIONS = (
    "freeze_vision",
    "freeze_language_model",
    "freeze_vision_model",
    "freeze_vision_projection",
    "recompute",
    "parallel",
    "attention",
)


def _checkpointed(module, when=None) -> None:
    """Make ``module`` recompute its forward in backward (non-reentrant activation checkpointing); with ``when``,
    only while ``when()`` is true."""
    forward = module.forward

    def recomputed(*args, **kwargs):
        if when is not None and not when():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    module.forward = recomputed


def _recompute_targets(model, mode: str) -> list:
    layers, blocks = model.model.language_model.layers, model.model.visual.blocks
    if mode == "full":
        return [*layers, *blocks]
    if mode == "selective":
        return [m for layer in layers for m in (layer.self_attn, layer.mlp)] + [b.attn for b in blocks]
    return []


def apply_recompute(model, mode: str, state: dict | None = None) -> int:
    """Activation checkpointing on the reference model; returns how many modules recompute.
    "selective": each decoder layer's attention and MoE block and each vision block's attention;
    "full": each whole decoder layer and vision block; "none": nothing. "switch" (with ``state``): both sets
    wrapped, each recomputing only while ``state["mode"]`` names it (configurations measured side by side)."""
    if mode == SWITCH and state is not None:
        for m in RECOMPUTE[1:]:
            for target in _recompute_targets(model, m):
                _checkpointed(target, lambda m=m: state["mode"] == m)
        return 0
    if mode not in RECOMPUTE:
        raise AuditError(f"`recompute` must be one of {', '.join(RECOMPUTE)}, got {mode!r}")
    targets = _recompute_targets(model, mode)
    for target in targets:
        _checkpointed(target)
    return len(targets)


FREEZE_OPTIONS = ("freeze_language_model", "freeze_vision_model", "freeze_vision_projection")


def apply_freeze(
    model,
    *,
    freeze_language_model: bool = False,
    freeze_vision_model: bool = False,
    freeze_vision_projection: bool = False,
) -> None:
    """Bridge's ``Qwen3VLModel.freeze`` on the reference model: the language model (embedding, decoder,
    output layer), the vision model (tower and its mergers), the projection (merger and DeepStack mergers);
    freezing the vision model alone keeps the projection trainable."""
    vis = model.model.visual
    projection = [vis.merger, *getattr(vis, "deepstack_merger_list", [])]
    modules = []
    if freeze_language_model:
        modules += [model.model.language_model, model.lm_head]
    if freeze_vision_model:
        modules.append(vis)
    if freeze_vision_projection:
        modules += projection
    for m in modules:
        m.requires_grad_(False)
    if freeze_vision_model and not freeze_vision_projection:
        for m in projection:
            m.requires_grad_(True)
    for m in modules:  # PEFT adapters train in a frozen part: Bridge adds them after the provider's freeze
        for p in m.parameters():
            if getattr(p, ADAPTER_ATTR, False):
                p.requires_grad_(True)


class ReferenceWorkload:
    """The reference model (``build_model``: a preset or a ``ModelShape``, whole or a slice) trained by
    ``TrainStep`` with Bridge's step semantics; gradients averaged over ranks under torchrun.

    Per global step: ``begin_step(micro_batches)``, ``micro(batch, wait_ms)`` per micro-batch, ``finish()``;
    ``__call__(batch)`` is a global step of one micro-batch."""

    def __init__(
        self,
        preset,
        device: str,
        logits: str,
        dist=None,
        seed: int = 0,
        *,
        freeze_vision: bool = False,
        freeze_language_model: bool = False,
        freeze_vision_model: bool = False,
        freeze_vision_projection: bool = False,
        recompute: str = "none",
        parallel: str = "ddp",
        attention: str = "varlen",
        compile: str = "none",
        layers: int | None = None,
        experts: int | None = None,
        peft=None,
    ):
        if parallel not in PARALLEL:
            raise AuditError(f"`parallel` must be one of {', '.join(PARALLEL)}, got {parallel!r}")
        fsdp = parallel == "fsdp" and dist is not None and dist.world_size > 1
        cuda = torch.device(device).type == "cuda"
        # FSDP keeps fp32 sharded weights and computes in bf16 (its mixed-precision policy)
        self.model = build_model(
            preset,
            device,
            dtype=torch.float32 if fsdp else None,
            seed=seed,
            attention=attention,
            layers=layers,
            experts=experts,
        )
        freeze = {
            "freeze_language_model": bool(freeze_language_model),
            "freeze_vision_model": bool(freeze_vision_model or freeze_vision),
            "freeze_vision_projection": bool(freeze_vision_projection or freeze_vision),
        }
        # PEFT (vlmdata.audit.workload.lora): LoRA freezes every base weight; a VLMLoRA's flags add to the run's
        self.adapters = apply_lora(self.model, peft) if peft is not None else None
        if peft is not None and peft.freeze:
            freeze = {k: v or bool(peft.freeze.get(k)) for k, v in freeze.items()}
        if peft is None or peft.freeze:
            apply_freeze(self.model, **freeze)
        self.compiled_blocks = compile_blocks(self.model, compile)  # before recompute wraps the forwards
        self._recompute_state = {"mode": "none"}
        self.recomputed = apply_recompute(self.model, recompute, self._recompute_state)
        self._config: tuple | None = None  # the configuration ``configure`` set (None: never switched)
        self._summary: dict | None = None  # model_summary of the current configuration, made when asked for
        self.config, self.logits = self.model.config, logits
        self.per_image_kernels = attention == "sdpa"  # per-image SDPA calls: cuDNN plans per image size
        self.options = {
            "freeze_vision": bool(freeze_vision),
            **freeze,
            "recompute": recompute,
            "attention": attention,
            "compile": compile,
            "parallel": parallel if dist is not None and dist.world_size > 1 else None,
            "peft": {**peft.describe(), "adapter_params": self.adapters} if peft is not None else None,
        }
        sync, optimizer, forward = None, None, None
        if fsdp:
            forward = LossForward(self.model, logits)
            shard_fsdp(forward, torch.bfloat16 if cuda else torch.float32)
            optimizer = torch.optim.AdamW(
                [p for p in self.model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.0
            )
        elif dist is not None and dist.world_size > 1:
            sync = GradAllReduce(self.model, dist)
        self.step = TrainStep(self.model, optimizer, logits=logits, grad_sync=sync, forward_module=forward, fsdp=fsdp)
        self.name = f"reference:{getattr(self.model, 'vlmdata_preset', preset)}"

    def shape_items(self, batch: dict) -> frozenset:
        items = shape_items(batch, loss_tokens=self.logits == "loss", per_image=self.per_image_kernels)
        if self._config is None:
            return items
        return frozenset((self._config, item) for item in items)  # a configuration's kernels are its own

    def configure(self, spec) -> None:
        """Freezing and recompute as ``spec`` (a ``RunSpec``) sets them: parameters trainable at construction
        that ``spec`` freezes stop requiring gradients (the optimizer skips them), the others train again."""
        key = (spec.freeze_language_model, spec.freeze_vision_model, spec.freeze_vision_projection, spec.recompute)
        if key == self._config:
            return
        for p in self.step.trainable:
            p.requires_grad_(True)
        apply_freeze(
            self.model,
            freeze_language_model=spec.freeze_language_model,
            freeze_vision_model=spec.freeze_vision_model,
            freeze_vision_projection=spec.freeze_vision_projection,
        )
        trainable = {id(p) for p in self.step.trainable}
        for p in self.model.parameters():  # never unfreeze what the construction froze for every configuration
            if id(p) not in trainable:
                p.requires_grad_(False)
        self._recompute_state["mode"] = spec.recompute
        self._config = key
        self._summary = None  # trainable counts changed: recounted when described (not per switch between steps)

    @property
    def summary(self) -> dict:
        """``model_summary`` of the model in its current configuration."""
        if self._summary is None:
            self._summary = model_summary(self.model)
        return self._summary

    def trains(self) -> dict[str, bool]:
        """Which parts have trainable parameters now: ``language``, ``vision`` and ``projection`` weights, and the
        PEFT adapters of the decoder and of the vision tower (``stages.backward_factors`` reads it)."""
        vis = self.model.model.visual
        projection = {id(p) for m in [vis.merger, *getattr(vis, "deepstack_merger_list", [])] for p in m.parameters()}
        language = [*self.model.model.language_model.parameters(), *self.model.lm_head.parameters()]

        def any_trains(params, adapters: bool) -> bool:
            return any(p.requires_grad and bool(getattr(p, ADAPTER_ATTR, False)) == adapters for p in params)

        tower = [p for p in vis.parameters() if id(p) not in projection]
        return {
            "language": any_trains(language, False),
            "vision": any_trains(tower, False),
            "projection": any(p.requires_grad for p in vis.parameters() if id(p) in projection),
            "decoder_adapters": any_trains(language, True),
            "vision_adapters": any_trains(tower, True),
        }

    def warm(self, batch: dict) -> None:
        self.step.warm(batch)

    def warm_vision(self, batch: dict) -> bool:
        return self.step.warm_vision(batch)

    def begin_step(self, micro_batches: int = 1) -> None:
        self.step.reset_peak_memory()
        self.step.begin(micro_batches)

    def micro(self, batch: dict, wait_ms: float = 0.0) -> None:
        self.step.micro(batch, wait_ms)

    def finish(self) -> dict:
        return self.step.finish()

    def __call__(self, batch: dict) -> dict:
        self.step.reset_peak_memory()
        return self.step(batch)

    def recover(self) -> None:
        self.step.optimizer.zero_grad(set_to_none=True)
        self.step.marks.on = False
        if self.step.cuda:
            torch.cuda.empty_cache()

    def flops(self, batch: dict) -> dict:
        return step_flops(self.config, batch, logits=self.logits)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "reference",
            "name": self.name,
            "logits": self.logits,
            "model": self.summary,
            "options": self.options,
            "recomputed_modules": self.recomputed,
            "compiled_blocks": self.compiled_blocks,
            "attention_kernel": kernel_name(self.step.device) if self.options["attention"] == "varlen" else "sdpa",
        }

    def close(self) -> None:
        self.step.close()


class GlobalStep:
    """A workload that runs one micro-batch per call (a ``--step`` function) seen as global steps: each
    micro-batch is one call, its times added up; the workload's own optimizer semantics are its own."""

    def __init__(self, workload):
        self.workload = workload
        self._parts: list[dict] = []
        self._waits: list[float] = []

    def __getattr__(self, name):
        return getattr(self.workload, name)

    def begin_step(self, micro_batches: int = 1) -> None:
        self.workload.begin_step()
        self._parts, self._waits = [], []

    def micro(self, batch: dict, wait_ms: float = 0.0) -> None:
        self._parts.append(self.workload(batch))
        self._waits.append(float(wait_ms))

    def finish(self) -> dict:
        times: dict[str, float] = {"data_wait": sum(self._waits)}
        for r in self._parts:
            for k, v in (r.get("times_ms") or {}).items():
                times[k] = times.get(k, 0.0) + float(v)
        times["total"] = times.get("total", 0.0) + times["data_wait"]
        peaks = [p for r in self._parts if (p := r.get("peak_mem_bytes")) is not None]
        losses = [r["loss"] for r in self._parts if r.get("loss") is not None]
        return {
            "times_ms": times,
            "micro_ms": [float((r.get("times_ms") or {}).get("total", r.get("wall_ms", 0.0))) for r in self._parts],
            "data_wait_ms": times["data_wait"],
            "wall_ms": sum(float(r.get("wall_ms") or 0.0) for r in self._parts),
            "peak_mem_bytes": max(peaks) if peaks else None,
            "loss": sum(losses) / len(losses) if losses else None,
        }


def as_global_steps(workload):
    """``workload`` if it runs global steps itself (``begin_step``/``micro``/``finish``), else a ``GlobalStep``."""
    return workload if hasattr(workload, "micro") else GlobalStep(workload)
