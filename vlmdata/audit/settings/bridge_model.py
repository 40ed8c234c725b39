"""The model a Megatron Bridge config names: its family from ``model._target_`` and its shape from the model
section (``shape_of_bridge``), when no ``config.json`` is given.

Bridge builds the model its provider class names, so the provider decides the family (``PROVIDERS``):
``Qwen25VLModelProvider`` -> Qwen2.5-VL (window attention in the vision tower, patch 14),
``Qwen3VLModelProvider`` -> Qwen3-VL (dense), ``Qwen3VLMoEModelProvider`` -> Qwen3-VL-MoE. Any other provider
is refused by name (``BridgeConfigError`` naming the file and ``model._target_``): the audit would otherwise
measure another model than the one the run trains. A hand-written YAML without ``_target_`` is read by its
fields (MoE when ``num_moe_experts`` is set, else Qwen3-VL).

The shape is the Hugging Face ``config.json`` the fields describe (``config_dict``), read by transformers as
``model_config.read_model_config`` reads a file; ``family_conflict`` says when a given ``config.json`` is
another family than the provider's (the config.json is measured: it was given explicitly; the plan says so). Light: transformers is imported only when a shape is built.
"""

from __future__ import annotations

from typing import Any

from vlmdata.audit.settings.bridge_checks import check_bridge_fields
from vlmdata.audit.settings.bridge_config import BridgeRun
from vlmdata.audit.settings.model_config import (
    FAMILIES,
    IMAGE_TOKEN_ID,
    TOKEN_IDS,
    VIDEO_TOKEN_ID,
    VISION_END_TOKEN_ID,
    VISION_START_TOKEN_ID,
    ModelConfigError,
    ModelShape,
)
from vlmdata.errors import BridgeConfigError

__all__ = ["PROVIDERS", "model_type_of", "shape_of_bridge", "config_dict", "family_conflict"]

# Bridge 0.6.2's provider classes (megatron.bridge.models.qwen_vl.*) -> the model_type of FAMILIES
PROVIDERS: dict[str, str] = {
    "Qwen25VLModelProvider": "qwen2_5_vl",
    "Qwen3VLModelProvider": "qwen3_vl",
    "Qwen3VLMoEModelProvider": "qwen3_vl_moe",
}
_NEED = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "vision_config.depth")


def model_type_of(bridge: BridgeRun) -> str | None:
    """The ``FAMILIES`` key ``model._target_`` names (None: the file has no target).

    Raises:
        BridgeConfigError: the provider is not one the audit reproduces (the message names the file and key).
    """
    target = bridge.model_target
    if not target:
        return None
    cls = target.rsplit(".", 1)[-1]
    if cls not in PROVIDERS:
        known = ", ".join(f"{c} ({FAMILIES[t][0]})" for c, t in PROVIDERS.items())
        raise BridgeConfigError(
            f"{bridge.path}: model._target_ is {target!r}, a model provider the audit does not reproduce; it "
            f"reproduces {known}",
            bridge.path,
            "model._target_",
        )
    return PROVIDERS[cls]


def family_conflict(bridge: BridgeRun, shape: ModelShape) -> str | None:
    """A sentence when the Bridge config's provider is another family than ``shape`` (a given ``config.json``)."""
    model_type = model_type_of(bridge)
    if model_type is None or model_type == shape.model_type:
        return None
    return (
        f"{bridge.path}: model._target_ is {bridge.model_target!r} ({FAMILIES[model_type][0]}) but the model config "
        f"{shape.name} is {shape.family}: the model config's model is measured"
    )


def _rope(model_type: str, head_dim: int) -> dict[str, Any]:
    half = head_dim // 2
    if model_type == "qwen2_5_vl":  # Qwen2.5-VL-7B: [16, 24, 24] of 64
        hw = (half * 24) // 64
        return {"rope_theta": 1_000_000.0, "rope_scaling": {"type": "mrope", "mrope_section": [half - 2 * hw, hw, hw]}}
    hw = (half * 20) // 64  # Qwen3-VL: [24, 20, 20] of 64, interleaved
    return {
        "rope_theta": 5_000_000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": [half - 2 * hw, hw, hw], "mrope_interleaved": True},
    }


