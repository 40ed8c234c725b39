"""A model's shape as untrusted input: every field the audit uses checked for type, value and bounds before
transformers or torch sees it (``check_shape``), and a run's parallel sizes checked against the model they
split (``check_parallel``).

The fields arrive by transformers' names in three mappings, ``text`` (the decoder: ``text_config``, or the top
level of a Qwen2-VL or Qwen2.5-VL ``config.json``), ``vision`` (``vision_config``) and ``top`` (the token ids), from a
``config.json`` (``model_config.read_model_config``) or from a Megatron Bridge YAML's model section
(``bridge_checks.check_bridge_fields``). ``label`` names a field as its source spells it
(``text_config.hidden_size``, ``model.num_query_groups``), so every ``ModelConfigError`` names the file and the
key. The rules:

- **Types**: sizes are integers (not booleans, not floats such as ``2.0`` or NaN, not strings), floats are
  finite numbers, flags booleans, lists lists of integers, sub-configs mappings; a part's ``dtype`` (or
  ``torch_dtype``) one transformers can build it under (``DTYPES``: float16, bfloat16, float32, float64).
- **Bounds** (before anything is allocated: transformers builds a list per decoder layer while reading a
  config): ``MAX_LAYERS`` decoder layers and vision blocks, ``MAX_EXPERTS`` experts, ``MAX_WIDTH`` hidden
  sizes, ``MAX_FFN`` MLP widths, ``MAX_HEADS`` heads, ``MAX_VOCAB`` vocabulary rows; every size >= 1.
- **Shapes the model can be built with** (Megatron and transformers): the key-value heads divide the
  attention heads; a head's width (``head_dim``, else hidden / heads, which must then divide) is even (RoPE),
  and the MRoPE sections sum to half of it; top-k within the experts; the vision width divides into heads of a
  multiple of 4 (its 2-D rotary embedding); the patch size is the family's (16 for Qwen3-VL, 14 for Qwen2-VL and
  Qwen2.5-VL: the loaders' processors cut those patches), temporal patch 2, spatial merge 2, 3 input channels; the
  vision output width is the decoder's hidden size (Qwen2-VL names the tower's width ``embed_dim`` and its output
  ``hidden_size``, its MLP ``embed_dim * mlp_ratio`` wide); DeepStack and full-attention indexes are blocks of the tower
  (DeepStack features enter at most as many decoder layers as there are); a Qwen2.5-VL window is a whole
  number of merged patches.
- **Token ids** (``image_token_id`` and the vision start / end and video ids) must be the Qwen tokenizer's, the
  ids the loaders write: another id would leave the model looking for image tokens that no batch holds. The
  vocabulary holds every id that tokenizer writes (``TOKENIZER_IDS``), and ``pad_token_id`` is one of its rows.
- **Defaults**: a missing required field (``REQUIRED``) is refused; a missing optional one takes the family's
  default, and ``check_shape`` returns those filled in (``name=value``) for the report's notes.

``check_parallel(text, tp=, ep=, experts=)`` applies Megatron's rules for splitting the model: TP divides the attention
heads and the key-value heads, EP divides the routed experts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from vlmdata.errors import VlmdataError

__all__ = [
    "ModelConfigError",
    "check_shape",
    "check_parallel",
    "shape_defaults_note",
    "family_defaults",
    "FAMILY_PATCH",
    "QWEN2_DECODERS",
    "MAX_LAYERS",
    "MAX_EXPERTS",
    "MAX_WIDTH",
    "MAX_FFN",
    "MAX_HEADS",
    "MAX_VOCAB",
]

MAX_LAYERS = 1024  # decoder layers or vision blocks (the largest public models have about 100)
MAX_EXPERTS = 4096  # routed experts per layer (public MoE models: up to 512)
MAX_WIDTH = 1 << 17  # hidden sizes
MAX_FFN = 1 << 20  # MLP and expert widths
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_VOCAB = 1 << 24
MAX_POSITIONS = 1 << 24
MAX_LIST = 1024  # entries of an index list (DeepStack, full-attention blocks, dense layers)

FAMILY_PATCH = {"qwen3_vl_moe": 16, "qwen3_vl": 16, "qwen2_5_vl": 14, "qwen2_vl": 14}  # the loaders' processors'
_CLASSES = {  # model_type -> transformers' (text, vision) config classes: the defaults of missing fields
    "qwen3_vl_moe": ("Qwen3VLMoeTextConfig", "Qwen3VLMoeVisionConfig"),
    "qwen3_vl": ("Qwen3VLTextConfig", "Qwen3VLVisionConfig"),
    "qwen2_5_vl": ("Qwen2_5_VLTextConfig", "Qwen2_5_VLVisionConfig"),
    "qwen2_vl": ("Qwen2VLTextConfig", "Qwen2VLVisionConfig"),
}
# the Qwen2 decoders: their published config.json holds the decoder's fields at the top level, and a head is
# hidden_size / num_attention_heads wide (no head_dim)
QWEN2_DECODERS = ("qwen2_5_vl", "qwen2_vl")
# the vision tower's (width, MLP width, output width) fields: Qwen2-VL's tower is embed_dim wide with an MLP of
# mlp_ratio times that, its hidden_size the merger's output (the decoder's width); the later families' below
TOWER_NAMES = {"qwen2_vl": ("embed_dim", "mlp_ratio", "hidden_size")}
TOWER_DEFAULT_NAMES = ("hidden_size", "intermediate_size", "out_hidden_size")
REQUIRED = {
    "text": ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"),
    "moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "vision": ("depth", "num_heads"),  # and the tower's width and output width (TOWER_NAMES)
}
_TEXT_INTS = {
    "vocab_size": MAX_VOCAB,
    "hidden_size": MAX_WIDTH,
    "num_hidden_layers": MAX_LAYERS,
    "num_attention_heads": MAX_HEADS,
    "num_key_value_heads": MAX_HEADS,
    "head_dim": MAX_HEAD_DIM,
    "intermediate_size": MAX_FFN,
    "max_position_embeddings": MAX_POSITIONS,
}
_MOE_INTS = {
    "num_experts": MAX_EXPERTS,
    "num_experts_per_tok": MAX_EXPERTS,
    "moe_intermediate_size": MAX_FFN,
    "decoder_sparse_step": MAX_LAYERS,
}
_VISION_INTS = {
    "depth": MAX_LAYERS,
    "hidden_size": MAX_WIDTH,
    "num_heads": MAX_HEADS,
    "intermediate_size": MAX_FFN,
    "out_hidden_size": MAX_WIDTH,
    "embed_dim": MAX_WIDTH,
    "mlp_ratio": 64,
    "patch_size": 1024,
    "spatial_merge_size": 64,
    "temporal_patch_size": 64,
    "in_channels": 64,
    "num_position_embeddings": MAX_POSITIONS,
    "window_size": 1 << 16,
    "tokens_per_second": 1 << 16,
}
_FLOATS = {  # name -> (lowest, highest, whether the lowest is allowed)
    "rms_norm_eps": (0.0, 1.0, False),
    "initializer_range": (0.0, 10.0, True),
    "attention_dropout": (0.0, 1.0, True),
    "router_aux_loss_coef": (0.0, 1e3, True),
    "rope_theta": (0.0, 1e12, False),
}
DTYPES = ("bfloat16", "float16", "float32", "float64", "half", "float", "double")  # torch's default dtypes
TOKENIZER_IDS = 151_669  # ids the loaders' Qwen tokenizer writes: 0..151,668 (special tokens such as <think>)
QWEN_VOCAB_SIZE = 151_936  # embedding rows of every Qwen-VL checkpoint (model_config re-exports it)
_BOOLS = ("tie_word_embeddings", "attention_bias", "use_cache", "norm_topk_prob", "use_sliding_window")
_OPTIONAL_SHAPE = {  # optional fields that change the model's shape: listed when a default fills them
    "text": ("num_key_value_heads", "head_dim", "intermediate_size"),
    "moe": ("decoder_sparse_step",),
    "vision": ("patch_size", "spatial_merge_size", "temporal_patch_size", "in_channels"),  # and the MLP width
    "qwen3": ("num_position_embeddings", "deepstack_visual_indexes"),
    "qwen2_5_vl": ("window_size", "fullatt_block_indexes"),
    "qwen2_vl": (),
}
ROPE_TYPES = ("default", "mrope")


class ModelConfigError(VlmdataError, ValueError):
    """A model config.json that cannot describe a supported Qwen-VL model."""


def family_defaults(model_type: str) -> tuple[dict, dict]:
    """transformers' defaults of the family's (text, vision) fields."""
    import transformers  # heavy: only a model config needs it

    out = []
    for name in _CLASSES[model_type]:
        fields = getattr(transformers, name).__dataclass_fields__
        out.append({k: f.default for k, f in fields.items() if f.default is not dataclasses.MISSING})
    return out[0], out[1]


class _Checker:
    def __init__(self, prefix: str, label: Callable[[str, str], str]):
        self.prefix, self.label = prefix, label

    def fail(self, section: str, key: str, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{self.prefix}: {self.label(section, key)} {problem}")

    def integer(self, section: str, key: str, value: Any, high: int, low: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(section, key, f"must be an integer, not {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(section, key, f"must be {low}..{high}, not {_short(value)}")
        return value

    def number(self, section: str, key: str, value: Any, spec: tuple[float, float, bool]) -> None:
        low, high, closed = spec
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(section, key, f"must be a finite number, not {_kind(value)}")
        if value > high or value < low or (value == low and not closed):
            raise self.fail(section, key, f"must be {'>=' if closed else '>'} {low:g} and <= {high:g}, not {value!r}")

    def int_list(self, section: str, key: str, value: Any, high: int) -> list[int]:
        if not isinstance(value, (list, tuple)) or len(value) > MAX_LIST:
            raise self.fail(section, key, f"must be a list of at most {MAX_LIST} integers, not {_kind(value)}")
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.fail(section, key, f"must be a list of integers; it holds {_kind(v)}")
            if not 0 <= v < high:
                raise self.fail(section, key, f"holds {_short(v)}, outside 0..{high - 1}")
        if len(set(value)) != len(value):
            raise self.fail(section, key, f"repeats an index ({list(value)})")
        return list(value)

    def fields(self, section: str, d: dict, ints: dict[str, int]) -> None:
        """Types and bounds of the present fields of one section."""
        for key, high in ints.items():
            if d.get(key) is not None:
                self.integer(section, key, d[key], high)
        for key, spec in _FLOATS.items():
            if d.get(key) is not None:
                self.number(section, key, d[key], spec)
        for key in _BOOLS:
            if d.get(key) is not None and not isinstance(d[key], bool):
                raise self.fail(section, key, f"must be true or false, not {_kind(d[key])}")
        act = d.get("hidden_act")
        if act is not None:
            from transformers.activations import ACT2FN  # heavy: only a model config needs it

            if not isinstance(act, str) or act not in ACT2FN:
                raise self.fail(section, "hidden_act", f"must be one of transformers' activations, not {_kind(act)}")
        for key in ("dtype", "torch_dtype"):  # transformers builds the part under it (set_default_dtype)
            if d.get(key) is not None and d[key] not in DTYPES:
                raise self.fail(section, key, f"must be one of {', '.join(DTYPES)}, not {_kind(d[key])}")


def check_shape(
    text: dict,
    vision: dict,
    top: dict,
    model_type: str,
    *,
    prefix: str,
    label: Callable[[str, str], str],
    token_ids: dict[str, int],
) -> list[str]:
    """Check a model's fields (module docstring) before transformers builds anything.

    Args:
        text, vision, top: the fields as given (transformers' names); ``top`` holds the token ids.
        model_type: a key of ``FAMILY_PATCH``.
        prefix: starts every message (the file).
        label: ``label(section, key)`` -> the field's name as the file spells it (sections "text", "vision",
            "top").
        token_ids: the ids the loaders' tokenizer writes (``image_token_id`` -> 151655, ...).

    Returns:
        The optional shape fields a default filled in, as ``"<label>=<value>"``.

    Raises:
        ModelConfigError: the first field that is missing, of the wrong type, out of bounds or impossible.
    """
    c = _Checker(prefix, label)
    for section, d in (("text", text), ("vision", vision)):
        if not isinstance(d, dict):
            raise c.fail(section, "", f"must be a mapping, not {_kind(d)}")
    moe = model_type == "qwen3_vl_moe"
    width, mlp, out = TOWER_NAMES.get(model_type, TOWER_DEFAULT_NAMES)
    for section, names in (("text", REQUIRED["text"]), ("vision", (*REQUIRED["vision"], width, out))):
        for key in names + (REQUIRED["moe"] if moe and section == "text" else ()):
            if (text if section == "text" else vision).get(key) is None:
                raise c.fail(section, key, "is missing: the model's shape cannot be known without it")
    c.fields("text", text, {**_TEXT_INTS, **(_MOE_INTS if moe else {})})
    c.fields("vision", vision, _VISION_INTS)
    for key, want in token_ids.items():
        if top.get(key) is not None and (isinstance(top[key], bool) or top[key] != want):
            raise c.fail(
                "top",
                key,
                f"is {_short(top[key])}, but the loaders' Qwen tokenizer writes {want} there: the model would look "
                "for tokens no batch holds; use the Qwen-VL tokenizer's id",
            )
    t_def, v_def = family_defaults(model_type)
    t, v = {**t_def, **given(text)}, {**v_def, **given(vision)}
    _text_relations(c, t, model_type)
    _vision_relations(c, v, t, model_type)
    filled = [("text", k) for k in _OPTIONAL_SHAPE["text"] + (_OPTIONAL_SHAPE["moe"] if moe else ())]
    fam = _OPTIONAL_SHAPE[model_type if model_type in QWEN2_DECODERS else "qwen3"]
    filled += [("vision", k) for k in (mlp, *_OPTIONAL_SHAPE["vision"], *fam)]
    return [
        f"{label(s, k)}={default_value(t if s == 'text' else v, k)}"
        for s, k in filled
        if (text if s == "text" else vision).get(k) is None and not (k == "head_dim" and model_type in QWEN2_DECODERS)
    ]


def given(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def default_value(d: dict, key: str):
    value = d.get(key)
    if key == "num_key_value_heads" and value is None:
        return d.get("num_attention_heads")
    if key == "head_dim" and not value:
        return d["hidden_size"] // d["num_attention_heads"]
    return list(value) if isinstance(value, tuple) else value


def head_width(t: dict, model_type: str) -> int | None:
    """The decoder's head width: ``head_dim`` (Qwen3 families), else hidden / heads (None: not whole)."""
    if model_type not in QWEN2_DECODERS and t.get("head_dim"):
        return t["head_dim"]
    return None if t["hidden_size"] % t["num_attention_heads"] else t["hidden_size"] // t["num_attention_heads"]


