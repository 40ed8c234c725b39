"""The reference model: a Qwen-VL model from transformers with random weights, built from a ``ModelShape``.

Nothing is downloaded: the model is built from a transformers config (``vlmdata.audit.settings.model_config``: a
preset, or the user's ``config.json``) and initialised randomly. It keeps the family's input contract
(Qwen3-VL: patch 16, temporal patch 2, spatial merge 2, so a ``pixel_values`` row is 3*2*16*16 = 1536 wide;
Qwen2.5-VL: patch 14, rows of 1176) and the full Qwen vocabulary.

Presets (``model_config.PRESETS``; ``docs/reference-workload.md`` has the parameter and memory table):

- ``tiny``: a training step well under a second on 2 CPU cores (tests).
- ``small``: a few seconds on CPU; a single-GPU smoke test.
- ``h200``: Qwen3-VL-30B-A3B's vision tower (27 x 1152, DeepStack at 8/16/24) and a decoder of the
  30B-A3B's width with 12 layers and 32 experts (top-8): 3.20B parameters, 1.84B active; bf16 weights with
  fp32 master weights, main gradients and AdamW moments.
- ``h200-large``: the same with 24 layers and 64 experts: 8.86B parameters, 2.52B active; bf16 weights and
  bf16 AdamW moments (fp32 masters would not fit).

``build_model(shape, ..., layers=, experts=)`` builds a *slice* (``ModelShape.sliced``) when the whole model
does not fit one GPU; ``attention="varlen"`` (default) runs attention on ``vlmdata.audit.workload.kernels``'
variable-length kernels, ``"sdpa"`` on transformers' own SDPA path (per-image vision attention).
"""

from __future__ import annotations

from typing import Any

import torch

from vlmdata.audit.settings.model_config import (  # noqa: F401  # re-exported: the model's token ids and presets
    ATTENTION,
    FAMILIES,
    IMAGE_TOKEN_ID,
    PAD_TOKEN_ID,
    PRESETS,
    QWEN3_VL_30B_TEXT,
    QWEN3_VL_30B_VISION,
    QWEN_VOCAB_SIZE,
    VIDEO_TOKEN_ID,
    VISION_END_TOKEN_ID,
    VISION_START_TOKEN_ID,
    ModelConfigError,
    ModelShape,
    build_config,
    preset_shape,
)
from vlmdata.audit.workload import kernels


def _shape(preset: str | ModelShape) -> ModelShape:
    return preset if isinstance(preset, ModelShape) else preset_shape(preset)


def build_model(
    preset: str | ModelShape = "tiny",
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    *,
    seed: int = 0,
    attention: str = "varlen",
    layers: int | None = None,
    experts: int | None = None,
):
    """Build the model (random weights) for a preset name or a ``ModelShape``.

    Args:
        preset: a preset name or a ``ModelShape``.
        device: where the modules are created (``"meta"`` counts parameters without memory).
        dtype: None: bf16 on CUDA (the step keeps fp32 master weights unless the shape says not), fp32
            elsewhere. Do not use fp32 weights with bf16 autocast on CUDA: transformers' grouped-GEMM experts
            are not autocast and would run in fp32.
        seed: the weights' seed.
        attention: "varlen" (``vlmdata.audit.workload.kernels``) or "sdpa" (transformers' own path).
        layers, experts: build a slice (None: the whole model; see ``ModelShape.sliced``).

    Returns:
        The model in train mode, with ``vlmdata_preset``, ``vlmdata_shape``, ``vlmdata_slice`` and
        ``vlmdata_master_weights`` attributes.
    """
    import transformers

    if attention not in ATTENTION:
        raise ModelConfigError(f"`attention` must be one of {', '.join(ATTENTION)}, got {attention!r}")
    shape = _shape(preset)
    cfg = shape.sliced(layers, experts)
    cfg._attn_implementation = "sdpa"  # switched after construction: transformers checks flash-named ones
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(seed)
    cls = getattr(transformers, FAMILIES[shape.model_type][2])
    with torch.device(device):
        model = cls(cfg)
    for param in model.parameters():  # parameters only: RoPE inv_freq buffers stay fp32
        param.data = param.data.to(dtype)
    model.train()
    if attention == "varlen":
        kernels.use_fast_attention(model.config)
        kernels.fuse_rms_norm(model)
    # nn.Module.__setattr__ takes any value
    model.vlmdata_preset = shape.name.removeprefix("preset ")  # pyright: ignore[reportArgumentType]
    model.vlmdata_shape = shape  # pyright: ignore[reportArgumentType]
    model.vlmdata_slice = {
        "layers": cfg.text_config.num_hidden_layers,
        "experts": getattr(cfg.text_config, "num_experts", None),
    }  # pyright: ignore[reportArgumentType]
    model.vlmdata_master_weights = shape.master_weights  # pyright: ignore[reportArgumentType]
    model.vlmdata_attention = attention  # pyright: ignore[reportArgumentType]
    return model