def config_dict(fields: dict[str, Any], model_type: str) -> dict[str, Any]:
    """The Hugging Face ``config.json`` (as a dict) that Bridge's model fields describe for ``model_type``."""
    h, heads = fields["hidden_size"], fields["num_attention_heads"]
    head_dim = fields.get("kv_channels") or h // heads
    v = {k.removeprefix("vision_config."): x for k, x in fields.items() if k.startswith("vision_config.")}
    text: dict[str, Any] = {
        "hidden_size": h,
        "num_hidden_layers": fields["num_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": fields.get("num_query_groups") or heads,
        "head_dim": head_dim,
        "intermediate_size": fields.get("ffn_hidden_size") or 4 * h,
        "vocab_size": fields["vocab_size"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262_144 if model_type != "qwen2_5_vl" else 128_000,
        "attention_bias": False,
        **_rope(model_type, head_dim),
    }
    if model_type == "qwen3_vl_moe":
        text.update(
            num_experts=fields.get("num_moe_experts"),
            num_experts_per_tok=fields.get("moe_router_topk") or 1,
            moe_intermediate_size=fields.get("moe_ffn_hidden_size") or h,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    vision: dict[str, Any] = {
        "depth": v["depth"],
        **{k: v[k] for k in ("hidden_size", "intermediate_size", "num_heads") if v.get(k)},
        "patch_size": v.get("patch_size") or fields.get("patch_size") or (14 if model_type == "qwen2_5_vl" else 16),
        "spatial_merge_size": v.get("spatial_merge_size") or fields.get("spatial_merge_size") or 2,
        "temporal_patch_size": v.get("temporal_patch_size") or fields.get("temporal_patch_size") or 2,
        "out_hidden_size": v.get("out_hidden_size") or h,
        "in_channels": 3,
    }
    if model_type == "qwen2_5_vl":
        vision.update(
            hidden_act="silu",
            window_size=v.get("window_size") or 112,
            fullatt_block_indexes=list(v.get("fullatt_block_indexes") or []),
            tokens_per_second=2,
        )
    else:
        deepstack = v.get("deepstack_visual_indexes") or fields.get("deepstack_visual_indexes") or []
        vision.update(
            hidden_act="gelu_pytorch_tanh", deepstack_visual_indexes=list(deepstack), num_position_embeddings=2304
        )
    ids = {
        k: fields.get(k) or d
        for k, d in (
            ("image_token_id", IMAGE_TOKEN_ID),
            ("video_token_id", VIDEO_TOKEN_ID),
            ("vision_start_token_id", VISION_START_TOKEN_ID),
            ("vision_end_token_id", VISION_END_TOKEN_ID),
        )
    }
    tie = bool(fields.get("share_embeddings_and_output_weights"))
    if model_type == "qwen2_5_vl":  # the published layout: text fields at the top level
        return {"model_type": model_type, **text, "vision_config": vision, "tie_word_embeddings": tie, **ids}
    return {
        "model_type": model_type,
        "text_config": {**text, "tie_word_embeddings": tie},
        "vision_config": vision,
        "tie_word_embeddings": tie,
        **ids,
    }


def shape_of_bridge(bridge: BridgeRun) -> ModelShape:
    """The model a Bridge config describes: the family of ``model._target_`` (``model_type_of``; by its fields
    when absent) and the shape of its model section.

    Raises:
        BridgeConfigError: an unknown provider, or a provider whose family the fields contradict.
        ModelConfigError: the model section lacks a field the shape needs, or transformers refuses the values.
    """
    fields = bridge.model_fields or {}
    name = f"the model of {bridge.path}"
    missing = [k for k in _NEED if fields.get(k) is None]
    if missing:
        raise ModelConfigError(f"{name}: the model section lacks {', '.join(missing)}; give the model's config.json")
    model_type = model_type_of(bridge) or ("qwen3_vl_moe" if fields.get("num_moe_experts") else "qwen3_vl")
    if (model_type == "qwen3_vl_moe") != bool(fields.get("num_moe_experts")):
        has = "no" if model_type == "qwen3_vl_moe" else f"{fields.get('num_moe_experts')}"
        raise BridgeConfigError(
            f"{bridge.path}: model._target_ is {bridge.model_target!r} but model.num_moe_experts is {has}",
            bridge.path,
            "model.num_moe_experts",
        )
    config = config_dict(fields, model_type)
    defaults = check_bridge_fields(fields, config, model_type, bridge.path, TOKEN_IDS)  # every value, by YAML key
    from huggingface_hub.errors import StrictDataclassError  # transformers' own field validation
    from transformers import CONFIG_MAPPING  # heavy: only when a shape is built

    try:
        cfg = CONFIG_MAPPING[model_type].from_dict(config)
    except (TypeError, ValueError, KeyError, AttributeError, StrictDataclassError) as e:
        raise ModelConfigError(f"{name}: transformers cannot build the model from its fields ({e})") from None
    return ModelShape(name, model_type, cfg, True, tuple(defaults))