def _text_relations(c: _Checker, t: dict, model_type: str) -> None:
    vocab = t["vocab_size"]
    if vocab < TOKENIZER_IDS:
        raise c.fail(
            "text",
            "vocab_size",
            f"{vocab} is smaller than the loaders' Qwen tokenizer, whose ids reach {TOKENIZER_IDS - 1}: the embedding "
            f"would be indexed past its rows; use the checkpoint's vocab_size ({QWEN_VOCAB_SIZE})",
        )
    pad = t.get("pad_token_id")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < vocab):
        raise c.fail("text", "pad_token_id", f"must be an id of the vocabulary (0..{vocab - 1}), not {_short(pad)}")
    heads, kv = t["num_attention_heads"], t.get("num_key_value_heads") or t["num_attention_heads"]
    if heads % kv:
        raise c.fail(
            "text", "num_key_value_heads", f"{kv} must divide {c.label('text', 'num_attention_heads')} {heads}"
        )
    hd = head_width(t, model_type)
    if hd is None:
        raise c.fail(
            "text",
            "hidden_size",
            f"{t['hidden_size']} is not a multiple of {c.label('text', 'num_attention_heads')} {heads}",
        )
    if hd % 2:
        raise c.fail(
            "text",
            "head_dim" if t.get("head_dim") else "hidden_size",
            f"gives heads {hd} wide: RoPE needs an even width",
        )
    _rope(c, t, hd)
    layers = t["num_hidden_layers"]
    if model_type == "qwen3_vl_moe":
        if not 1 <= t["num_experts_per_tok"] <= t["num_experts"]:
            raise c.fail(
                "text", "num_experts_per_tok", f"{t['num_experts_per_tok']} must be 1..num_experts {t['num_experts']}"
            )
        if t.get("decoder_sparse_step") is not None and t["decoder_sparse_step"] > layers:
            raise c.fail("text", "decoder_sparse_step", f"{t['decoder_sparse_step']} exceeds the {layers} layers")
        if t.get("mlp_only_layers") is not None:
            c.int_list("text", "mlp_only_layers", t["mlp_only_layers"], layers)


