"""LoRA adapters on the reference model, as Megatron Bridge's ``LoRA`` puts them on its own model: ``apply_lora``.

Bridge matches Megatron's module names (``vlmdata.audit.settings.peft``); on the transformers model the same layers are:

=============== ================================================================== ===============================
Bridge name     Qwen3-VL(-MoE) / Qwen2.5-VL decoder                                Qwen3-VL vision tower
=============== ================================================================== ===============================
``linear_qkv``  ``q_proj``, ``k_proj``, ``v_proj``: one adapter of the fused QKV    ``blocks[i].attn.qkv``
                (one A, its B split over the three outputs)
``linear_proj`` ``o_proj``                                                          ``blocks[i].attn.proj``
``linear_fc1``  dense: ``gate_proj`` + ``up_proj`` (one adapter, B split); MoE: the ``mlp.linear_fc1`` of every
                experts' ``gate_up_proj``, one adapter shared by a layer's experts  block, the merger and the
                (``share_expert_adapters``) applied to every routed token copy      DeepStack mergers
``linear_fc2``  dense: ``down_proj``; MoE: the experts' ``down_proj``, shared       ``mlp.linear_fc2``, the same
=============== ================================================================== ===============================

Qwen2.5-VL's vision tower is transformers' own module in Bridge (``qwen25_vl_provider``), whose names (``qkv``,
``gate_proj``) match no Megatron name: Bridge adapts only its decoder, and so does ``apply_lora``. The router
and the output layer are never adapted (Bridge's defaults).

An adapted layer computes ``base(x) + (alpha / dim) * B(A(dropout(x)))`` with A ``in -> r`` (xavier) and B ``r ->
out`` (zero), r = ``dim`` (expert adapters: ``PeftSpec.expert_dim``). Every base weight is frozen (``VLMLoRA``:
the parts its flags freeze), every adapter parameter trains (``ADAPTER_ATTR`` marks them: freezing a part later
leaves its adapters trainable, as Bridge adds them after the provider's freeze). A fused adapter computes its
``A x`` once per output it feeds (3 for QKV, 2 for gate/up): its parameters are Bridge's exactly, its FLOPs a
fraction of a percent more. The MoE experts run transformers' grouped-GEMM path with the two adapter terms added
(``_experts_forward``).
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlmdata.audit.settings.model_config import ADAPTED_TOWERS

__all__ = ["LoRALinear", "apply_lora", "ADAPTER_ATTR", "adapter_params"]

ADAPTER_ATTR = "_vlmdata_adapter"


def _mark(p: nn.Parameter) -> nn.Parameter:
    setattr(p, ADAPTER_ATTR, True)
    return p


def _a(r: int, n_in: int, like: torch.Tensor) -> nn.Parameter:
    a = torch.empty(r, n_in, device=like.device, dtype=like.dtype)
    nn.init.xavier_normal_(a)
    return _mark(nn.Parameter(a))


def _b(n_out: int, r: int, like: torch.Tensor) -> nn.Parameter:
    return _mark(nn.Parameter(torch.zeros(n_out, r, device=like.device, dtype=like.dtype)))


class LoRALinear(nn.Module):
    """``base(x) + scale * B(A(dropout(x)))``; ``lora_A`` may be shared with the other outputs of a fused layer."""

    def __init__(self, base: nn.Linear, lora_A: nn.Parameter, lora_B: nn.Parameter, scale: float, dropout: float):
        super().__init__()
        self.base, self.lora_A, self.lora_B, self.scale = base, lora_A, lora_B, scale
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(x) if self.dropout is not None else x
        return self.base(x) + self.scale * F.linear(F.linear(h, self.lora_A), self.lora_B)


def _adapt(parent: Any, names: tuple[str, ...], r: int, scale: float, dropout: float) -> int:
    """One adapter over the linears ``names`` of ``parent`` (a fused layer when several: one A, B split);
    returns its parameter count."""
    bases = [getattr(parent, n) for n in names]
    w = bases[0].weight
    a = _a(r, bases[0].in_features, w)
    count = a.numel()
    for name, base in zip(names, bases):
        b = _b(base.out_features, r, w)
        count += b.numel()
        setattr(parent, name, LoRALinear(base, a, b, scale, dropout))
    return count


def _experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
    """transformers' grouped-GEMM experts forward (``integrations.moe.grouped_mm_experts_forward``, Qwen3-VL-MoE's
    layout: gated, no bias, no expert parallelism) with the shared adapters of ``linear_fc1`` and ``linear_fc2``
    added on every routed token copy, as Bridge's ``LoRALinear`` on a grouped expert linear."""
    from transformers.integrations.moe import _grouped_linear  # the kernel the base path runs

    k = top_k_index.size(-1)
    n_tokens, hidden = hidden_states.size(0), hidden_states.size(-1)
    weights, expert_ids = top_k_weights.reshape(-1), top_k_index.reshape(-1)
    expert_ids_g, perm = torch.sort(expert_ids)
    x = hidden_states[perm // k]
    counts_in = expert_ids_g.float() if hidden_states.device.type in ("cpu", "mps") else expert_ids_g.int()
    per_expert = torch.histc(counts_in, bins=self.num_experts, min=0, max=self.num_experts - 1)
    offsets = torch.cumsum(per_expert, dim=0, dtype=torch.int32)
    up = _grouped_linear(x, self.gate_up_proj, offsets, is_transposed=self.is_transposed)
    if self.lora_fc1 is not None:
        up = up + self.lora_fc1(x)
    h = self._apply_gate(up)
    out = _grouped_linear(h, self.down_proj, offsets, is_transposed=self.is_transposed)
    if self.lora_fc2 is not None:
        out = out + self.lora_fc2(h)
    out = out * weights[perm].unsqueeze(-1)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.size(0), device=perm.device)
    return out[inv].view(n_tokens, k, hidden).sum(dim=1).to(hidden_states.dtype)


