"""A Megatron Bridge model section's values as untrusted input: ``check_bridge_fields`` runs
``model_checks.check_shape`` on the ``config.json`` the section describes (``bridge_model.config_dict``), every
field named by its YAML key after the file (``run_config.yaml: model.num_query_groups 3 must divide
model.num_attention_heads 32``), and lists the shape fields the section left out and a default filled in.
"""

from __future__ import annotations

from vlmdata.audit.settings.model_checks import check_shape, default_value

__all__ = ["BRIDGE_TEXT_NAMES", "bridge_label", "check_bridge_fields"]

# transformers' decoder names -> Megatron Bridge's (``model.<key>``); the vision tower's are model.vision_config.<key>
BRIDGE_TEXT_NAMES = {
    "num_hidden_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_query_groups",
    "head_dim": "kv_channels",
    "intermediate_size": "ffn_hidden_size",
    "vocab_size": "vocab_size",
    "num_experts": "num_moe_experts",
    "num_experts_per_tok": "moe_router_topk",
    "moe_intermediate_size": "moe_ffn_hidden_size",
}


def bridge_label(section: str, key: str) -> str:
    """A field's name in a Bridge YAML (``model.num_query_groups``, ``model.vision_config.depth``)."""
    if section == "text":
        head, _, rest = key.partition(".")
        return "model." + BRIDGE_TEXT_NAMES.get(head, head) + (f".{rest}" if rest else "")
    return f"model.vision_config.{key}" if section == "vision" else f"model.{key}"


def check_bridge_fields(fields: dict, config: dict, model_type: str, path: str, token_ids: dict[str, int]) -> list[str]:
    """``check_shape`` on the ``config.json`` a Bridge model section describes (``bridge_model.config_dict``),
    every field named by its YAML key (``model.num_query_groups``) after the file.

    Args:
        fields: ``BridgeRun.model_fields`` (what the file states).
        config: the config.json dict built from them, defaults filled in.
        model_type: the family.
        path: the YAML file.
        token_ids: the ids the loaders' tokenizer writes.

    Returns:
        The shape fields the section left out and a default filled, as ``"model.<key>=<value>"``.
    """
    text = dict(config.get("text_config") or config)
    text["head_dim"] = fields.get("kv_channels")  # not hidden // heads: that must divide (checked)
    vision = config["vision_config"]
    check_shape(text, vision, config, model_type, prefix=path, label=bridge_label, token_ids=token_ids)
    filled = [("text", k) for k, b in BRIDGE_TEXT_NAMES.items() if fields.get(b) is None and k in text]
    given = {k.removeprefix("vision_config.") for k, v in fields.items() if v is not None}
    filled += [("vision", k) for k in _BRIDGE_VISION_SHAPE if k in vision and k not in given]
    return [f"{bridge_label(s, k)}={default_value(text if s == 'text' else vision, k)}" for s, k in filled]


_BRIDGE_VISION_SHAPE = (
    "intermediate_size",
    "patch_size",
    "spatial_merge_size",
    "temporal_patch_size",
    "out_hidden_size",
    "num_position_embeddings",
    "deepstack_visual_indexes",
    "window_size",
    "fullatt_block_indexes",
)
