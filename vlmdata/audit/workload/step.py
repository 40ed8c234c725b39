"""Timed training steps of the reference model on Bridge-format batches, with Bridge's step semantics.

Batch (REFERENCE.md section 3): ``input_ids``/``labels`` int64 [B,S] (labels already shifted, -100
ignored), ``loss_mask`` float32 [B,S], ``position_ids`` [B,S], ``visual_inputs`` (dict or object) with
``pixel_values`` float32 [sum patches, 3*2*p*p] and ``image_grid_thw`` int64 [n_images, 3]; text-only
batches have ``pixel_values`` None. A packed batch (``cu_seqlens_q``, one row [1, T] of several samples)
runs each sample's attention within its own boundaries. ``attention_mask`` is ignored, as Bridge's step
ignores it by default (``skip_getting_attention_mask_from_dataset``): padded rows attend causally.

One **global step** (Megatron Bridge's ``train_step``) = ``begin()``, ``micro(batch)`` for each of the
GBS/(MBS*DP) micro-batches (forward and backward; gradients accumulate), ``finish()`` (the data-parallel
gradient sync, then one optimizer step over every trainable parameter). Like Megatron's DDP buffers, the
optimizer steps every trainable parameter each global step, with a zero gradient where a micro-batch gave
none (an image-free batch leaves the vision tower without gradients; Megatron still steps it).
``step(batch)`` (``__call__``) is a global step of one micro-batch.

Stages of a global step (``STAGES``; they add up to the step's wall time, up to ``other``):

``data_wait``        time the step waited for data: the first micro-batch's wait (nothing was queued on the
                     device yet) plus, for later ones, the part of the device's idle gap before the
                     micro-batch that the host spent blocked on the loader (passed in as ``wait_ms``)
``prep``             host work per micro-batch: batch checks, MRoPE position ids (``get_rope_index``), the
                     vision tower's index tensors (``kernels.vision_kwargs``), counted where the device idled
``h2d``              host-to-device copies of the batch
``forward_other``    token embedding, splitting/scattering image features into the sequence
``vision``           vision tower: patch embed, position embeddings, ViT blocks
``projector``        merger + DeepStack mergers (they run interleaved with the blocks)
``lm_forward``       decoder layers (with DeepStack additions) and final norm
``lm_head_loss``     lm_head (over all tokens, or loss tokens only) and the masked-mean cross entropy
``backward_head``    backward of the loss, lm_head and final norm
``backward_decoder`` backward of the decoder layers
``backward_vision``  the rest of the backward: embeddings, projector and vision tower
``host_gap``         device idle between micro-batches not explained by data wait or prep (launch latency)
``grad_sync``        the data-parallel gradient all-reduce (torchrun), once per global step
``optimizer``        (fp32 master gradients,) gradient clipping, AdamW, zero_grad, once per global step

Timing: hooks place marks (forward hooks on the vision tower, its mergers, the decoder and ``lm_head``;
tensor hooks in the backward on the last decoder layer's output and the first layer's input). On CUDA a
mark is a ``torch.cuda.Event`` on the current stream (no sync); ``finish`` syncs once and reads the
intervals, so the stages measure the device's timeline and host stalls count where they happen. On CPU
marks are ``time.perf_counter()``. ``finish`` also returns each micro-batch's device time (``micro_ms``:
its first to last mark), the input of the data-parallel straggler model. The marks become stage times in
``vlmdata.audit.workload.stages``.

MRoPE: like Bridge's Qwen3-VL model, the step computes the 3-D MRoPE ids from ``input_ids`` and
``image_grid_thw`` (``model.model.get_rope_index``) on the host, per sample for a packed row; text-only
batches use the batch's ``position_ids``. The batch checks and the MRoPE ids live in
``vlmdata.audit.workload.batch_checks``, the optimizers (``MasterAdamW``) in ``vlmdata.audit.workload.optimizer``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F

from vlmdata.audit.workload import kernels
from vlmdata.audit.workload.batch_checks import ImagePadMismatch, check_batch, mrope_position_ids, visual_field
from vlmdata.audit.workload.optimizer import MasterAdamW, fill_missing_grads
from vlmdata.audit.workload.stages import BACKWARD_STAGES, FORWARD_STAGES, STAGES, plain_layers, stage_times

__all__ = [  # the step's names, importable from here as before the split
    "STAGES",
    "FORWARD_STAGES",
    "BACKWARD_STAGES",
    "ImagePadMismatch",
    "check_batch",
    "mrope_position_ids",
    "MasterAdamW",
    "masked_lm_loss",
    "LossForward",
    "TrainStep",
    "train_step",
]


class _Marks:
    def __init__(self, cuda: bool):
        self.cuda, self.marks, self.on = cuda, [], False

    def __call__(self, name: str) -> None:
        if not self.on:
            return
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append((name, e))
        else:
            self.marks.append((name, time.perf_counter()))

    def resolve(self) -> list[tuple[str, float]]:
        """(name, ms since the first mark); syncs CUDA once."""
        if self.cuda:
            torch.cuda.synchronize()
            e0 = self.marks[0][1]
            return [(n, e0.elapsed_time(e) if i else 0.0) for i, (n, e) in enumerate(self.marks)]
        t0 = self.marks[0][1]
        return [(n, (t - t0) * 1e3) for n, t in self.marks]


def _to(x, device):
    return x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x


def _tensors(x) -> list[torch.Tensor]:
    """The tensors in ``x`` (a tensor, or nested lists and tuples of them; None: none)."""
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for item in (x or ()) for t in _tensors(item)]


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Bridge's loss: sum(CE * loss_mask) / sum(loss_mask); labels are already shifted.
    Shapes: logits [..., V], labels and loss_mask [...]."""
    ce = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100, reduction="none"
    )
    m = loss_mask.reshape(-1).to(ce.dtype)
    return (ce * m).sum() / m.sum().clamp(min=1.0)


