"""The reference model's attention on the fastest kernels torch offers, without host round-trips.

What Bridge runs (REFERENCE.md section 11): the vision tower attends over all images of a micro-batch as
one packed sequence (Transformer Engine, variable-length), and the decoder runs causal flash attention.
transformers' SDPA path for the Qwen-VL vision tower instead splits the packed patches image by image in
every block (``lengths.tolist()``: a device sync per block) and runs one SDPA call per image. This module
registers one attention function, ``VARLEN`` ("vlmdata_flash_varlen"), in transformers'
``ALL_ATTENTION_FUNCTIONS``. Its name contains "flash", so the Qwen-VL vision attention takes its packed
(``cu_seqlens``) path, and:

- with ``cu_seq_lens_q`` (the vision tower's packed images, bidirectional, or a packed decoder
  micro-batch, causal): one variable-length flash attention call over the whole packed sequence
  (``torch.nn.attention.varlen.varlen_attn`` on CUDA); on CPU, or where no varlen kernel exists, one
  ``scaled_dot_product_attention`` call per segment (a correct, slower fallback, said in ``describe()``);
- otherwise (the padded decoder): ``scaled_dot_product_attention`` with ``is_causal`` and no mask, the
  flash backend on CUDA, as transformers' own "sdpa" does.

``vision_kwargs(model, grid_cpu)`` computes on the host, from the batch's CPU ``image_grid_thw``, what
the vision tower would otherwise compute on the device with ``.tolist()`` syncs (transformers >= 5.2x
accepts them precomputed as ``image_*`` keyword arguments: ``cu_seqlens``, ``max_seqlen``, the rotary
``position_ids``, the position-embedding interpolation taps, and for Qwen2.5-VL the window index). The
step copies them to the device with the batch.

The blocks through ``torch.compile`` live in ``vlmdata.audit.workload.compiled`` (``compile_blocks``, ``set_compiled``,
the recompile budget; not re-exported here: that made an import cycle); ``compile_counters()`` are dynamo's graph counts (the audit counts
graphs built inside timed steps). Inside a compiled block the segment lengths stay symbolic: ``max_len`` is
passed on as given (no ``int()``, which would make each value a new graph), and where no variable-length
kernel runs (CPU, fp32) the per-segment fallback is one opaque operator (``vlmdata::segment_attention``, as
torch's ``varlen_attn`` is one) instead of a Python loop over a device list that the graph would unroll.

A packed decoder batch (``seq_policy="pack"``: one row of several samples) passes its sample boundaries
through ``packed(cu_seqlens, max_len)``, a context the decoder attention reads; it is a plain module
global, not a contextvar, because activation recompute re-runs the forward on autograd's device thread.
A compiled decoder layer does not read it inside its graph: ``compiled`` passes it (``packed_now()``) as the
attention's own ``cu_seq_lens_q`` / ``max_length_q`` arguments.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F

VARLEN = "vlmdata_flash_varlen"

_PACKED: dict[str, Any] | None = None  # the decoder's packed sample boundaries for the current micro-batch
_SEGMENTS: dict[int, list[int]] = {}  # host copies of the vision tower's cu_seqlens, by their length
SEGMENT_MODES = ("varlen", "per_image")
_SEGMENT_MODE = "varlen"
_VARLEN_FN = None
_VARLEN_PARAMS: frozenset[str] = frozenset()


def _varlen_kernel():
    """torch's variable-length flash attention, or None (torch too old, or no such kernel)."""
    global _VARLEN_FN, _VARLEN_PARAMS
    if _VARLEN_FN is None:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            _VARLEN_FN = False
        else:
            _VARLEN_FN = varlen_attn
            _VARLEN_PARAMS = frozenset(inspect.signature(varlen_attn).parameters)
    return _VARLEN_FN or None


def kernel_name(device: torch.device | str) -> str:
    """The kernel packed attention runs on for ``device`` (for reports)."""
    dev = torch.device(device)
    if _SEGMENT_MODE == "per_image":
        return "vision: scaled_dot_product_attention per image (host-split, no sync); decoder: flash via SDPA"
    if dev.type == "cuda" and _varlen_kernel() is not None:
        return "torch.nn.attention.varlen.varlen_attn (flash, variable length)"
    return "scaled_dot_product_attention per segment (no variable-length kernel on this device)"


