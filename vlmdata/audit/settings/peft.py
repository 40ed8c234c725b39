"""The ``peft`` section of a Megatron Bridge config: ``read_peft(path)`` -> ``PeftSpec`` (or None), no torch.

A Bridge run with ``peft:`` set (0.6.2's ``*_peft_config`` recipes: ``megatron.bridge.peft.lora.LoRA``) builds the
model, freezes every base weight (``PEFT.freeze_model``), then wraps each linear layer whose name is in
``target_modules`` in an adapter (``LoRALinear``: ``y = W x + (alpha / dim) * B A x``, A ``in -> dim`` initialised
xavier, B ``dim -> out`` zero). Only the adapters train: their gradients, their main-gradient buffers and their
optimizer state are all the run keeps besides the frozen weights. The audit reproduces that on the reference
model (``vlmdata.audit.workload.lora``), reading:

=============================== =================================================================================
``peft._target_``               ``...peft.lora.LoRA`` or ``...peft.lora.VLMLoRA`` (which also honours its own
                                ``freeze_language_model`` / ``freeze_vision_model`` / ``freeze_vision_projection``:
                                a part it does not freeze trains fully beside the adapters); others are refused
``peft.dim``, ``peft.alpha``    the rank and the scale ``alpha / dim``
``peft.dropout``                dropout on the adapter's input (``dropout_position: pre``; ``post`` is refused)
``peft.target_modules``         Megatron's module names ``linear_qkv``, ``linear_proj``, ``linear_fc1``,
                                ``linear_fc2`` (no wildcards: they name Megatron module paths)
``peft.normalize_moe_lora``     expert adapters of rank ``dim // moe_router_topk``
``peft.share_expert_adapters``  one adapter per MoE layer shared by its experts (``true``, the recipes'); ``false``
                                (one per expert) is refused, as is ``experts_shared_outer_loras: true``
``peft.exclude_modules``,       must be empty: matching "every linear but these" reaches modules (the router, the
``peft.canonical_mapping``      output layer) whose Megatron names have no counterpart here
=============================== =================================================================================

Every refusal is a ``BridgeConfigError`` naming the file and the key. ``PeftSpec.describe()`` and ``line()`` are
what the plan and the report say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlmdata.audit.settings.bridge_config import MAX_BYTES, SECTIONS
from vlmdata.audit.settings.bridge_yaml import ConfigDoc, load_config

__all__ = ["PeftSpec", "read_peft", "TARGET_MODULES", "PEFT_CLASSES"]

TARGET_MODULES = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
PEFT_CLASSES = {"LoRA": "lora", "VLMLoRA": "lora"}
_REFUSED_CLASSES = {
    "DoRA": "DoRA (a weight-norm rescaling of every adapted layer per step)",
    "CanonicalLoRA": "CanonicalLoRA (separate q, k, v, gate and up adapters)",
}


@dataclass(frozen=True)
class PeftSpec:
    """A Bridge run's PEFT (module docstring)."""

    path: str
    target: str  # peft._target_
    dim: int
    alpha: float
    dropout: float = 0.0
    target_modules: tuple[str, ...] = TARGET_MODULES
    normalize_moe_lora: bool = False
    freeze: dict[str, bool] | None = None  # VLMLoRA's own freezing; None: every base weight frozen (LoRA)

    @property
    def scale(self) -> float:
        return self.alpha / self.dim

    @property
    def kind(self) -> str:
        return self.target.rsplit(".", 1)[-1]

    def expert_dim(self, top_k: int | None) -> int:
        """The rank of an expert adapter (``normalize_moe_lora``: ``dim // moe_router_topk``)."""
        return self.dim // top_k if self.normalize_moe_lora and top_k else self.dim

    def line(self) -> str:
        """The PEFT in words."""
        frozen = (
            "every base weight frozen"
            if not self.freeze
            else "base weights frozen except "
            + (", ".join(k.removeprefix("freeze_") for k, v in self.freeze.items() if not v) or "none")
        )
        return (
            f"PEFT {self.kind} (dim {self.dim}, alpha {self.alpha:g}) on {', '.join(self.target_modules)}: "
            f"{frozen}; the adapters train, with their optimizer state"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "dim": self.dim,
            "alpha": self.alpha,
            "dropout": self.dropout,
            "target_modules": list(self.target_modules),
            "normalize_moe_lora": self.normalize_moe_lora,
            "freeze": dict(self.freeze) if self.freeze else None,
            "path": self.path,
        }


