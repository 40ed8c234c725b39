"""One timed training step of the reference model on a Bridge-format batch.

Batch (REFERENCE.md section 3): ``input_ids``/``labels`` int64 [B,S] (labels already shifted,
-100 ignored), ``loss_mask`` float32 [B,S], ``position_ids`` [B,S], optional ``attention_mask``,
``visual_inputs`` (dict or object) with ``pixel_values`` float32 [sum patches, 1536] and
``image_grid_thw`` int64 [n_images, 3]; text-only batches have ``pixel_values`` None.

Stages, in order (each a contiguous interval, so they sum to ``total``):

``prep``           host: batch checks and the MRoPE position ids (``get_rope_index`` on CPU)
``h2d``            host-to-device copy of every batch tensor
``forward_other``  token embedding, splitting/scattering image features into the sequence
``vision``         vision tower: patch embed, position embeddings, ViT blocks
``projector``      merger + DeepStack mergers (they run interleaved with the blocks)
``lm_forward``     decoder layers (with DeepStack additions) and final norm
``lm_head_loss``   lm_head (over all tokens, or loss tokens only) and the masked-mean cross entropy
``backward``       the whole backward pass (one block: vision and decoder are not split)
``optimizer``      (fp32 master gradients,) gradient clipping, AdamW step, zero_grad

Timing: forward hooks on ``model.model.visual``, its mergers, ``model.model.language_model``
and ``lm_head`` place marks.  On CUDA a mark is a ``torch.cuda.Event`` recorded on the current
stream (no sync); the only sync this module adds is one ``torch.cuda.synchronize()`` after the
optimizer, then intervals are read with ``elapsed_time``.  Event intervals measure the GPU
stream's timeline, so host stalls (launch overhead, syncs) that starve the GPU count in the
stage where they happen.  Note that transformers' own code syncs inside the forward (the
vision tower's ``grid_thw.tolist()``, the per-image ``split`` in SDPA vision attention once per
block, ``split_sizes.tolist()`` when splitting image features); those belong to the workload.
On CPU, marks are ``time.perf_counter()``.

MRoPE: transformers' Qwen3-VL expands 2-D ``position_ids`` to the same value on the t/h/w
axes, i.e. plain 1-D RoPE.  Like Bridge's Qwen3-VL model, this step ignores the batch's
``position_ids`` when images are present and computes the 3-D MRoPE ids from ``input_ids`` and
``image_grid_thw`` (``model.model.get_rope_index``) on the host, in ``prep``.  Text-only batches
use the batch's ``position_ids`` as given.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import torch
import torch.nn.functional as F

from vlmdata.audit.model import VIDEO_TOKEN_ID
from vlmdata.errors import VlmdataError

STAGES = ("prep", "h2d", "forward_other", "vision", "projector", "lm_forward", "lm_head_loss", "backward", "optimizer")


class ImagePadMismatch(VlmdataError, ValueError):
    """``input_ids`` do not hold exactly t*h*w/4 ``<|image_pad|>`` tokens for each image."""


def _get(obj, key) -> Any:
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def check_batch(batch: dict, config) -> None:
    """Raise ``ImagePadMismatch``/``ValueError`` if the batch cannot run on the model.

    Each image needs one contiguous run of exactly ``t*(h/2)*(w/2)`` ``<|image_pad|>`` tokens
    (``image_grid_thw`` = (t, h, w) in 16-px patches), runs taken in row-major order over the
    batch, as Qwen-VL processors expand every image placeholder (REFERENCE.md section 6).
    """
    ids = batch["input_ids"]
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be [B,S], got {tuple(ids.shape)}")
    for k in ("labels", "loss_mask"):
        if batch.get(k) is not None and tuple(batch[k].shape) != tuple(ids.shape):
            raise ValueError(f"{k} shape {tuple(batch[k].shape)} != input_ids shape {tuple(ids.shape)}")
    vis = batch.get("visual_inputs")
    pv, grid = _get(vis, "pixel_values"), _get(vis, "image_grid_thw")
    img = int(config.image_token_id)
    is_img = ids == img
    if (ids == VIDEO_TOKEN_ID).any():
        raise ValueError("video tokens are not supported by the reference step")
    if pv is None:
        if is_img.any():
            raise ImagePadMismatch(f"batch has {int(is_img.sum())} <|image_pad|> ({img}) tokens but no pixel_values")
        return
    vc = config.vision_config
    width = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    m = vc.spatial_merge_size
    if grid is None or grid.ndim != 2 or grid.shape[1] != 3:
        raise ValueError("visual_inputs.image_grid_thw must be int64 [n_images, 3] when pixel_values is given")
    n_patch = int(grid.prod(-1).sum())
    if tuple(pv.shape) != (n_patch, width):
        raise ValueError(f"pixel_values shape {tuple(pv.shape)} != (sum t*h*w = {n_patch}, {width})")
    if ((grid[:, 1:] % m) != 0).any():
        raise ValueError(f"image grid h and w must be multiples of spatial_merge_size {m}: {grid.tolist()}")
    need = (grid.prod(-1) // (m * m)).tolist()
    runs = []  # (row, start, length) of each contiguous image_pad run
    for b, row in enumerate(is_img.to(torch.int8)):
        edges = torch.diff(row, prepend=row.new_zeros(1), append=row.new_zeros(1)).nonzero().flatten().tolist()
        runs += [(b, s, e - s) for s, e in zip(edges[0::2], edges[1::2])]
    if len(runs) != len(need) or any(r[2] != n for r, n in zip(runs, need)):
        detail = "; ".join(
            f"image {i}: grid {tuple(grid[i].tolist())} needs {n}"
            + (f", row {runs[i][0]} pos {runs[i][1]} has {runs[i][2]}" if i < len(runs) else ", no run")
            for i, n in enumerate(need)
        )
        extra = f"; {len(runs) - len(need)} extra run(s)" if len(runs) > len(need) else ""
        raise ImagePadMismatch(
            f"input_ids must hold one run of t*(h/{m})*(w/{m}) <|image_pad|> ({img}) tokens per image, "
            f"in image order: found {len(runs)} runs {[r[2] for r in runs]} for {len(need)} images "
            f"needing {need} ({detail}{extra})"
        )


def mrope_position_ids(model, batch: dict) -> torch.Tensor | None:
    """Position ids to pass to the model: [3,B,S] MRoPE ids when images are present (computed
    from input_ids and grids on the host), else the batch's ``position_ids`` (or None)."""
    vis = batch.get("visual_inputs")
    grid = _get(vis, "image_grid_thw")
    if _get(vis, "pixel_values") is None:
        return batch.get("position_ids")
    ids = batch["input_ids"].cpu()
    am = batch.get("attention_mask")
    kw = {"image_grid_thw": grid.cpu(), "attention_mask": None if am is None else am.cpu()}
    if "mm_token_type_ids" in inspect.signature(model.model.get_rope_index).parameters:
        kw["mm_token_type_ids"] = (ids == model.config.image_token_id).to(torch.int32)  # transformers >= 5.2x
    pos, _ = model.model.get_rope_index(ids, **kw)
    return pos


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

    def forward(self, ids, labels, lmask, am, pos, pv, grid):
        hidden = self.model.model(
            input_ids=ids,
            attention_mask=am,
            position_ids=pos,
            pixel_values=pv,
            image_grid_thw=grid if pv is not None else None,
            use_cache=False,
        ).last_hidden_state
        if self.logits == "loss":  # boolean indexing: a device sync on CUDA
            sel = lmask > 0
            hidden, labels, lmask = hidden[sel], labels[sel], lmask[sel]
        return masked_lm_loss(self.model.lm_head(hidden), labels, lmask)


