"""Two training logs of one workload, compared: the audit's verdict on the mock run against the real run.

``compare_logs(mock, real, ...)`` reads both (``parse.parse_log``, ``records.to_records``), refuses logs of
different workloads (``WorkloadMismatch``: global batch size, seq_length, GPUs, model fields of the dump)
unless ``allow_mismatch``, and decides with ``verdict.decide`` on samples/s and TFLOP/s per iteration. VLM
advice needs image evidence in a log (``image_evidence``: vision settings of the dump, a VL model class,
image fields in the iteration lines).
"""

from __future__ import annotations

import math
import os
import re

from vlmdata.audit.analysis.verdict import DEFAULT_THRESHOLD, decide, verdict_line
from vlmdata.audit.logs.parse import LogError, config_value, parse_log
from vlmdata.audit.logs.records import log_summary, to_records
from vlmdata.audit.logs.settings import attribution_note, setting_differences
from vlmdata.options_util import shown

# dump fields that identify the model (compared between the logs when both print them)
MODEL_KEYS = (
    "_target_",
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "num_experts",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "padded_vocab_size",
    "vocab_size",
)
# dump fields that exist only in vision-language runs (Megatron-LM's examples/multimodal, Bridge's
# Qwen-VL providers and VLM dataset configs); Megatron-LM's generic vision args (img_h, patch_dim) are
# printed by every run and do not count
IMAGE_KEYS = (
    "vision_model_type",
    "language_model_type",
    "use_tiling",
    "max_num_tiles",
    "use_thumbnail",
    "image_tag_type",
    "freeze_vit",
    "vision_projection_type",
    "vision_config",
    "freeze_vision_model",
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "spatial_merge_size",
    "min_pixels",
    "max_pixels",
    "hf_processor_path",
    "max_num_images",
    "max_visual_tokens",
    "num_images",
    "image_size",
)
VL_CLASS_RE = re.compile(r"(?i)(\bvl\b|[a-z0-9_]vl(?:moe)?(?:model)?provider|_vl\b|\d_?vl|vision|llava|multimodal|vlm)")


class WorkloadMismatch(LogError):
    """The two logs are of different workloads (global batch size, seq_length, GPUs or model).

    ``differences``: ``[(what, mock value, real value)]``."""

    def __init__(self, differences: list[tuple[str, str, str]]):
        self.differences = differences
        super().__init__(
            "the logs are of different workloads: "
            + "; ".join(f"{what} {a} (mock) vs {b} (real)" for what, a, b in differences)
            + "; compare two runs of one workload, or pass `allow_mismatch`"
        )


def image_evidence(parsed: dict) -> str | None:
    """Why the log is a vision-language run (the first image setting, VL class or image field found), or None."""
    cfg = parsed.get("config", {})
    for path, value in cfg.items():
        leaf = path.rsplit(".", 1)[-1]
        if leaf in IMAGE_KEYS:
            return f"{path}: {value}" if value else path
        if leaf in (
            "_target_",
            "model_name",
            "hf_model_id",
            "hf_model_name_or_path",
            "pretrained_model_name_or_path",
            "hf_processor_path",
            "tokenizer_model",
        ) and VL_CLASS_RE.search(value or ""):
            return f"{path}: {value}"
    for f in parsed.get("lines", []):
        for k in f:
            if isinstance(k, str) and ("image" in k or "visual" in k):
                return f"iteration field '{k}'"
    return None


def _model(parsed: dict) -> dict[str, str]:
    cfg = parsed.get("config", {})
    out = {}
    for k in MODEL_KEYS:
        v = config_value(cfg, k, section="model")
        if v is not None:
            out[k] = v
    for (tp, pp), n in parsed.get("parameters", {}).items():
        out[f"parameters on rank ({tp}, {pp})"] = str(n)
    return out


def _mismatches(parsed: dict[str, dict], infos: dict[str, dict]) -> list[tuple[str, str, str]]:
    m, r = parsed["mock"], parsed["real"]
    diffs = []
    checks = [
        ("global batch size", infos["mock"]["global_batch_size"], infos["real"]["global_batch_size"]),
        ("seq_length", infos["mock"]["seq_length"], infos["real"]["seq_length"]),
        ("GPUs (world size)", m.get("world_size"), r.get("world_size")),
    ]
    for what, a, b in checks:
        if a is not None and b is not None and a != b:
            diffs.append((what, str(a), str(b)))
    ma, mb = _model(m), _model(r)
    for k in ma:
        if k in mb and ma[k] != mb[k]:
            diffs.append((f"model {k}", ma[k], mb[k]))
    return diffs


LOG_MORE = "log more intervals (run longer, or log more often: log_interval)"


def _adjust_verdict(v: dict, real: dict, images: bool) -> dict:
    """Log-specific corrections of ``decide``'s verdict: no VLM advice without image information, and the
    verdict line rebuilt. (Too few logged intervals for an interval is ``decide``'s undecided.)"""
    if not images:
        for k in v["knobs"]:
            if k["knob"] == "variance":
                cv = real["step_ms"]["cv"]
                k["message"] = (
                    f"iteration time varies between logged intervals (cv {cv:.0%}): look for stalls "
                    "(checkpointing, evaluation, data loading, preemption) or measure more iterations"
                )
    v["line"] = verdict_line(v)
    return v