def read_peft(path: str) -> PeftSpec | None:
    """The ``peft`` section of a Bridge ``ConfigContainer`` YAML (None when absent or null).

    Args:
        path: the Bridge config file.

    Returns:
        The ``PeftSpec``, or None.

    Raises:
        BridgeConfigError: a PEFT the audit cannot reproduce, or a value of the wrong type (file and key named).
    """
    doc = ConfigDoc(path, load_config(path, MAX_BYTES, SECTIONS))
    section = doc.get("peft")
    if section is None or section is _absent(doc):
        return None
    if not isinstance(section, dict):
        raise doc.error("peft", "must be a mapping or null")
    target, _ = doc.first(("peft._target_",), "str")
    cls = (target or "").rsplit(".", 1)[-1]
    if cls not in PEFT_CLASSES:
        why = _REFUSED_CLASSES.get(cls, "a PEFT class")
        raise doc.error(
            "peft._target_",
            f"is {target!r}: {why} the audit does not reproduce; it reproduces "
            f"{' and '.join(PEFT_CLASSES)} (megatron.bridge.peft.lora)",
        )
    _refuse_unsupported(doc)
    dim, _ = doc.first(("peft.dim",), "int")
    alpha = _number(doc, "peft.alpha", default=32)
    dropout = _number(doc, "peft.dropout", default=0.0)
    if not 0 <= dropout < 1:
        raise doc.error("peft.dropout", f"must be in [0, 1), not {dropout}")
    modules, _ = doc.first(("peft.target_modules",), "str_list")
    modules = tuple(modules) if modules is not None else TARGET_MODULES
    unknown = [m for m in modules if m not in TARGET_MODULES]
    if unknown or not modules:
        raise doc.error(
            "peft.target_modules",
            f"names {unknown or 'nothing'}; the audit maps only Megatron's {', '.join(TARGET_MODULES)} onto the "
            "reference model (no wildcards: they name Megatron module paths)",
        )
    normalize, _ = doc.first(("peft.normalize_moe_lora",), "bool")
    freeze = None
    if cls == "VLMLoRA":
        keys = ("freeze_language_model", "freeze_vision_model", "freeze_vision_projection")
        freeze = {k: v if (v := doc.first((f"peft.{k}",), "bool")[0]) is not None else True for k in keys}
    return PeftSpec(
        path=path,
        target=str(target),
        dim=dim or 32,
        alpha=alpha,
        dropout=dropout,
        target_modules=modules,
        normalize_moe_lora=bool(normalize),
        freeze=freeze,
    )


def _absent(doc: ConfigDoc) -> Any:
    return doc.get("__vlmdata_absent__")  # ConfigDoc's marker of a key the file does not have


def _number(doc: ConfigDoc, key: str, default: float) -> float:
    value = doc.get(key)
    if value is _absent(doc) or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise doc.error(key, "must be a number")
    return float(value)


def _refuse_unsupported(doc: ConfigDoc) -> None:
    """The settings whose effect the reference model cannot reproduce (module docstring)."""
    for key, bad, why in (
        ("peft.exclude_modules", lambda v: bool(v), "must be empty: every-linear-but matching is not reproduced"),
        ("peft.canonical_mapping", lambda v: bool(v), "must be empty: canonical mappings are not reproduced"),
        ("peft.share_expert_adapters", lambda v: v is False, "false (one adapter per expert) is not reproduced"),
        (
            "peft.experts_shared_outer_loras",
            lambda v: v is True,
            "true (shared outer expert adapters) is not reproduced",
        ),
        ("peft.dropout_position", lambda v: v not in (None, "pre"), "must be 'pre' (dropout on the adapter's input)"),
    ):
        value = doc.get(key)
        if value is not _absent(doc) and bad(value):
            raise doc.error(key, why)