@contextlib.contextmanager
def packed(cu_seqlens: torch.Tensor | None, max_len: int | None):
    """Within the block, causal decoder attention respects these sample boundaries ([1, T] packed rows)."""
    global _PACKED
    before = _PACKED
    _PACKED = None if cu_seqlens is None else {"cu": cu_seqlens, "max": int(max_len or 0)}
    try:
        yield
    finally:
        _PACKED = before


def packed_now() -> dict[str, Any] | None:
    """The current micro-batch's packed decoder boundaries (``{"cu": tensor, "max": int}``) or None."""
    return _PACKED


def set_segment_mode(mode: str) -> None:
    """How the vision tower's packed images attend: "varlen" (one variable-length flash call over all of
    them) or "per_image" (one SDPA call per image, split by host-known lengths: no device sync; SDPA picks
    its backend per call, cuDNN on Hopper, which builds a plan per new length; run outside
    ``torch.compile``, a graph break around the attention call in a compiled block). On the H200 with the
    device's queue full, flash over the packed images is the fastest of torch 2.11's kernels at the tower's
    head dim of 72 (``bench/attention_kernels.py``; cuDNN's variable-length call computes wrong q/k
    gradients there)."""
    global _SEGMENT_MODE
    if mode not in SEGMENT_MODES:
        raise ValueError(f"segment mode must be one of {SEGMENT_MODES}, got {mode!r}")
    _SEGMENT_MODE = mode


def segment_mode() -> str:
    return _SEGMENT_MODE


@contextlib.contextmanager
def host_segments(*cu_lists: list[int]):
    """Within the block, packed attention whose boundaries match one of these host lists splits on the host."""
    global _SEGMENTS
    before = _SEGMENTS
    _SEGMENTS = {len(c): list(c) for c in cu_lists if c is not None}
    try:
        yield
    finally:
        _SEGMENTS = before


def _flag(cond) -> bool:
    """A plain bool from a shape comparison: under ``torch.compile`` a comparison of traced sizes is a SymBool,
    which SDPA's flag arguments do not take; an ``if`` on it specialises (a guard) and yields a bool."""
    return True if cond else False


def _int(n):
    """``n`` as an int without specialising a symbolic one (``int()`` of a traced size adds a guard on its value)."""
    return n if isinstance(n, (int, torch.SymInt)) else int(n)


def _per_segment(q, k, v, cu: list[int], causal: bool, scale: float | None) -> torch.Tensor:
    """[T, H, D] inputs -> [T, H, D]: one SDPA call per segment (CPU / fallback)."""
    outs = []
    for s, e in zip(cu[:-1], cu[1:]):
        if e <= s:
            continue
        qs, ks, vs = (x[s:e].transpose(0, 1).unsqueeze(0) for x in (q, k, v))
        o = F.scaled_dot_product_attention(
            qs, ks, vs, is_causal=causal, scale=scale, enable_gqa=_flag(ks.shape[1] != qs.shape[1])
        )
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs, 0) if outs else q.new_zeros(q.shape)


@torch.library.custom_op("vlmdata::segment_attention", mutates_args=())
def _segment_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int, causal: bool, scale: float | None
) -> torch.Tensor:  # torch.library maps ``int`` to SymInt: a symbolic max_len passes
    """``_per_segment`` as one operator, opaque to ``torch.compile`` (the fallback's path inside a compiled
    block: its loop over a device list would unroll into the graph, one graph per segment count); ``max_len``
    is unused, there for the same call as ``varlen_attn``'s."""
    return _per_segment(q, k, v, cu.tolist(), causal, scale)


@_segment_attention.register_fake
def _segment_attention_fake(q, k, v, cu, max_len, causal, scale):
    return torch.empty_like(q)