def _rope(c: _Checker, t: dict, hd: int) -> None:
    for key in ("rope_scaling", "rope_parameters"):
        r = t.get(key)
        if r is None:
            continue
        if not isinstance(r, dict):
            raise c.fail("text", key, f"must be a mapping, not {_kind(r)}")
        kind = r.get("rope_type", r.get("type", "default"))
        if kind not in ROPE_TYPES:
            raise c.fail("text", key, f"has rope_type {_kind(kind)}; Qwen-VL uses {' or '.join(ROPE_TYPES)}")
        if r.get("rope_theta") is not None:
            c.number("text", f"{key}.rope_theta", r["rope_theta"], _FLOATS["rope_theta"])
        if r.get("mrope_interleaved") is not None and not isinstance(r["mrope_interleaved"], bool):
            raise c.fail(
                "text", f"{key}.mrope_interleaved", f"must be true or false, not {_kind(r['mrope_interleaved'])}"
            )
        sec = r.get("mrope_section")
        if sec is not None:
            if not isinstance(sec, list) or len(sec) != 3:
                raise c.fail("text", f"{key}.mrope_section", f"must be 3 integers (t, h, w), not {_kind(sec)}")
            for v in sec:
                c.integer("text", f"{key}.mrope_section", v, MAX_HEAD_DIM, low=0)
            if sum(sec) != hd // 2:
                raise c.fail("text", f"{key}.mrope_section", f"{sec} must sum to head width / 2 = {hd // 2}")


