"""What the user's Bridge config means for the run beyond its plain values: ``data_parallel`` (Bridge's DP, derived
or assumed), ``in_file_terms`` (an invalid combination of settings said in the file's keys), ``run_notes`` (what the
file says about itself: a mock-data run, a PEFT run, the model read from its provider and fields).

**DP.** Bridge derives the data-parallel size from the world size, ``world / (TP * PP * CP)``, and ``to_yaml``
does not write it: no key of a saved ``ConfigContainer`` records the world size, and only ``comm_overlap`` (when
comm overlap is configured) records ``data_parallel_size`` (``vlmdata.audit.settings.bridge_config``). So DP is, in order:
``dp`` as given ("flag"); the file's ``data_parallel_size`` ("bridge config"); ``gpus`` (the run's GPU count) /
(TP * PP * CP), as Bridge derives it ("derived"; ``gpus`` must be a multiple); under torchrun the ranks
("derived"); else the smallest DP the layout allows ("assumed" when a Bridge config describes the run, said in
words with the settings that fix it: DP sets the micro-batches each step runs, GBS / (MBS * DP)).

Light: no torch.
"""

from __future__ import annotations

import re
from typing import Any

from vlmdata.audit.settings.bridge_config import BridgeRun
from vlmdata.audit.settings.fields import FIELDS, bridge_attrs
from vlmdata.audit.sources.registry import AuditError

__all__ = ["data_parallel", "dp_note", "defaults_note", "in_file_terms", "run_notes", "MOCK_DATASETS", "BRIDGE_NAMES"]

MOCK_DATASETS = ("MockVLMSFTDatasetConfig", "MockGPTDatasetConfig", "MockVLMConversationProvider")
BRIDGE_NAMES = bridge_attrs()  # setting -> BridgeRun field, where they differ (settings.fields)


def data_parallel(
    given: int | None,
    bridge: BridgeRun | None,
    gpus: int | None,
    world_size: int,
    layout: dict[str, int],
) -> tuple[int | None, str]:
    """(DP, its source) as the module docstring says; ``layout``: the resolved tp, pp, cp. DP None: derived by
    ``RunSpec`` from the layout (source "assumed" with a Bridge config, else "default")."""
    if given is not None:
        return given, "flag"
    if bridge is not None and bridge.data_parallel is not None:
        return bridge.data_parallel, "bridge config"
    per_replica = layout["tp"] * layout["pp"] * layout["cp"]
    if gpus is not None:
        if gpus % per_replica:
            raise AuditError(
                f"`gpus` {gpus} is not a multiple of TP x PP x CP = {layout['tp']} x {layout['pp']} x {layout['cp']} "
                f"= {per_replica}: Bridge derives DP as the world size / (TP x PP x CP)"
            )
        return gpus // per_replica, "derived"
    if world_size > 1:
        return world_size, "derived"
    return None, "assumed" if bridge is not None else "default"


def dp_note(run: Any, bridge: BridgeRun) -> str:
    """The words beside an assumed DP (``run``: the resolved ``RunSpec``)."""
    per = run.tp * run.pp * run.cp
    return (
        f"DP {run.data_parallel} assumed: {bridge.path} does not record the data-parallel size (Bridge derives it "
        f"from the world size: GPUs / (TP {run.tp} x PP {run.pp} x CP {run.cp}) = GPUs / {per}), so each measured "
        f"step runs GBS {run.global_batch} / (MBS {run.micro_batch_size} x DP {run.data_parallel}) = "
        f"{run.micro_batches} micro-batches; give `gpus` (the run's GPU count) or `dp` to set it"
    )


_NAME = re.compile(r"`([a-z_]+)`")


def in_file_terms(message: str, bridge: BridgeRun | None, sources: dict[str, str], values: dict[str, Any]) -> str:
    """An invalid combination said in the terms the user wrote it in: every backquoted setting that came from the
    Bridge config replaced by its YAML key and value, the file named first; a flag stays a flag, an assumed DP says
    so."""
    if bridge is None or "bridge config" not in {sources.get(n) for n in _NAME.findall(message)}:
        return message

    paths = bridge.sources

    def key(m: re.Match) -> str:
        name = str(m.group(1))
        src = sources.get(name)
        if src == "bridge config":
            where = paths.get(BRIDGE_NAMES.get(name, name), name)
            return f"{where} ({values.get(name)})"
        if src == "assumed":
            return "DP (assumed: the file does not record it; set `dp` or `gpus`)"
        return m.group(0)

    return f"{bridge.path}: " + _NAME.sub(key, message)


def run_notes(bridge: BridgeRun, peft: Any, model_from_bridge: bool, family: str) -> list[str]:
    """What the Bridge config says about the run that a person must see beside the verdict."""
    notes = []
    dataset = (bridge.dataset_target or "").rsplit(".", 1)[-1]
    if dataset in MOCK_DATASETS:
        notes.append(
            f"{bridge.path} is itself a mock-data run (dataset._target_ {dataset}: generated samples, Bridge's mock "
            "has one 256x256 noise image each): the audit measures every source under its settings; if this file "
            "is your benchmark rather than your training run, give it as `benchmark_config` and the training run's "
            "YAML as `bridge_config`"
        )
    if peft is not None:
        notes.append(f"{peft.line()} (from {peft.path})")
    if model_from_bridge:
        notes.append(
            f"model: {family}, from {bridge.path}'s model._target_ and model section (no config.json given; "
            "random weights)"
        )
    return notes


_STATED = {  # settings a Bridge config states, the key it states each in (settings.fields)
    name: FIELDS[name].bridge[0]
    for name in ("micro_batch_size", "global_batch_size", "seq_length", "tp", "pp", "ep", "cp")
}


def defaults_note(run: Any, bridge: BridgeRun, sources: dict[str, str]) -> str | None:
    """The settings a Bridge config should state but does not, and the defaults used instead (guessed values)."""
    described = run.describe()
    missing = [
        f"{key} ({name} {described.get(name)})" for name, key in _STATED.items() if sources.get(name) == "default"
    ]
    if not missing:
        return None
    return f"{bridge.path} does not state {', '.join(missing)}: the audit's defaults were used"