@torch.library.custom_op("vlmdata::segment_attention_backward", mutates_args=())
def _segment_attention_backward_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    grad: torch.Tensor,
    causal: bool,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of ``_segment_attention``, segment by segment (softmax attention's backward written out: an
    operator's body runs below autograd); one operator too, so that a compiled backward does not trace it."""
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    bounds = cu.tolist()
    rep = q.shape[1] // k.shape[1]
    for s, e in zip(bounds[:-1], bounds[1:]):
        if e > s:
            _segment_grads(q, k, v, grad, (s, e), rep, causal, scale, (dq, dk, dv))
    return dq, dk, dv


def _segment_grads(q, k, v, grad, span, rep: int, causal: bool, scale: float | None, out) -> None:
    """One segment's dq, dk, dv (written into ``out``) from [L, H, D] slices; grouped heads summed back."""
    s, e = span
    qs, gs = (x[s:e].transpose(0, 1).float() for x in (q, grad))
    ks, vs = (x[s:e].transpose(0, 1).float().repeat_interleave(rep, dim=0) for x in (k, v))
    c = scale if scale is not None else qs.shape[-1] ** -0.5
    scores = (qs @ ks.transpose(1, 2)) * c
    if causal:
        n = e - s
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = scores.softmax(-1)
    dp = gs @ vs.transpose(1, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * c
    heads = k.shape[1]
    out[0][s:e] = (ds @ ks).transpose(0, 1).to(q.dtype)
    out[1][s:e] = (ds.transpose(1, 2) @ qs).view(heads, rep, e - s, -1).sum(1).transpose(0, 1).to(k.dtype)
    out[2][s:e] = (p.transpose(1, 2) @ gs).view(heads, rep, e - s, -1).sum(1).transpose(0, 1).to(v.dtype)


@_segment_attention_backward_op.register_fake
def _segment_attention_backward_fake(q, k, v, cu, grad, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _segment_attention_setup(ctx, inputs, output) -> None:
    q, k, v, cu, _, causal, scale = inputs
    ctx.save_for_backward(q, k, v, cu)
    ctx.causal, ctx.scale = causal, scale


def _segment_attention_backward(ctx, grad):
    q, k, v, cu = ctx.saved_tensors
    dq, dk, dv = _segment_attention_backward_op(q, k, v, cu, grad, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None, None, None


_segment_attention.register_autograd(_segment_attention_backward, setup_context=_segment_attention_setup)


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_len: int | torch.SymInt,
    *,
    causal: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention within each segment of a packed sequence.

    Args:
        q, k, v: [T, H, D] (k and v may have fewer heads than q: grouped-query attention).
        cu_seqlens: int32 [N+1] segment boundaries on q's device.
        max_len: the longest segment (a host int, or a symbolic one inside a compiled block: no device sync).
        causal: causal within each segment (the decoder) or bidirectional (vision).
        scale: softmax scale (default 1/sqrt(D)).

    Returns:
        [T, H, D].
    """
    fn = _varlen_kernel()
    if not causal and _SEGMENT_MODE == "per_image":
        return _host_split(q, k, v, cu_seqlens, scale)
    if fn is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        kw: dict[str, Any] = {"scale": scale}
        if k.shape[1] != q.shape[1]:
            if "enable_gqa" in _VARLEN_PARAMS:
                kw["enable_gqa"] = True
            else:
                rep = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if causal:
            if "is_causal" in _VARLEN_PARAMS:
                kw["is_causal"] = True
            else:
                kw["window_size"] = (-1, 0)
        cu = cu_seqlens.to(torch.int32)
        m = cast(int, max_len)  # a SymInt inside a compiled block: the operator's schema takes SymInt
        out = fn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, m, m, **kw)
        return out[0] if isinstance(out, tuple) else out
    if torch.compiler.is_compiling():
        return _segment_attention(q, k, v, cu_seqlens, max_len, causal, scale)
    return _per_segment(q, k, v, cu_seqlens.tolist(), causal, scale)


def _host_split_eager(q, k, v, cu_seqlens: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Bidirectional per-image SDPA on the host-known boundaries (``host_segments``), else on the device's
    (one sync). Run eager (``_host_split``): its Python loop over images would specialise a compiled graph on
    every batch."""
    host = _SEGMENTS.get(int(cu_seqlens.shape[0]))
    return _per_segment(q, k, v, host if host is not None else cu_seqlens.tolist(), False, scale)


# cast: torch's stubs type ``disable``'s result as a one-argument callable
_host_split = cast(Callable[..., torch.Tensor], torch.compiler.disable(_host_split_eager))


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: [B, H, S, D] inputs -> ([B, S, H, D], None)."""
    cu = kwargs.get("cu_seq_lens_q")
    causal = bool(getattr(module, "is_causal", True))
    if cu is None and _PACKED is not None and causal and query.shape[0] == 1:
        cu, max_len = _PACKED["cu"], _PACKED["max"]
    else:
        max_len = kwargs.get("max_length_q")
    if cu is not None and query.shape[0] == 1:
        if max_len is None:  # not precomputed by the caller: one sync
            max_len = int((cu[1:] - cu[:-1]).max().item())
        q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))
        out = varlen_attention(q, k, v, cu, _int(max_len), causal=causal, scale=scaling)
        return out.unsqueeze(0), None
    if attention_mask is not None and attention_mask.ndim == 4:
        mask = attention_mask[:, :, :, : key.shape[-2]]
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, scale=scaling, enable_gqa=_flag(key.shape[1] != query.shape[1])
        )
    else:
        is_causal, gqa = _flag(causal and query.shape[2] > 1), _flag(key.shape[1] != query.shape[1])
        out = F.scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2).contiguous(), None


def _fused_rms_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm (fp32 statistics, output in the input dtype, times the weight) as one
    ``F.rms_norm`` call (torch's fused kernel) instead of about seven elementwise kernels."""
    if not _FUSED_NORM:
        return type(self).forward(self, hidden_states)
    eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
    return F.rms_norm(hidden_states, (hidden_states.shape[-1],), self.weight, eps)


_FUSED_NORM = True


def set_fused_norm(on: bool) -> None:
    """Whether ``fuse_rms_norm``'s patched modules use the fused kernel (for before/after measurements)."""
    global _FUSED_NORM
    _FUSED_NORM = bool(on)


def fuse_rms_norm(model) -> int:
    """Run every RMSNorm module of ``model`` (the decoder's layer norms, q/k norms, final norm) on torch's fused
    ``F.rms_norm``; returns how many were patched."""
    import types

    n = 0
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight"):
            module.forward = types.MethodType(_fused_rms_norm, module)
            n += 1
    return n


def compile_counters() -> dict[str, int]:
    """Dynamo's running totals: graphs compiled and frames it gave up on (the step counts their change)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover
        return {}
    return {
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


def register() -> str:
    """Register ``VARLEN`` with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN, attention_forward)
    _varlen_kernel()  # resolved now, not on a compiled block's first call (a guard on the lazy global)
    return VARLEN


def use_fast_attention(config) -> None:
    """Point a Qwen-VL config (and its vision and text sub-configs) at ``VARLEN``."""
    register()
    for c in (config, getattr(config, "vision_config", None), getattr(config, "text_config", None)):
        if c is not None:
            c._attn_implementation = VARLEN


def use_sdpa(config) -> None:
    """Point a Qwen-VL config back at transformers' own SDPA path (per-image vision attention)."""
    for c in (config, getattr(config, "vision_config", None), getattr(config, "text_config", None)):
        if c is not None:
            c._attn_implementation = "sdpa"


def vision_kwargs(visual, grid: torch.Tensor) -> dict[str, Any]:
    """What the vision tower ``visual`` computes from ``image_grid_thw`` with host syncs, computed on the host
    from the CPU grid instead (``image_*`` keyword arguments of the model's forward; ``max_seqlen`` values are
    ints, the tensors CPU tensors for the step to copy to the device)."""
    from transformers import vision_utils as vu

    grid = grid.to("cpu", torch.int64)
    merge = visual.spatial_merge_size
    cu = vu.get_vision_cu_seqlens(grid)
    out: dict[str, Any] = {
        "image_cu_seqlens": cu,
        "image_max_seqlen": int((cu[1:] - cu[:-1]).max()),
        "image_position_ids": vu.get_vision_position_ids(grid, merge),
    }
    if hasattr(visual, "window_size"):  # Qwen2.5-VL: windowed attention in most blocks
        window_index, cu_window = vu.get_vision_window_index(
            grid, spatial_merge_size=merge, window_size=visual.window_size, patch_size=visual.patch_size
        )
        out.update(
            image_window_index=window_index,
            image_cu_window_seqlens=cu_window,
            image_max_window_seqlen=int((cu_window[1:] - cu_window[:-1]).max()),
        )
    if hasattr(visual, "num_grid_per_side"):  # Qwen3-VL: the learned position grid resampled to each image
        idx, w = vu.get_vision_interpolation_indices_and_weights(
            grid,
            num_grid_per_side=visual.num_grid_per_side,
            mode=visual.interpolation_mode,
            align_corners=visual.interpolation_align_corners,
            spatial_merge_size=merge,
        )
        out.update(image_interp_indices=idx, image_interp_weights=w)
    return out