class MasterAdamW:
    """AdamW on fp32 master copies of low-precision (bf16) parameters, Megatron-style.

    ``step`` casts the bf16 gradients to fp32, optionally clips them, steps AdamW on the
    masters and copies the result back into the bf16 parameters.  Memory per parameter:
    4 (master) + 8 (moments) + 4 (fp32 gradients while stepping).
    """

    def __init__(self, params, lr: float = 1e-4, weight_decay: float = 0.0, fused: bool | None = None):
        self.params = [p for p in params if p.requires_grad]
        self.master = [p.detach().float().clone() for p in self.params]
        self.optimizer = torch.optim.AdamW(self.master, lr=lr, weight_decay=weight_decay, fused=fused)

    def step(self, clip_grad: float | None = None) -> None:
        for p, m in zip(self.params, self.master):
            m.grad = None if p.grad is None else p.grad.float()
        if clip_grad:
            torch.nn.utils.clip_grad_norm_(self.master, clip_grad)
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.master)  # pyright: ignore[reportPrivateImportUsage]  # public op, not in torch's __all__

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, m in zip(self.params, self.master):
            p.grad = m.grad = None


class TrainStep:
    """Callable training step with stage timing. ``TrainStep(model)(batch) -> dict``.

    Default optimizer: AdamW (fused on CUDA) for fp32 weights; for bf16 weights
    ``MasterAdamW`` (fp32 masters) when ``master_weights`` (default: the preset's
    ``model.vlmdata_master_weights``), else AdamW with bf16 moments.  No autocast is used:
    CUDA runs bf16 weights (see ``build_model``), CPU fp32.
    ``logits="all"`` runs lm_head on every token like Bridge/Megatron; ``"loss"`` only on
    tokens with ``loss_mask > 0`` (a cheaper variant, used by the CPU tests: with a 151,936-row
    vocabulary the lm_head and loss dominate a tiny model's step).
    The returned dict has ``loss`` (float), ``times_ms`` (one key per stage in ``STAGES`` plus
    ``total``), ``wall_ms`` (host clock over the whole call), ``peak_mem_bytes`` (CUDA max
    allocated since the last ``reset_peak_memory``, None on CPU), ``timer`` and ``device``.
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
        after_backward=None,
        forward_module: LossForward | None = None,
    ):
        p = next(model.parameters())
        self.after_backward = after_backward  # e.g. the data-parallel gradient all-reduce (timed in backward)
        self.model, self.device = model, p.device
        self.cuda = self.device.type == "cuda"
        if master_weights is None:
            master_weights = getattr(model, "vlmdata_master_weights", True)
        fused = True if self.cuda else None
        if optimizer is None and p.dtype != torch.float32 and master_weights:
            optimizer = MasterAdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=fused)
        elif optimizer is None:
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=fused)
        if logits not in ("all", "loss"):
            raise ValueError(f"logits must be 'all' or 'loss', got {logits!r}")
        self.optimizer, self.clip_grad, self.check, self.logits = optimizer, clip_grad, check, logits
        self.forward_module = forward_module or LossForward(model, logits)  # FSDP passes its sharded root
        self.marks = _Marks(self.cuda)
        vis = model.model.visual
        pre = lambda name: lambda mod, args: self.marks(name)  # noqa: E731
        post = lambda name: lambda mod, args, out: self.marks(name)  # noqa: E731
        self._hooks = [
            vis.register_forward_pre_hook(pre("vision_start")),
            vis.register_forward_hook(post("vision_end")),
            model.model.language_model.register_forward_pre_hook(pre("lm_start")),
            model.lm_head.register_forward_pre_hook(pre("head_start")),
        ]
        for merger in [vis.merger, *vis.deepstack_merger_list]:
            self._hooks += [
                merger.register_forward_pre_hook(pre("proj_start")),
                merger.register_forward_hook(post("proj_end")),
            ]

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

    def _forward_loss(self, batch: dict, pos) -> torch.Tensor:
        """h2d copies, the model forward and the masked loss (marks placed when timing is on)."""
        dev = self.device
        self.marks("start")
        vis = batch.get("visual_inputs")
        ids, labels, lmask = (_to(batch[k], dev) for k in ("input_ids", "labels", "loss_mask"))
        am, pos = _to(batch.get("attention_mask"), dev), _to(pos, dev)
        pv, grid = _to(_get(vis, "pixel_values"), dev), _to(_get(vis, "image_grid_thw"), dev)
        self.marks("h2d_end")
        loss = self.forward_module(ids, labels, lmask, am, pos, pv, grid)
        self.marks("fwd_end")
        return loss

    def warm(self, batch: dict) -> None:
        """Forward and backward on ``batch`` untimed, without the gradient sync (``after_backward``) or the
        optimizer step; gradients are dropped, so the weights stay as they were. Runs every kernel the
        batch's shapes need once (cuDNN/cuBLAS plans, allocator growth) before anything is timed."""
        if self.check:
            check_batch(batch, self.model.config)
        loss = self._forward_loss(batch, mrope_position_ids(self.model, batch))
        loss.backward()
        self.optimizer.zero_grad(set_to_none=True)
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def __call__(self, batch: dict) -> dict[str, Any]:
        model, dev = self.model, self.device
        t_host = time.perf_counter()
        if self.check:
            check_batch(batch, model.config)
        pos = mrope_position_ids(model, batch)
        prep_ms = (time.perf_counter() - t_host) * 1e3

        self.marks.marks, self.marks.on = [], True
        try:
            loss = self._forward_loss(batch, pos)
            loss.backward()
            if self.after_backward is not None:
                self.after_backward()
            self.marks("bwd_end")
            if isinstance(self.optimizer, MasterAdamW):
                self.optimizer.step(self.clip_grad)
            else:
                if self.clip_grad:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip_grad)
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.marks("opt_end")
        finally:
            self.marks.on = False
        marks = self.marks.resolve()
        loss_value = float(loss.detach().float().item())
        wall_ms = (time.perf_counter() - t_host) * 1e3
        times = _split(marks)
        times["prep"] = prep_ms
        times["total"] = prep_ms + dict(marks)["opt_end"]
        peak = torch.cuda.max_memory_allocated(dev) if self.cuda else None
        return {
            "loss": loss_value,
            "times_ms": {k: times[k] for k in (*STAGES, "total")},
            "wall_ms": wall_ms,
            "peak_mem_bytes": peak,
            "timer": "cuda_events" if self.cuda else "perf_counter",
            "device": str(dev),
        }


