"""The run settings two training logs (or their Bridge YAMLs) differ in: ``setting_differences``.

A mock run and a real run are often not run the same way (Bridge's Qwen3-VL pretrain-mock recipes freeze the
language model and the vision tower and use another layout than the SFT recipes; issue 30). The logs' gap then
mixes the data with the configuration. This module lists, side by side, every setting of ``SETTING_KEYS`` that
the two runs state differently, with where each value came from:

- the log's configuration dump (Bridge prints its ``ConfigContainer`` as YAML; Megatron-LM its argument list:
  ``parse.config_value``), as ``"log"``;
- a Bridge ``ConfigContainer`` YAML given for that side (``run_config.yaml``: ``bridge_config.read_bridge_config``),
  as ``"config"``, which wins over the log.

``attribution_note(diffs)`` says what the comparison can and cannot attribute: the logs hold no stage times and
no counterfactual, so each differing setting is named with what it does, and the audit command that measures each
factor (``vlmdata audit --bridge-config REAL.yaml --benchmark-config MOCK.yaml``) is named.

The settings compared, their dump keys, Bridge fields and meanings are the table's (``vlmdata.audit.settings.fields``:
``COMPARED``); ``SETTING_KEYS`` and ``MEANING`` are derived from it.
"""

from __future__ import annotations

from typing import Any

from vlmdata.audit.logs.parse import config_value
from vlmdata.audit.settings.bridge_config import read_bridge_config
from vlmdata.audit.settings.fields import COMPARED, FIELDS

__all__ = ["SETTING_KEYS", "setting_differences", "attribution_note"]

# setting -> (the dump's key, BridgeRun attribute or ("execution", key)), in the compare table's order: settings.fields
SETTING_KEYS: dict[str, tuple[str, Any]] = {
    name: (
        str(FIELDS[name].dump),
        tuple(attr.split(".", 1)) if "." in (attr := str(FIELDS[name].bridge_attr)) else attr,
    )
    for name in COMPARED
}
MEANING = {name: str(FIELDS[name].meaning) for name in COMPARED}  # what a difference in each setting changes
_FALSE = {"false", "none", "null", "0", ""}


def _norm(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    if s.lower() in ("true", "false"):
        return s.lower()
    if s.lower() in ("null", "none"):
        return "none"
    return s.rsplit(".", 1)[-1] if "." in s and not s.replace(".", "").isdigit() else s


def _from_config(path: str) -> dict[str, str | None]:
    run = read_bridge_config(path)
    out = {}
    for key, (_, attr) in SETTING_KEYS.items():
        v = run.execution.get(attr[1]) if isinstance(attr, tuple) else getattr(run, attr, None)
        out[key] = _norm(v)
    return out


def _from_log(parsed: dict) -> dict[str, str | None]:
    cfg = parsed.get("config", {})
    out = {}
    for key, (dump_key, _) in SETTING_KEYS.items():
        section = "dataset" if key == "dataset" else "model" if key != "micro_batch_size" else None
        v = config_value(cfg, dump_key, section=section)
        if key == "dataset" and not any(p.startswith("dataset.") for p in cfg):
            v = None  # a _target_ outside the dataset section is not the data's
        out[key] = _norm(v)
    return out


def setting_differences(parsed: dict[str, dict], configs: dict[str, str | None] | None = None) -> list[dict[str, Any]]:
    """Every setting the mock and real runs state differently: ``[{"key", "mock", "real", "mock_from",
    "real_from", "meaning"}]`` (a setting only one side states is not a difference)."""
    configs = configs or {}
    values: dict[str, dict[str, tuple[str | None, str]]] = {}
    for side in ("mock", "real"):
        log = _from_log(parsed[side])
        path = configs.get(side)
        conf = _from_config(path) if path else {}
        values[side] = {k: (conf[k], "config") if conf.get(k) is not None else (log[k], "log") for k in SETTING_KEYS}
    out = []
    for key in SETTING_KEYS:
        (a, af), (b, bf) = values["mock"][key], values["real"][key]
        if a is None or b is None or a == b:
            continue
        if key == "recompute" and {a, b} <= _FALSE:
            continue
        out.append({"key": key, "mock": a, "real": b, "mock_from": af, "real_from": bf, "meaning": MEANING[key]})
    return out


def attribution_note(diffs: list[dict[str, Any]]) -> str | None:
    """What the comparison can attribute (module docstring); None when the runs differ in no setting."""
    if not diffs:
        return None
    named = ", ".join(d["key"] for d in diffs)
    return (
        f"the two runs differ in configuration, not only in data ({named}: the settings table says what each "
        "changes). The logs' gap mixes them and logs cannot split it (no stage times, no counterfactual); "
        "`vlmdata audit --bridge-config REAL.yaml --benchmark-config MOCK.yaml` measures each factor"
    )
