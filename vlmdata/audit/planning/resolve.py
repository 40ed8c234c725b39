"""How an ``AuditConfig`` resolves into the run the audit measures: ``resolve(cfg)``.

For every setting of the run, in this order of precedence:

1. what the caller gave (``"flag"``: a CLI flag or an API argument);
2. the user's Megatron Bridge config (``bridge_config``: a ``ConfigContainer`` YAML as Bridge writes it;
   ``vlmdata.audit.settings.bridge_config``): micro and global batch size, seq_length, TP/PP/EP/CP/ETP, freezing,
   recompute, packing, the distributed optimizer, garbage collection (``train.manual_gc``);
3. the model's ``config.json`` (``model_config``; ``vlmdata.audit.settings.model_config``) for the model's shape;
4. the device's defaults (``DEVICE_DEFAULTS``; CPU: the demo's tiny model; CUDA: the ``h200`` preset and the
   Qwen3-VL-30B-A3B SFT recipe's global batch on one data-parallel rank).

It returns a ``Resolved``: the ``RunSpec`` (``vlmdata.audit.settings.run_spec``), the ``ModelShape``, the slice the
GPU measures (whole model, or ``slice_layers`` decoder layers and experts / EP per layer:
``vlmdata.audit.analysis.compose``), and ``sources``: where each setting came from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vlmdata.audit.planning.estimate import Fit, fit_slice
from vlmdata.audit.settings.bridge_config import BridgeRun, read_bridge_config
from vlmdata.audit.settings.bridge_model import family_conflict, model_type_of, shape_of_bridge
from vlmdata.audit.settings.bridge_run import (
    BRIDGE_NAMES,
    data_parallel,
    defaults_note,
    dp_note,
    in_file_terms,
    run_notes,
)
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.fields import SETTINGS
from vlmdata.audit.settings.model_checks import check_parallel, shape_defaults_note
from vlmdata.audit.settings.model_config import (
    FAMILIES,
    ModelConfigError,
    ModelShape,
    preset_shape,
    read_model_config,
)
from vlmdata.audit.settings.peft import PeftSpec, read_peft
from vlmdata.audit.settings.run_spec import RunSpec, RunSpecError
from vlmdata.audit.sources.registry import AuditError

__all__ = ["Resolved", "resolve", "bridge_packs", "BRIDGE_RUN_FIELDS"]

BRIDGE_RUN_FIELDS = tuple(s.name for s in SETTINGS if s.from_bridge)  # the run's settings a Bridge config may give


@dataclass(frozen=True)
class Resolved:
    """What ``resolve`` settled (see the module docstring)."""

    run: RunSpec
    shape: ModelShape
    layers: int | None  # decoder layers built (None: all)
    experts: int | None  # routed experts per layer built (None: all)
    sources: dict[str, str]  # setting -> flag | bridge config | model config | derived | assumed | default
    notes: tuple[str, ...] = ()
    peft: PeftSpec | None = (
        None  # the Bridge config's PEFT (vlmdata.audit.settings.peft): base frozen, adapters trained
    )
    fit: Fit | None = field(default=None, compare=False)  # parameters and estimated memory of what is built

    @property
    def sliced(self) -> bool:
        return self.layers is not None and self.layers < self.shape.layers

    def describe(self) -> dict[str, Any]:
        return {
            "run": self.run.describe(),
            "model": self.shape.describe(),
            "measured_layers": self.layers or self.shape.layers,
            "measured_experts": self.experts or self.shape.experts,
            "sliced": self.sliced,
            "sources": dict(self.sources),
            "notes": list(self.notes),
            "peft": self.peft.describe() if self.peft is not None else None,
            "estimate": self.fit.describe() if self.fit is not None else None,
        }


def _bridge(path: str | None) -> BridgeRun | None:
    return None if path is None else read_bridge_config(path)


def bridge_packs(bridge: BridgeRun) -> bool:
    """Whether a Bridge run really packs samples into rows. In 0.6.2 the Qwen3-VL recipes set
    ``enable_in_batch_packing`` with ``defer_in_batch_packing_to_step``: the collate does not pack and
    ``qwen3_vl_step`` keeps one sample per row (it only builds THD metadata), so that is not packing; offline
    packing (Energon) is."""
    d = bridge.packing_detail or {}
    in_batch = bool(d.get("enable_in_batch_packing")) and not d.get("defer_in_batch_packing_to_step")
    return bool(d.get("enable_offline_packing")) or in_batch


def _shape(cfg: AuditConfig, bridge: BridgeRun | None, sources: dict[str, str], notes: list[str]) -> ModelShape:
    """The model: a config.json, else the Bridge config's provider and model section, else the preset. The
    provider is checked in every case (an unknown one is refused by name; a config.json of another family is
    measured, and said)."""
    try:
        if bridge is not None:
            model_type_of(bridge)  # an unknown provider is refused by name, whatever else describes the model
        if cfg.model_config is not None:
            sources["model"] = "model config"
            shape = read_model_config(cfg.model_config)
            conflict = family_conflict(bridge, shape) if bridge is not None else None
            notes += [conflict] if conflict else []
            return shape
        if cfg.preset is None and bridge is not None and (bridge.model_fields or {}).get("num_layers"):
            sources["model"] = "bridge config"
            return shape_of_bridge(bridge)
        sources["model"] = "flag" if cfg.preset is not None else "default"
        shape = preset_shape(cfg.preset or cfg.defaults()["preset"])
    except ModelConfigError as e:
        raise AuditError(str(e)) from None
    wanted = model_type_of(bridge) if bridge is not None else None
    if bridge is not None and wanted is not None and wanted != shape.model_type:
        how = "the `preset` given" if cfg.preset is not None else "the default preset"
        if cfg.preset is None:
            raise AuditError(
                f"{bridge.path}: model._target_ is {bridge.model_target!r} ({FAMILIES[wanted][0]}) but its model "
                f"section has no num_layers and {how} is {shape.family}; give the model's config.json as `model_config`"
            )
        notes.append(
            f"the run's provider is {FAMILIES[wanted][0]} but {how} ({shape.name}, {shape.family}) is measured"
        )
    return shape


def _run_values(cfg: AuditConfig, bridge, sources: dict[str, str]) -> dict[str, Any]:
    d = cfg.defaults()
    values: dict[str, Any] = {}
    for name in BRIDGE_RUN_FIELDS:
        given = getattr(cfg, name, None)
        from_bridge = getattr(bridge, BRIDGE_NAMES.get(name, name), None) if bridge is not None else None
        if given is not None:
            values[name], sources[name] = given, "flag"
        elif from_bridge is not None:
            values[name], sources[name] = from_bridge, "bridge config"
        elif name in ("seq_length", "micro_batch_size"):
            values[name], sources[name] = d[name], "default"
        else:
            sources[name] = "default"
    if cfg.seq_policy is not None:
        values["seq_policy"], sources["seq_policy"] = cfg.seq_policy, "flag"
    elif bridge is not None and bridge_packs(bridge):
        values["seq_policy"], sources["seq_policy"] = "pack", "bridge config"
    else:
        sources["seq_policy"] = "default"
    values["default_micro_batches"] = d["micro_batches"]
    return values


def _measured_part(cfg: AuditConfig, shape: ModelShape, run: RunSpec, sources: dict[str, str], peft) -> Fit:
    """The part one GPU builds (whole, or a slice of ``slice_layers`` decoder layers) and its estimated needs
    (``estimate.fit_slice``; one that will not fit is refused before anything is allocated: ``runner.start_run``)."""
    sources["slice_layers"] = "flag" if cfg.slice_layers is not None else "default"
    return fit_slice(
        shape, run, device=cfg.device, logits=cfg.resolved_logits(), slice_layers=cfg.slice_layers, peft=peft
    )


def resolve(cfg: AuditConfig, world_size: int = 1) -> Resolved:
    """Fill in every setting (see the module docstring); ``world_size``: data-parallel ranks under torchrun
    (their count is the run's DP unless given)."""
    sources: dict[str, str] = {}
    notes: list[str] = []
    bridge = _bridge(cfg.bridge_config)
    peft = read_peft(cfg.bridge_config) if cfg.bridge_config is not None else None
    shape = _shape(cfg, bridge, sources, notes)
    values = _run_values(cfg, bridge, sources)
    layout = {k: values.get(k) or 1 for k in ("tp", "pp", "cp")}
    dp, sources["dp"] = data_parallel(cfg.dp, bridge, getattr(cfg, "gpus", None), world_size, layout)
    values.pop("dp", None)
    if dp is not None:
        values["dp"] = dp
    own = {f.name for f in dataclasses.fields(RunSpec)}
    try:
        run = RunSpec(**values, sources={k: v for k, v in sources.items() if k in own and (k in values or k == "dp")})
        run.check_sequence_split(bool(bridge is not None and bridge.execution.get("sequence_parallel")))
    except RunSpecError as e:
        raise AuditError(in_file_terms(str(e), bridge, sources, values)) from None
    try:  # model_checks: TP splits whole heads, EP whole sets of experts (before anything is built)
        check_parallel(shape.text, tp=run.tp, ep=run.ep, experts=shape.experts)
    except ModelConfigError as e:
        raise AuditError(in_file_terms(str(e), bridge, sources, values)) from None
    notes += shape_defaults_note(shape)
    if bridge is not None:
        notes += run_notes(bridge, peft, sources.get("model") == "bridge config", shape.family)
        if sources["dp"] == "assumed":
            notes.append(dp_note(run, bridge))
        notes += [n for n in [defaults_note(run, bridge, sources)] if n]
    if bridge is not None and getattr(bridge, "model_fields", None):
        notes += _model_mismatch(bridge.model_fields, shape)
    _check_peft(peft, shape)
    fit = _measured_part(cfg, shape, run, sources, peft)
    layers, experts = fit.layers, fit.experts
    if fit.note:
        notes.append(fit.note)
    if run.ep > 1 and not shape.experts:
        notes.append(f"ep={run.ep} on a dense decoder ({shape.family}): no experts to distribute; ignored")
    return Resolved(run, shape, layers, experts, sources, tuple(notes), peft, fit)


def _check_peft(peft: PeftSpec | None, shape: ModelShape) -> None:
    """A PEFT whose expert rank the model cannot have (``normalize_moe_lora`` with a top-k not dividing ``dim``)."""
    if peft is None or not (peft.normalize_moe_lora and shape.top_k):
        return
    if peft.dim % shape.top_k:
        raise AuditError(
            f"{peft.path}: peft.normalize_moe_lora needs peft.dim ({peft.dim}) divisible by the model's top-k "
            f"({shape.top_k}), as Bridge's LoRA does"
        )


def _model_mismatch(fields: dict, shape: ModelShape) -> list[str]:
    """Bridge's model fields that disagree with the model config (said in the report)."""
    pairs = {
        "num_layers": shape.layers,
        "hidden_size": shape.text.hidden_size,
        "num_moe_experts": shape.experts,
        "moe_router_topk": shape.top_k,
    }
    return [
        f"the Bridge config's model.{k} is {fields[k]} but the model has {v}"
        for k, v in pairs.items()
        if fields.get(k) is not None and v is not None and fields[k] != v
    ]