class _Adapter(nn.Module):
    """A stand-alone adapter ``scale * B(A(dropout(x)))`` (the experts' shared ones)."""

    def __init__(self, n_in: int, n_out: int, r: int, like: torch.Tensor, scale: float, dropout: float):
        super().__init__()
        self.lora_A, self.lora_B, self.scale = _a(r, n_in, like), _b(n_out, r, like), scale
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(x) if self.dropout is not None else x
        return self.scale * F.linear(F.linear(h, self.lora_A), self.lora_B)


def _adapt_experts(experts: Any, targets: set[str], r: int, scale: float, dropout: float) -> int:
    if getattr(experts, "is_transposed", False) or getattr(experts, "has_bias", False):
        raise NotImplementedError("LoRA on transposed or biased expert weights")
    e, two_f, h = experts.gate_up_proj.shape
    w = experts.gate_up_proj
    experts.lora_fc1 = _Adapter(h, two_f, r, w, scale, dropout) if "linear_fc1" in targets else None
    experts.lora_fc2 = _Adapter(two_f // 2, h, r, w, scale, dropout) if "linear_fc2" in targets else None
    experts.forward = types.MethodType(_experts_forward, experts)
    return sum(p.numel() for m in (experts.lora_fc1, experts.lora_fc2) if m is not None for p in m.parameters())


def _decoder(model: Any, targets: set[str], spec: Any, r_expert: int) -> dict[str, int]:
    counts = {"decoder": 0, "experts": 0}
    r, scale, drop = spec.dim, spec.scale, spec.dropout
    for layer in model.model.language_model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if "linear_qkv" in targets:
            counts["decoder"] += _adapt(attn, ("q_proj", "k_proj", "v_proj"), r, scale, drop)
        if "linear_proj" in targets:
            counts["decoder"] += _adapt(attn, ("o_proj",), r, scale, drop)
        if hasattr(mlp, "experts"):
            counts["experts"] += _adapt_experts(mlp.experts, targets, r_expert, spec.alpha / r_expert, drop)
            continue
        if "linear_fc1" in targets:
            counts["decoder"] += _adapt(mlp, ("gate_proj", "up_proj"), r, scale, drop)
        if "linear_fc2" in targets:
            counts["decoder"] += _adapt(mlp, ("down_proj",), r, scale, drop)
    return counts


def _vision(model: Any, targets: set[str], spec: Any) -> int:
    vis = model.model.visual
    if model.config.model_type not in ADAPTED_TOWERS:  # Qwen2.5-VL: transformers' tower in Bridge, not adapted
        return 0
    r, scale, drop, n = spec.dim, spec.scale, spec.dropout, 0
    for block in vis.blocks:
        for target, parent, name in (
            ("linear_qkv", block.attn, "qkv"),
            ("linear_proj", block.attn, "proj"),
            ("linear_fc1", block.mlp, "linear_fc1"),
            ("linear_fc2", block.mlp, "linear_fc2"),
        ):
            if target in targets:
                n += _adapt(parent, (name,), r, scale, drop)
    for merger in [vis.merger, *vis.deepstack_merger_list]:
        for name in ("linear_fc1", "linear_fc2"):
            if name in targets:
                n += _adapt(merger, (name,), r, scale, drop)
    return n


def adapter_params(model: nn.Module) -> list[nn.Parameter]:
    """The adapter parameters of ``model`` (each once)."""
    seen, out = set(), []
    for p in model.parameters():
        if getattr(p, ADAPTER_ATTR, False) and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def apply_lora(model: Any, spec: Any) -> dict[str, int]:
    """Freeze the base weights (``LoRA``; a ``VLMLoRA``'s freezing is the caller's: ``spec.freeze``) and add LoRA
    adapters as Bridge does (module docstring).

    Args:
        model: the reference model (``vlmdata.audit.workload.model.build_model``).
        spec: a ``vlmdata.audit.settings.peft.PeftSpec``.

    Returns:
        Adapter parameters by part: ``decoder``, ``experts``, ``vision`` and ``total``.
    """
    if spec.freeze is None:  # LoRA: every base weight frozen (PEFT.freeze_model); VLMLoRA's: the caller's
        model.requires_grad_(False)
    targets = set(spec.target_modules)
    top_k = getattr(model.config.text_config, "num_experts_per_tok", None)
    counts = _decoder(model, targets, spec, spec.expert_dim(top_k))
    counts["vision"] = _vision(model, targets, spec)
    counts["total"] = sum(counts.values())
    return counts