def part_params(shape: Any) -> dict[str, int]:
    """Parameters of the whole model (``ModelShape``) by the parts Bridge freezes, counted on the meta device:
    ``language`` (embedding, decoder, output layer), ``vision`` (the tower without its mergers), ``projection``
    (the merger and the DeepStack mergers)."""
    import transformers  # heavy: as build_model, only when a model is counted

    cfg = shape.sliced(None, None)
    with torch.device("meta"):
        model = getattr(transformers, FAMILIES[shape.model_type][2])(cfg)
    vis = model.model.visual
    projection = sum(_count(m) for m in [vis.merger, *getattr(vis, "deepstack_merger_list", [])])
    return {
        "language": _count(model.model.language_model) + _count(model.lm_head),
        "vision": _count(vis) - projection,
        "projection": projection,
    }


def state_bytes(n_params: int, dtype: torch.dtype, master_weights: bool = True) -> dict[str, int]:
    """Bytes of weights, gradients, fp32 master copies and main gradients, and AdamW moments for ``n_params``.

    fp32 weights: 4+4+0+8 = 16 B/param. bf16 with fp32 masters (Megatron's bf16 recipe): 2 (weights) + 2
    (bf16 gradients) + 4 (master) + 4 (fp32 main gradients) + 8 (moments) = 20 B/param. bf16 without
    masters: 2+2+0+4 = 8 B/param (AdamW moments in bf16).
    """
    w = torch.empty((), dtype=dtype).element_size()
    master = dtype != torch.float32 and master_weights
    out = {
        "weights": n_params * w,
        "grads": n_params * w,
        "master": n_params * 4 if master else 0,
        "main_grads": n_params * 4 if master else 0,
        "adam": n_params * (8 if master else 2 * w),
    }
    out["total"] = sum(out.values())
    return out


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _experts_params(model, trainable: bool = False) -> int:
    return sum(
        q.numel()
        for layer in model.model.language_model.layers
        if hasattr(layer.mlp, "experts")
        for q in layer.mlp.experts.parameters()
        if q.requires_grad or not trainable
    )


def model_summary(model) -> dict[str, Any]:
    """Parameter counts (total and active per token), memory of the training state, config.

    Active parameters count ``num_experts_per_tok`` of ``num_experts`` routed experts per MoE layer;
    embeddings and the vision tower count fully.
    """
    cfg = model.config
    tc, vc = cfg.text_config, cfg.vision_config
    total = _count(model)
    vis = model.model.visual
    vision = _count(vis)
    projector = _count(vis.merger) + _count(getattr(vis, "deepstack_merger_list", torch.nn.ModuleList()))
    experts = _experts_params(model)
    n_exp = getattr(tc, "num_experts", None)
    active = total - experts + (experts * tc.num_experts_per_tok // n_exp if n_exp else 0)
    embed = model.model.language_model.embed_tokens.weight.numel()
    p = next(model.parameters())
    master = getattr(model, "vlmdata_master_weights", True)
    shape = getattr(model, "vlmdata_shape", None)
    return {
        "preset": getattr(model, "vlmdata_preset", None),
        "shape": shape.describe() if shape is not None else None,
        "slice": getattr(model, "vlmdata_slice", None),
        "params_total": total,
        "params_active": active,
        "params_vision": vision - projector,
        "params_projector": projector,
        "params_text": total - vision,
        "params_embedding": embed,
        "params_lm_head": model.lm_head.weight.numel(),
        "params_experts": experts,
        "params_decoder_layer": _count(model.model.language_model.layers[0]),
        "params_trainable": sum(q.numel() for q in model.parameters() if q.requires_grad),
        "params_trainable_experts": _experts_params(model, trainable=True),
        "params_trainable_decoder_layer": sum(
            q.numel() for q in model.model.language_model.layers[0].parameters() if q.requires_grad
        ),
        "dtype": str(p.dtype).replace("torch.", ""),
        "master_weights": p.dtype != torch.float32 and master,
        "state_bytes": state_bytes(total, p.dtype, master),
        "config": {
            "vision": {
                k: getattr(vc, k, None)
                for k in (
                    "depth",
                    "hidden_size",
                    "intermediate_size",
                    "embed_dim",  # Qwen2-VL: the tower's width (its hidden_size is the merger's output)
                    "mlp_ratio",
                    "num_heads",
                    "patch_size",
                    "temporal_patch_size",
                    "spatial_merge_size",
                    "out_hidden_size",
                    "num_position_embeddings",
                )
            }
            | {"deepstack_visual_indexes": list(getattr(vc, "deepstack_visual_indexes", None) or [])},
            "text": {
                k: getattr(tc, k, None)
                for k in (
                    "vocab_size",
                    "hidden_size",
                    "intermediate_size",
                    "num_hidden_layers",
                    "num_attention_heads",
                    "num_key_value_heads",
                    "head_dim",
                    "num_experts",
                    "num_experts_per_tok",
                    "moe_intermediate_size",
                    "tie_word_embeddings",
                )
            },
            "image_token_id": cfg.image_token_id,
            "attention": getattr(model, "vlmdata_attention", None),
            "attn_implementation": cfg._attn_implementation,
            "experts_implementation": getattr(tc, "_experts_implementation", None),
        },
    }