def _vision_relations(c: _Checker, v: dict, t: dict, model_type: str) -> None:
    width_key, _, out_key = TOWER_NAMES.get(model_type, TOWER_DEFAULT_NAMES)
    width, heads = v[width_key], v["num_heads"]
    if width % heads or (width // heads) % 4:
        raise c.fail(
            "vision", "num_heads", f"{heads} must split {width_key} {width} into heads whose width is a multiple of 4"
        )
    patch = FAMILY_PATCH[model_type]
    for key, want in (("patch_size", patch), ("temporal_patch_size", 2), ("spatial_merge_size", 2), ("in_channels", 3)):
        if v.get(key) != want:
            raise c.fail(
                "vision", key, f"is {_short(v.get(key))}; the {model_type} processors the loaders use need {want}"
            )
    if v[out_key] != t["hidden_size"]:
        raise c.fail("vision", out_key, f"{v[out_key]} must equal the decoder's hidden_size {t['hidden_size']}")
    depth = v["depth"]
    if model_type == "qwen2_vl":  # every block full attention, no DeepStack
        return
    if model_type == "qwen2_5_vl":
        if v.get("fullatt_block_indexes") is not None:
            c.int_list("vision", "fullatt_block_indexes", v["fullatt_block_indexes"], depth)
        unit = patch * 2
        if v.get("window_size") is not None and v["window_size"] % unit:
            raise c.fail("vision", "window_size", f"{v['window_size']} must be a multiple of patch x merge = {unit}")
    else:
        deep = c.int_list("vision", "deepstack_visual_indexes", v.get("deepstack_visual_indexes") or [], depth)
        if len(deep) > t["num_hidden_layers"]:
            raise c.fail(
                "vision",
                "deepstack_visual_indexes",
                f"has {len(deep)} entries, more than the {t['num_hidden_layers']} decoder layers they feed",
            )


def check_parallel(text: Any, *, tp: int, ep: int, experts: int | None) -> None:
    """Megatron's rules for splitting the model over ``tp`` and ``ep`` (module docstring); the message names
    the sizes as parameters (```tp```, ```ep```), which a caller may put in its user's terms.

    Args:
        text: the decoder's transformers config (``num_attention_heads``, ``num_key_value_heads``).
        tp, ep: tensor- and expert-parallel sizes.
        experts: routed experts per layer (None: a dense decoder, EP is not checked).

    Raises:
        ModelConfigError: a size that does not divide what it splits.
    """
    heads = int(text.num_attention_heads)
    kv = int(getattr(text, "num_key_value_heads", None) or heads)
    if heads % tp or kv % tp:
        raise ModelConfigError(
            f"`tp` must divide the model's {heads} attention heads and {kv} key-value heads (Megatron splits whole "
            f"heads over tensor-parallel ranks); got {tp}"
        )
    if experts and experts % ep:
        raise ModelConfigError(
            f"`ep` must divide the model's {experts} routed experts (Megatron-Core requires num_moe_experts % "
            f"expert_model_parallel_size == 0); got {ep}"
        )


def shape_defaults_note(shape: Any) -> list[str]:
    """The report's note on the optional shape fields a default filled in (``ModelShape.defaults``), if any."""
    filled = getattr(shape, "defaults", ())
    if not filled:
        return []
    return [f"{shape.name} leaves {len(filled)} shape field(s) unset; defaults used: {', '.join(filled)}"]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {_short(value)}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _short(value: Any) -> str:
    """A number as text, huge integers abbreviated (a 4,000-digit integer is not printed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"  # str() refuses 4,300+
    return repr(value)