class LossForward(torch.nn.Module):
    """The step's forward as one module: the model on the batch, ``lm_head`` (over all tokens or the loss
    tokens only) and Bridge's masked loss. One module so that FSDP2 can wrap it as its single root (the
    embedding and ``lm_head`` run outside the forward of the modules that hold them)."""

    def __init__(self, model, logits: str = "all"):
        super().__init__()
        self.model, self.logits = model, logits

    def forward(self, ids, labels, lmask, pos, pv, grid, **vision_kw):
        hidden = self.model.model(
            input_ids=ids,
            position_ids=pos,
            pixel_values=pv,
            image_grid_thw=grid if pv is not None else None,
            use_cache=False,
            **(vision_kw if pv is not None else {}),
        ).last_hidden_state
        if self.logits == "loss":  # boolean indexing: a device sync on CUDA
            sel = lmask > 0
            hidden, labels, lmask = hidden[sel], labels[sel], lmask[sel]
        return masked_lm_loss(self.model.lm_head(hidden), labels, lmask)


class TrainStep:
    """Global training steps with stage timing (see the module docstring).

    ``begin()``; ``micro(batch, wait_ms=0.0)`` per micro-batch; ``finish() -> dict``; or ``step(batch)``
    (``__call__``) for a one-micro-batch global step.

    Default optimizer: AdamW (fused on CUDA) for fp32 weights; for bf16 weights ``MasterAdamW`` (fp32
    masters and main gradients) when ``master_weights`` (default: the model's ``vlmdata_master_weights``),
    else AdamW with bf16 moments. No autocast: CUDA runs bf16 weights (``build_model``), CPU fp32.
    ``logits="all"`` runs lm_head on every token like Bridge/Megatron; ``"loss"`` only on tokens with
    ``loss_mask > 0`` (a cheaper variant for CPU tests: a 151,936-row vocabulary dominates a tiny model).
    ``grad_sync``: called once per global step after the last backward (the data-parallel all-reduce).
    ``fsdp``: the forward module is an FSDP2 root; gradient reduce-scatter runs on the last micro-batch only.

    ``finish()`` returns ``loss`` (mean over micro-batches), ``times_ms`` (every stage of ``STAGES`` plus
    ``total``), ``micro_ms`` (device time of each micro-batch) and ``micro_decoder_ms`` (its decoder layers'
    forward + backward), ``data_wait_ms`` (the ``data_wait`` stage),
    ``wall_ms``, ``peak_mem_bytes`` (CUDA max allocated since ``reset_peak_memory``; None on CPU),
    ``timer`` and ``device``.
    """

    def __init__(
        self,
        model,
        optimizer: torch.optim.Optimizer | MasterAdamW | None = None,
        *,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        clip_grad: float | None = 1.0,
        master_weights: bool | None = None,
        check: bool = True,
        logits: str = "all",
        grad_sync=None,
        forward_module: LossForward | None = None,
        fsdp: bool = False,
    ):
        p = next(model.parameters())
        self.grad_sync, self.fsdp = grad_sync, fsdp
        self.model, self.device = model, p.device
        self.cuda = self.device.type == "cuda"
        if master_weights is None:
            master_weights = getattr(model, "vlmdata_master_weights", True)
        fused = True if self.cuda else None
        trainable = [q for q in model.parameters() if q.requires_grad]
        if optimizer is None and p.dtype != torch.float32 and master_weights:
            optimizer = MasterAdamW(trainable, lr=lr, weight_decay=weight_decay, fused=fused)
        elif optimizer is None:
            optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, fused=fused)
        if logits not in ("all", "loss"):
            raise ValueError(f"logits must be 'all' or 'loss', got {logits!r}")
        self.optimizer, self.clip_grad, self.check, self.logits = optimizer, clip_grad, check, logits
        self.trainable = trainable
        self.forward_module = forward_module or LossForward(model, logits)  # FSDP passes its sharded root
        self.marks = _Marks(self.cuda)
        self._hooks = self._install_hooks(model)
        self._micro: list[dict] = []
        self._losses: list[torch.Tensor] = []
        self.n_micro = 1

    def _install_hooks(self, model) -> list:
        vis, lm = model.model.visual, model.model.language_model
        marks = self.marks
        pre = lambda name: lambda mod, args: marks(name)  # noqa: E731
        post = lambda name: lambda mod, args, out: marks(name)  # noqa: E731

        def grad_mark(name):
            def hook(mod, args):
                x = args[0] if args else None
                if marks.on and isinstance(x, torch.Tensor) and x.requires_grad:
                    x.register_hook(lambda g: (marks(name), None)[1])

            return hook

        hooks = [
            vis.register_forward_pre_hook(pre("vision_start")),
            vis.register_forward_hook(post("vision_end")),
            lm.register_forward_pre_hook(pre("lm_start")),
            model.lm_head.register_forward_pre_hook(pre("head_start")),
            lm.norm.register_forward_pre_hook(grad_mark("bwd_head_end")),  # its input's gradient: head done
            lm.norm.register_forward_pre_hook(pre("lm_norm")),
        ]
        for i, layer in enumerate(lm.layers):  # per layer: forward start, and its input's gradient (backward end)
            hooks += [
                layer.register_forward_pre_hook(pre(f"L{i}")),
                layer.register_forward_pre_hook(grad_mark(f"B{i}")),
            ]
        self.deepstack_layers = len(getattr(model.config.vision_config, "deepstack_visual_indexes", None) or [])
        self.decoder_layers = len(lm.layers)
        for merger in [vis.merger, *getattr(vis, "deepstack_merger_list", [])]:
            hooks += [
                merger.register_forward_pre_hook(pre("proj_start")),
                merger.register_forward_hook(post("proj_end")),
            ]
        return hooks

    def __enter__(self) -> "TrainStep":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the timing hooks."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def reset_peak_memory(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    # ------------------------------------------------------------------ one micro-batch

    def _host_inputs(self, batch: dict) -> tuple[Any, dict]:
        """Host-side preparation: checks, MRoPE ids, the vision tower's index tensors (fast path)."""
        if self.check:
            check_batch(batch, self.model.config)
        pos = mrope_position_ids(self.model, batch)
        grid = visual_field(batch.get("visual_inputs"), "image_grid_thw")
        vkw = {}
        fast = getattr(self.model.config.vision_config, "_attn_implementation", None) == kernels.VARLEN
        if fast and grid is not None and visual_field(batch.get("visual_inputs"), "pixel_values") is not None:
            vkw = kernels.vision_kwargs(self.model.model.visual, grid)
        return pos, vkw

    def _forward_loss(self, batch: dict, pos, vkw: dict) -> torch.Tensor:
        """h2d copies, the model forward and the masked loss (marks placed when timing is on)."""
        dev = self.device
        self.marks("start")
        vis = batch.get("visual_inputs")
        ids, labels, lmask = (_to(batch[k], dev) for k in ("input_ids", "labels", "loss_mask"))
        pos = _to(pos, dev)
        pv, grid = _to(visual_field(vis, "pixel_values"), dev), _to(visual_field(vis, "image_grid_thw"), dev)
        vkw = {k: _to(v, dev) for k, v in vkw.items()}
        self.marks("h2d_end")
        loss = self.forward_module(ids, labels, lmask, pos, pv, grid, **vkw)
        self.marks("fwd_end")
        return loss

    def _run_micro(self, batch: dict, pos, vkw: dict, last: bool) -> torch.Tensor:
        cu = batch.get("cu_seqlens_q")
        max_len = None if cu is None else int((cu[1:] - cu[:-1]).max())
        if self.fsdp:
            getattr(self.forward_module, "set_requires_gradient_sync")(last)  # an FSDPModule's
        host = [vkw[k].tolist() for k in ("image_cu_seqlens", "image_cu_window_seqlens") if k in vkw]
        with kernels.packed(None if cu is None else _to(cu, self.device), max_len), kernels.host_segments(*host):
            loss = self._forward_loss(batch, pos, vkw)
            if loss.requires_grad:  # everything the batch reaches may be frozen (an image-free batch, frozen LM)
                (loss / self.n_micro).backward()
        return loss

    def begin(self, micro_batches: int = 1) -> None:
        """Start a global step of ``micro_batches`` micro-batches (the loss of each is scaled by 1/n)."""
        self.n_micro = max(1, int(micro_batches))
        self.marks.marks, self.marks.on = [], True
        self._micro, self._losses = [], []
        self._t_host = time.perf_counter()

    def micro(self, batch: dict, wait_ms: float = 0.0) -> None:
        """Forward and backward of one micro-batch; ``wait_ms``: the host time just spent waiting for it."""
        t = time.perf_counter()
        pos, vkw = self._host_inputs(batch)
        prep_ms = (time.perf_counter() - t) * 1e3
        j = len(self._micro)
        self._micro.append({"wait_ms": float(wait_ms), "prep_ms": prep_ms, "mark": len(self.marks.marks)})
        self._losses.append(self._run_micro(batch, pos, vkw, last=j == self.n_micro - 1).detach())
        self.marks("bwd_end")

    def finish(self) -> dict[str, Any]:
        """Gradient sync and one optimizer step; syncs once and returns the step's figures."""
        try:
            if self.grad_sync is not None:
                self.grad_sync()
            self.marks("sync_end")
            self._optimizer_step()
            self.marks("opt_end")
        finally:
            self.marks.on = False
        marks = self.marks.resolve()
        loss = float(torch.stack(self._losses).float().mean().item()) if self._losses else float("nan")
        times, micro_ms, micro_decoder_ms = stage_times(marks, self._micro)
        plain = plain_layers(marks, self.deepstack_layers, self.decoder_layers)
        peak = torch.cuda.max_memory_allocated(self.device) if self.cuda else None
        return {
            "loss": loss,
            "times_ms": times,
            "micro_ms": micro_ms,
            "micro_decoder_ms": micro_decoder_ms,
            "plain_layers": plain,
            "data_wait_ms": times["data_wait"],
            "wall_ms": (time.perf_counter() - self._t_host) * 1e3,
            "peak_mem_bytes": peak,
            "timer": "cuda_events" if self.cuda else "perf_counter",
            "device": str(self.device),
        }

    def _optimizer_step(self) -> None:
        if isinstance(self.optimizer, MasterAdamW):
            self.optimizer.step(self.clip_grad)
        else:
            fill_missing_grads(self.trainable)
            if self.clip_grad:
                torch.nn.utils.clip_grad_norm_(self.trainable, self.clip_grad)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def warm(self, batch: dict) -> None:
        """Forward and backward on ``batch`` untimed, without the gradient sync or the optimizer step;
        gradients are dropped, so the weights stay as they were. Runs every kernel the batch's shapes need
        once (cuDNN/cuBLAS plans, allocator growth) before anything is timed. Call between global steps."""
        pos, vkw = self._host_inputs(batch)
        self.n_micro = 1
        self._run_micro(batch, pos, vkw, last=False)
        self.optimizer.zero_grad(set_to_none=True)
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def warm_vision(self, batch: dict) -> bool:
        """The vision tower alone on ``batch``'s images, forward and backward (into whatever of it trains),
        untimed; gradients dropped. Warms a new image grid or patch count (its kernels, plans and allocator
        sizes) when the batch's decoder shapes are warmed already: a micro-batch padded to ``seq_length`` costs
        a whole decoder forward and backward, its tower a fraction of that. The same compiled vision graphs
        and kernels as the step's (the host-computed segments included). Returns False, running nothing, where
        the batch has no images or the tower cannot run alone (an FSDP root: its unsharding hooks are the
        whole model's); the caller then warms the whole micro-batch."""
        vis = batch.get("visual_inputs")
        pv, grid = visual_field(vis, "pixel_values"), visual_field(vis, "image_grid_thw")
        inner: Any = getattr(self.model, "model", None)
        if self.fsdp or pv is None or grid is None or not hasattr(inner, "get_image_features"):
            return False
        _, vkw = self._host_inputs(batch)
        host = [vkw[k].tolist() for k in ("image_cu_seqlens", "image_cu_window_seqlens") if k in vkw]
        dev = self.device
        with kernels.packed(None, None), kernels.host_segments(*host):
            kw = {k: _to(v, dev) for k, v in vkw.items()}
            out = inner.get_image_features(
                _to(pv, dev), _to(grid, dev), return_dict=True, **kw
            )  # as the model calls it
            parts = [*_tensors(getattr(out, "pooler_output", out)), *_tensors(getattr(out, "deepstack_features", None))]
            total = torch.stack([t.float().sum() for t in parts]).sum()
            if total.requires_grad:  # a frozen tower and projection: forward only, as in the step
                total.backward()
        self.optimizer.zero_grad(set_to_none=True)
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return True

    def __call__(self, batch: dict) -> dict[str, Any]:
        """One global step of one micro-batch."""
        self.begin(1)
        self.micro(batch)
        return self.finish()


def train_step(model, batch: dict, optimizer: torch.optim.Optimizer | None = None, **kwargs) -> dict[str, Any]:
    """One-off convenience: a ``TrainStep`` around ``model`` (and ``optimizer``), one call, hooks removed.
    A new AdamW is made when ``optimizer`` is None, so use ``TrainStep`` for more than one step."""
    with TrainStep(model, optimizer, **kwargs) as step:
        return step(batch)