def _check_arguments(mock, real, warmup, seq_length, threshold, allow_mismatch, mock_config, real_config) -> None:
    """``compare_logs``' arguments: paths are strings, numbers in range (``LogError`` naming the parameter)."""
    for name, v, optional in (
        ("mock", mock, False),
        ("real", real, False),
        ("mock_config", mock_config, True),
        ("real_config", real_config, True),
    ):
        if not (isinstance(v, (str, os.PathLike)) or (optional and v is None)):
            raise LogError(f"`{name}` must be a path to a log file, not {type(v).__name__}")
    for name, v, low in (("warmup", warmup, 0), ("seq_length", seq_length, 1)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 1 << 40):
            raise LogError(f"`{name}` must be an integer {low}..{1 << 40} or None, not {shown(v)}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < math.inf:
        raise LogError(f"`threshold` must be a finite number >= 0, not {shown(threshold)}")
    if not isinstance(allow_mismatch, bool):
        raise LogError(f"`allow_mismatch` must be True or False, not {shown(allow_mismatch)}")


def compare_logs(
    mock: str,
    real: str,
    *,
    warmup: int | None = None,
    seq_length: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    allow_mismatch: bool = False,
    mock_config: str | None = None,
    real_config: str | None = None,
) -> dict:
    """The audit verdict for two training logs (``mock`` run vs ``real`` run of the same workload).

    Args:
        mock: log of the mock-data run.
        real: log of the real-data run.
        warmup: iterations to exclude from both (default: see the module docstring).
        seq_length: tokens per sample when the logs do not print seq_length.
        threshold: MISLEADING when mock/real exceeds 1 + threshold.
        allow_mismatch: compare even when the workloads differ (the differences are listed).
        mock_config, real_config: each run's Bridge ``ConfigContainer`` YAML (optional): the settings the runs
            differ in are read from them first, then from the logs' dumps (``settings.setting_differences``).

    Returns:
        The report dict: ``{"schema", "kind": "logs", "config", "workload", "sources": {"mock", "real"},
        "verdict", "mismatches", "settings", "notes"}`` (``report_content`` says how to show it).

    Raises:
        LogError: a log cannot be read or has nothing to measure after warm-up.
        WorkloadMismatch: the logs differ in workload and ``allow_mismatch`` is False.
    """
    _check_arguments(mock, real, warmup, seq_length, threshold, allow_mismatch, mock_config, real_config)
    parsed, runs, sources, infos = {}, {}, {}, {}
    for name, path in (("mock", mock), ("real", real)):
        parsed[name], recs, infos[name] = _read_side(path, warmup, seq_length)
        runs[name] = {"records": recs, "world_size": 1}  # TFLOP/s are already per GPU in the logs
        sources[name] = {"summary": log_summary(recs), "log": infos[name], "records": recs}
    diffs = _mismatches(parsed, infos)
    if diffs and not allow_mismatch:
        raise WorkloadMismatch(diffs)
    evidence = {k: image_evidence(p) for k, p in parsed.items()}
    images = any(evidence.values())
    summaries = {k: v["summary"] for k, v in sources.items()}
    verdict = _adjust_verdict(decide(runs, summaries, threshold=threshold, more=LOG_MORE), summaries["real"], images)
    settings = setting_differences(parsed, {"mock": mock_config, "real": real_config})
    notes = [f"{k}: {n}" for k in ("mock", "real") for n in infos[k]["notes"]]
    if note := attribution_note(settings):
        notes.append(note)
        verdict["line"] += "\nthe runs differ in configuration: " + ", ".join(
            f"{d['key']} {d['mock']} vs {d['real']}" for d in settings
        )
    if diffs:
        notes.append("compared although the workloads differ: " + "; ".join(f"{w} {a} vs {b}" for w, a, b in diffs))
    config = {"mock": mock, "real": real, "warmup": warmup, "seq_length": seq_length}
    config |= {"mock_config": mock_config, "real_config": real_config}
    return {
        "schema": "vlmdata.audit/1",
        "kind": "logs",
        "config": {**config, "threshold": threshold, "allow_mismatch": allow_mismatch},
        "workload": _workload(parsed, infos, {"present": images, "evidence": evidence}),
        "sources": sources,
        "verdict": verdict,
        "mismatches": [{"what": w, "mock": a, "real": b} for w, a, b in diffs],
        "settings": settings,
        "notes": notes,
    }


def _read_side(path: str, warmup: int | None, seq_length: int | None) -> tuple[dict, list[dict], dict]:
    """One log: parsed, its records after warm-up (LogError when none are left) and what was kept."""
    parsed = parse_log(path)
    recs, info = to_records(parsed, warmup, seq_length)
    if not recs:
        end = max((f["iteration"] for f in parsed["lines"]), default="?")
        raise LogError(
            f"{path!r}: no logged interval after {info['warmup_iterations']} warm-up iterations "
            f"(the log ends at iteration {end}); lower the warm-up"
        )
    return parsed, recs, info


def _workload(parsed: dict[str, dict], infos: dict[str, dict], images: dict) -> dict:
    """The workload the two logs describe (real's figures, the model of whichever log printed one)."""
    model = {k: _model(p) for k, p in parsed.items()}
    return {
        "global_batch_size": infos["real"]["global_batch_size"],
        "seq_length": infos["real"]["seq_length"],
        "world_size": parsed["real"].get("world_size"),
        "model": model["real"] or model["mock"],
        "images": images,
    }