def _split(marks: list[tuple[str, float]]) -> dict[str, float]:
    t = {}
    for name, ms in marks:
        t.setdefault(name, ms)  # first occurrence
    proj = 0.0
    start = None
    for name, ms in marks:
        if name == "proj_start":
            start = ms
        elif name == "proj_end" and start is not None:
            proj, start = proj + ms - start, None
    vis_total = t["vision_end"] - t["vision_start"] if "vision_start" in t else 0.0
    lm = t["head_start"] - t["lm_start"]
    head = t["fwd_end"] - t["head_start"]
    fwd = t["fwd_end"] - t["h2d_end"]
    return {
        "h2d": t["h2d_end"],
        "vision": vis_total - proj,
        "projector": proj,
        "lm_forward": lm,
        "lm_head_loss": head,
        "forward_other": fwd - vis_total - lm - head,
        "backward": t["bwd_end"] - t["fwd_end"],
        "optimizer": t["opt_end"] - t["bwd_end"],
    }


def train_step(model, batch: dict, optimizer: torch.optim.Optimizer | None = None, **kwargs) -> dict[str, Any]:
    """One-off convenience: a ``TrainStep`` around ``model`` (and ``optimizer``), one call, hooks removed.
    A new AdamW is made when ``optimizer`` is None, so use ``TrainStep`` for more than one step."""
    with TrainStep(model, optimizer, **kwargs) as step:
        return step(batch)
