"""The user's Megatron Bridge run, read from the ``ConfigContainer`` YAML that Bridge writes: ``read_bridge_config``.

Contract (Megatron-Bridge 0.6.2 with Megatron-Core 0.19.2; pure Python + PyYAML, Bridge is never imported):

- Input: a local YAML file as Bridge writes it, ``ConfigContainer.to_yaml(path)`` (``to_dict()`` then
  ``yaml.safe_dump``): ``<checkpoint>/iter_N/run_config.yaml`` (written at every checkpoint save) and
  ``logger.save_config_filepath`` (written by ``training.setup``). Both are written after ``pretrain()`` ran
  ``runtime_config_update`` (mixed precision resolved, ``validate()``); a YAML dumped straight after building a
  recipe reads the same way. Hand-written YAML in the same layout works too.
- Output: ``BridgeRun``, one field per setting the audit needs, and ``sources``: for every field that was read, the
  dotted YAML path it came from. A section or key that is absent gives ``None`` (not an error, and no entry in
  ``sources``); a key present with ``null`` gives ``None`` (``recompute``: ``"none"``) with its source.

The paths and kinds of the audit's settings (sizes, layout, freezing, recompute, garbage collection, the dataset's
target) are read from ``vlmdata.audit.settings.fields``, the one table of settings; the table below says the same.
Where each field lives in 0.6.2 (``model.X`` falls back to ``model.transformer.X``, the layout of Megatron's own
``GPTModelConfig`` / ``HybridModelConfig``; the Qwen-VL providers keep everything directly under ``model``):

=========================== ======================================================================================
micro_batch_size            ``train.micro_batch_size``
global_batch_size           ``train.global_batch_size``
seq_length                  ``model.seq_length``; ``dataset.seq_length`` only when the model has none. The model's
                            wins: ``qwen3_vl_step`` pads to ``get_model_config(model).seq_length``, and
                            ``ConfigContainer.validate()`` asserts the two are equal, so a file where both are set
                            and differ is refused (Bridge would refuse to train it).
tensor_parallel             ``model.tensor_model_parallel_size``
pipeline_parallel           ``model.pipeline_model_parallel_size``
expert_parallel             ``model.expert_model_parallel_size``
context_parallel            ``model.context_parallel_size``
expert_tensor_parallel      ``model.expert_tensor_parallel_size`` (``null`` in a recipe dump: Megatron-Core sets it
                            to the tensor-parallel size when it finalizes the config; ``1`` after that)
data_parallel               ``data_parallel_size`` (top level), else ``comm_overlap.data_parallel_size``. Bridge
                            derives DP from the world size (``world / (TP * PP * CP)``) and keeps it as a plain
                            attribute that ``to_dict()`` does not write; only ``comm_overlap`` (a dataclass field,
                            when comm overlap is configured) records it. Otherwise ``None``.
freeze_language_model       ``model.freeze_language_model`` (same for ``freeze_vision_model``,
                            ``freeze_vision_projection``)
recompute                   ``model.recompute_granularity``: ``null`` -> ``"none"``, ``"selective"``, ``"full"``
recompute_detail            ``model.recompute_method`` (``uniform`` | ``block``), ``model.recompute_num_layers``,
                            ``model.recompute_modules``, those present. After finalize ``recompute_modules`` is
                            ``[core_attn]`` whatever the granularity (it only matters for ``selective``).
packing                     ``dataset.enable_in_batch_packing`` or ``dataset.enable_offline_packing`` (either true ->
                            True); ``None`` when the dataset has neither key (a ``DatasetProvider`` of one's own).
                            What the file says, not what the step does: the 0.6.2 Qwen3-VL SFT and PEFT recipes
                            set ``enable_in_batch_packing`` with ``defer_in_batch_packing_to_step``, and then nothing
                            is packed (``DirectSFTDataset`` hands the collate ``enable and not defer``;
                            ``qwen3_vl_step`` keeps one sample per ``[B, S]`` row, pads the rows to a multiple of
                            lcm(16, TP, or 2 * TP * CP when CP > 1), or to ``seq_length`` when PP > 1 or EP > 1, and
                            only builds THD metadata). Read it with ``packing_detail``.
packing_detail              the dataset's packing and padding keys, those present: ``enable_in_batch_packing``,
                            ``defer_in_batch_packing_to_step`` (``vlm_step``, the generic VLM step, refuses it),
                            ``enable_offline_packing``, ``pad_to_max_length`` (``validate()`` turns it on when
                            PP > 1 or EP > 1), ``pad_to_multiple_of``, ``in_batch_packing_pad_to_multiple_of``
use_distributed_optimizer   ``ddp.use_distributed_optimizer`` OR ``optimizer.use_distributed_optimizer``: Bridge's
                            ``validate()`` turns both on when either is on
manual_gc                   ``train.manual_gc`` (the recipes: ``true``; ``TrainingConfig``'s default: ``false``)
manual_gc_interval          ``train.manual_gc_interval`` (the recipes: 100; 0: no periodic collection)
model_target                ``model._target_`` (the provider class, e.g. ``...Qwen3VLMoEModelProvider``)
dataset_target              ``dataset._target_`` (``DirectHFSFTDatasetConfig``, ``MockVLMSFTDatasetConfig``,
                            ``EnergonDatasetConfig``, ...)
model_fields                the model's shape as found: ``MODEL_FIELDS`` (decoder: ``num_layers``, ``hidden_size``,
                            ``num_moe_experts``, ``moe_router_topk``, ...; vision tower: ``vision_config.depth``, ...),
                            keyed by their path under ``model``; ``sources`` has them as ``model_fields.<key>``
=========================== ======================================================================================

Robustness: the file must be a regular file of at most ``MAX_BYTES`` (a directory, FIFO or device is refused
without blocking, ``storage.read_regular``); YAML is parsed with PyYAML's safe loader (no Python tags; aliases are
shared, not expanded); the document must be a mapping with at least one Bridge section (``train``, ``model``,
``dataset``, ``ddp``, ``optimizer``, ``comm_overlap``). Unknown keys and every other section are ignored, and so are
``_target_`` / ``_call_`` / ``_partial_`` entries except the two targets above. A whole-value OmegaConf reference
(``${model.seq_length}``) in a field that is read is resolved within the file; any other interpolation (embedded,
relative, or a resolver such as ``${oc.env:X}``) in such a field is refused. A field of the wrong type (a string, a
float or a bool where an integer is expected, a mapping, a size below 1) raises ``BridgeConfigError`` naming the
field's path and the file. Every error is a ``BridgeConfigError`` whose message starts with the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlmdata.audit.settings.bridge_yaml import RECOMPUTE_GRANULARITIES, RECOMPUTE_METHODS, ConfigDoc, load_config
from vlmdata.audit.settings.fields import SETTINGS
from vlmdata.errors import BridgeConfigError

__all__ = [
    "BridgeRun",
    "BridgeConfigError",
    "read_bridge_config",
    "MAX_BYTES",
    "SECTIONS",
    "PACKING_KEYS",
    "MODEL_FIELDS",
    "EXECUTION_FIELDS",
    "RECOMPUTE_GRANULARITIES",
    "RECOMPUTE_METHODS",
]

MAX_BYTES = 1 << 20
"""Largest config file read (a Bridge ``run_config.yaml`` is about 30 KB; parsing 1 MiB of YAML takes seconds)."""

SECTIONS = ("train", "model", "dataset", "ddp", "optimizer", "comm_overlap")
PACKING_KEYS = (
    "enable_in_batch_packing",
    "defer_in_batch_packing_to_step",
    "enable_offline_packing",
    "pad_to_max_length",
    "pad_to_multiple_of",
    "in_batch_packing_pad_to_multiple_of",
)

# The model's shape, by path under ``model`` and the kind of value each must be. Integer sizes may be null
# (``num_moe_experts`` of a dense model); "int0" allows 0.
MODEL_FIELDS: dict[str, str] = {
    "num_layers": "int",
    "hidden_size": "int",
    "ffn_hidden_size": "int",
    "num_attention_heads": "int",
    "num_query_groups": "int",
    "kv_channels": "int",
    "vocab_size": "int",
    "num_moe_experts": "int",
    "moe_router_topk": "int",
    "moe_ffn_hidden_size": "int",
    "moe_shared_expert_intermediate_size": "int",
    "position_embedding_type": "str",
    "share_embeddings_and_output_weights": "bool",
    "transformer_impl": "str",
    "hf_model_id": "str",
    "patch_size": "int",
    "spatial_merge_size": "int",
    "temporal_patch_size": "int",
    "deepstack_visual_indexes": "int_list",
    "image_token_id": "int0",
    "video_token_id": "int0",
    "vision_start_token_id": "int0",
    "vision_end_token_id": "int0",
    "vision_config.depth": "int",
    "vision_config.hidden_size": "int",
    "vision_config.intermediate_size": "int",
    "vision_config.num_heads": "int",
    "vision_config.out_hidden_size": "int",
    "vision_config.patch_size": "int",
    "vision_config.spatial_merge_size": "int",
    "vision_config.temporal_patch_size": "int",
    "vision_config.deepstack_visual_indexes": "int_list",
    "vision_config.window_size": "int",
    "vision_config.fullatt_block_indexes": "int_list",
}

# Execution policy that Bridge's published mock-vs-real pair differs in besides the data (REFERENCE.md section 13:
# forced routing balance, vision CUDA graphs, the pipeline split; recompute is its own field): by path under
# ``model``, with the kind of value each must be. Absent keys are simply not in ``BridgeRun.execution``.
EXECUTION_FIELDS: dict[str, str] = {
    "moe_router_force_load_balancing": "bool",
    "cuda_graph_impl": "str",
    "cuda_graph_scope": "str_or_list",
    "max_vision_cuda_graph_seq_length": "int",
    "sequence_parallel": "bool",
    "virtual_pipeline_model_parallel_size": "int",
    "num_layers_in_first_pipeline_stage": "int",
    "num_layers_in_last_pipeline_stage": "int",
}


@dataclass(frozen=True)
class BridgeRun:
    """The settings of one Megatron Bridge run that the audit uses (module docstring: where each comes from)."""

    path: str
    micro_batch_size: int | None
    global_batch_size: int | None
    seq_length: int | None
    tensor_parallel: int | None
    pipeline_parallel: int | None
    expert_parallel: int | None
    context_parallel: int | None
    expert_tensor_parallel: int | None
    data_parallel: int | None
    freeze_language_model: bool | None
    freeze_vision_model: bool | None
    freeze_vision_projection: bool | None
    recompute: str | None
    recompute_detail: dict
    packing: bool | None
    use_distributed_optimizer: bool | None
    model_target: str | None
    model_fields: dict
    sources: dict[str, str]
    packing_detail: dict = field(default_factory=dict)
    dataset_target: str | None = None
    manual_gc: bool | None = None
    manual_gc_interval: int | None = None
    execution: dict = field(default_factory=dict)  # EXECUTION_FIELDS found: routing balance, CUDA graphs, PP split


def read_bridge_config(path: str) -> BridgeRun:
    """Read a Megatron Bridge 0.6.2 ``ConfigContainer`` YAML (``run_config.yaml``, ``cfg.to_yaml``) into a BridgeRun.

    Args:
        path: a local file path (or ``file://`` URL) of at most ``MAX_BYTES``.

    Returns:
        BridgeRun: every field the file states (``None`` where it does not), with ``sources`` naming the YAML path
        of each field that was read.

    Raises:
        BridgeConfigError: the file is missing, not a regular file, too large, not YAML, not a Bridge config
            mapping, or a field has the wrong type or an unresolvable interpolation; the message names the file.
    """
    doc = ConfigDoc(path, load_config(path, MAX_BYTES, SECTIONS))
    sources: dict[str, str] = {}

    def take(name: str, paths: tuple[str, ...], kind: str):
        value, where = doc.first(paths, kind)
        if where is not None:
            sources[name] = where
        return value

    run: dict[str, Any] = {}
    for setting in SETTINGS:  # the audit's settings a Bridge config holds: their paths and kinds (settings.fields)
        attr = setting.bridge_attr
        if attr is None or "." in attr:
            continue  # no Bridge field, or one of the execution table (below)
        special = _SPECIAL.get(setting.name)
        if special is not None:
            run[attr] = special(doc, sources, setting.bridge)
        else:
            run[attr] = take(attr, setting.bridge, str(setting.bridge_kind))
    if run["recompute"] is None and "recompute" in sources:
        run["recompute"] = "none"  # a granularity stated as null: no recompute
    run["recompute_detail"] = _recompute_detail(doc, sources)
    run["packing"], run["packing_detail"] = _packing(doc, sources)
    run["model_target"] = take("model_target", ("model._target_",), "str")
    run["model_fields"] = _model_table(doc, sources, MODEL_FIELDS, "model_fields")
    run["execution"] = _model_table(doc, sources, EXECUTION_FIELDS, "execution")
    return BridgeRun(path=path, sources=sources, **run)


def _model_paths(key: str) -> tuple[str, ...]:
    return (f"model.{key}", f"model.transformer.{key}")


def _seq_length(doc: ConfigDoc, sources: dict[str, str], paths: tuple[str, ...]) -> int | None:
    model, model_at = doc.first(tuple(p for p in paths if p.startswith("model.")), "int")
    data, data_at = doc.first(tuple(p for p in paths if not p.startswith("model.")), "int")
    if model is not None and data is not None and model != data:
        raise doc.error(
            str(model_at),
            f"is {model} but dataset.seq_length is {data}; Bridge's ConfigContainer.validate() refuses a run where "
            "they differ",
        )
    if model is not None or data_at is None:
        value, where = model, model_at
    else:
        value, where = data, data_at
    if where is not None:
        sources["seq_length"] = where
    return value


def _data_parallel(doc: ConfigDoc, sources: dict[str, str], paths: tuple[str, ...]) -> int | None:
    found = []
    for dotted in paths:
        value, where = doc.first((dotted,), "int")
        if where is not None:
            found.append((value, where))
    stated = [(value, where) for value, where in found if value is not None]
    if len({value for value, _ in stated}) > 1:
        (a, at_a), (b, at_b) = stated[0], stated[1]
        raise doc.error(at_a, f"is {a} but {at_b} is {b}")
    if not found:
        return None
    value, where = stated[0] if stated else found[0]
    sources["data_parallel"] = where
    return value


def _recompute_detail(doc: ConfigDoc, sources: dict[str, str]) -> dict:
    detail = {}
    for key, kind in (
        ("recompute_method", "recompute_method"),
        ("recompute_num_layers", "int0"),
        ("recompute_modules", "str_list"),
    ):
        value, where = doc.first(_model_paths(key), kind)
        if where is not None:
            detail[key] = value
            sources[f"recompute_detail.{key}"] = where
    return detail


def _packing(doc: ConfigDoc, sources: dict[str, str]) -> tuple[bool | None, dict]:
    detail = {}
    flags = {}
    for key in PACKING_KEYS:
        kind = "bool" if key.startswith(("enable_", "defer_", "pad_to_max")) else "int"
        value, where = doc.first((f"dataset.{key}",), kind)
        if where is not None:
            detail[key] = value
            sources[f"packing_detail.{key}"] = where
            if key in ("enable_in_batch_packing", "enable_offline_packing"):
                flags[where] = value
    return _any_on(flags, "packing", sources), detail


def _distributed_optimizer(doc: ConfigDoc, sources: dict[str, str], paths: tuple[str, ...]) -> bool | None:
    flags = {}
    for dotted in paths:
        value, where = doc.first((dotted,), "bool")
        if where is not None:
            flags[where] = value
    return _any_on(flags, "use_distributed_optimizer", sources)


def _any_on(flags: dict[str, bool | None], name: str, sources: dict[str, str]) -> bool | None:
    """True when any flag is on, False when all stated ones are off, None when none is stated; the source is the
    paths that decided, joined by `` | ``."""
    if not flags:
        return None
    on = [where for where, value in flags.items() if value]
    stated = [where for where, value in flags.items() if value is not None]
    sources[name] = " | ".join(on or stated or list(flags))
    return True if on else (False if stated else None)


def _model_table(doc: ConfigDoc, sources: dict[str, str], table: dict[str, str], prefix: str) -> dict:
    """The keys of ``table`` (path under ``model`` -> kind) the file has, each recorded in ``sources`` as
    ``<prefix>.<key>``: the model's shape (``MODEL_FIELDS``) and the execution policy (``EXECUTION_FIELDS``)."""
    found = {}
    for key, kind in table.items():
        value, where = doc.first(_model_paths(key), kind)
        if where is not None:
            found[key] = value
            sources[f"{prefix}.{key}"] = where
    return found


_SPECIAL = {  # settings read by more than "the first path present" (their paths are still the table's)
    "seq_length": _seq_length,
    "dp": _data_parallel,
    "use_distributed_optimizer": _distributed_optimizer,
}
