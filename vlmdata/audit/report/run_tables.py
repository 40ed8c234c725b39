"""Report tables about the run the audit reproduced: its settings and where each came from, the per-stage
efficiency (TFLOP/s of every stage), the composition from a slice, and the simulated data-parallel stragglers.

Each function takes the report dict (``vlmdata.audit.report.build_report``) and returns ``(head, rows)`` with
string cells, or ``None`` when the report has nothing for it; ``report.py`` renders them in markdown, HTML
and the terminal alike.
"""

from __future__ import annotations

from typing import Any

from vlmdata.audit.analysis.result_types import Records
from vlmdata.audit.settings.fields import FIELDS
from vlmdata.audit.workload.stages import BACKWARD_PARTS, STAGE_PARTS, backward_factors, stage_tflops

_OWN_LABELS = {  # the rows that are not settings (derived, or the model as built); a setting's label is the table's
    "model": "model",
    "micro_batches_per_step": "micro-batches per optimizer step (this rank)",
    "padding_rule": "padding",
}
RUN_ROWS = tuple(  # (key, label), in the table's order: settings labelled by vlmdata.audit.settings.fields
    (key, _OWN_LABELS[key] if key in _OWN_LABELS else FIELDS[key].label or key)
    for key in (
        *("model", "micro_batch_size", "global_batch_size", "micro_batches_per_step", "seq_length", "seq_policy"),
        *("padding_rule", "tp", "pp", "ep", "cp", "etp", "dp"),
        *("freeze_language_model", "freeze_vision_model", "freeze_vision_projection", "recompute"),
        *("use_distributed_optimizer", "manual_gc", "manual_gc_interval", "slice_layers"),
    )
)
DERIVED = {"padding_rule": "seq_policy", "micro_batches_per_step": "global_batch_size"}
STAGE_COLUMNS = (*STAGE_PARTS, "backward", "step")


def _f(v, fmt="{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def run_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    """Every setting of the run, its value and its source (flag, bridge config, model config, default)."""
    run = report.get("run")
    if not run:
        return None
    spec, model, src = run["run"], run["model"], run.get("sources") or {}
    values: dict[str, Any] = dict(spec)
    dec = model["decoder"]
    experts = f", {dec['experts']} experts top-{dec['top_k']}" if dec.get("experts") else ""
    values["model"] = f"{model['name']} ({model['family']}: {dec['layers']} x {dec['hidden_size']}{experts})"
    layers, experts_m = run.get("measured_layers"), run.get("measured_experts")
    values["slice_layers"] = (
        f"{layers} of {dec['layers']}"
        + (f", {experts_m} experts per layer" if experts_m else "")
        + (" (a slice: the step is composed)" if run.get("sliced") else "")
    )
    rows = []
    for key, label in RUN_ROWS:
        origin = src.get(DERIVED.get(key, key), "default")
        if key in DERIVED:
            origin = f"derived ({origin})"
        v = values.get(key)
        rows.append([label, "-" if v is None else str(v), origin])
    return ["setting", "value", "from"], rows


def stage_efficiency_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    """TFLOP/s of every stage of every source (model FLOPs of the part the stage runs / its time; "-": the stage
    did no work, e.g. the backward of a frozen part with nothing trainable before it)."""
    rows = []
    for name, src in report.get("sources", {}).items():
        s = src.get("summary")
        if not s or not s.get("stage_tflops"):
            continue
        t = s["stage_tflops"]
        rows.append([name, *[_f(t.get(k), "{:.3g}") for k in STAGE_COLUMNS]])
    if not rows:
        return None
    return ["source (TFLOP/s)", *STAGE_COLUMNS], rows


def summary_stage_tflops(summary: dict, records: Records, trains: dict | None = None) -> dict[str, float | None]:
    """``stage_tflops`` of one source from its mean stage times and mean FLOPs per step; ``trains``: what trained
    (the workload's ``trains()``), for the backward as it ran (``stages.backward_factors``; None: everything)."""
    n = len(records) or 1
    parts = ("lm_layers_flops", "lm_head_flops", "vision_flops", "projector_flops", "flops")
    flops = {p: sum(float(r.get(p) or 0.0) for r in records) / n for p in parts}
    flops["total_flops"] = flops.pop("flops")
    stages = dict(summary.get("stages_ms") or {})
    stages["total"] = summary["step_ms"]["mean"]
    backward = None
    if trains is not None:
        backward = {p: 0.0 for p in BACKWARD_PARTS}
        for r in records:
            factors = backward_factors(trains, bool(r.get("vision_flops")))
            for p in BACKWARD_PARTS:
                backward[p] += factors[p] * float(r.get(p) or 0.0) / 3 / n
    return stage_tflops(stages, flops, backward)


def composition_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    """How the measured slice became the user's step (only when it is not the identity)."""
    c = report.get("composition")
    if not c or c.get("identity"):
        return None
    k, full = c["layers_measured"], c["layers_full"]
    modes = {r.get("composed_decoder") for s in (report.get("sources") or {}).values() for r in s.get("records") or []}
    if modes == {"plain layers"}:
        decoder = f"{k} measured, + {full - k} plain layers at the slice's measured plain-layer cost, to {full}"
    else:  # a slice without plain layers scales its whole decoder (or sources differ: say both)
        decoder = f"{k} measured, x {c['decoder_scale']:.2f} to {full}"
        if "plain layers" in modes:
            decoder += " where a step had no plain-layer times, else + plain layers at their measured cost"
    rows = [
        ["decoder layers", decoder],
        ["optimizer", f"x {c['optimizer_scale']:.3f} (this GPU's shard of the trainable parameters)"],
        [
            "expert-parallel all-to-all (modelled)",
            "none"
            if c["ep"] <= 1
            else f"EP {c['ep']}, top-{c['top_k']}, hidden {c['hidden']}, {c['moe_layers']} MoE "
            f"layers, {c['link_gbps']:.0f} GB/s, {c['latency_us']:.0f} us per call",
        ],
        [
            "data-parallel gradient reduce (not added)",
            f"{c['dp_grad_reduce_ms']:.1f} ms at DP {c['dp']} if not overlapped",
        ],
        ["formula", c["formula"]],
    ]
    return ["term", "how"], rows


def straggler_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    """The simulated straggler factor and mock/real ratio per DP size."""
    sim = report.get("straggler_model")
    if sim and sim.get("error"):
        return ["straggler model"], [[f"not simulated: {sim['error']}"]]
    if not sim or "sources" not in sim:
        return None
    head = [
        "source",
        "DP",
        "step ms (slowest rank)",
        "mean rank ms",
        "straggler factor",
        "vs real",
        "vs real without stragglers",
    ]
    rows = []
    for name, per in sim["sources"].items():
        for dp in sim["dp_sizes"]:
            d = per.get(dp) or per.get(str(dp)) or {}
            ratio = (sim.get("ratio_vs_real") or {}).get(name, {})
            flat = (sim.get("ratio_vs_real_no_stragglers") or {}).get(name, {})
            rows.append(
                [
                    name,
                    str(dp),
                    _f(d.get("step_ms"), "{:.1f}"),
                    _f(d.get("mean_rank_ms"), "{:.1f}"),
                    _f(d.get("straggler_factor"), "{:.3f}"),
                    _f(ratio.get(dp, ratio.get(str(dp))), "{:.3f}"),
                    _f(flat.get(dp, flat.get(str(dp))), "{:.3f}"),
                ]
            )
    return head, rows


def straggler_check_rows(report: dict) -> tuple[list[str], list[list[str]]] | None:
    """Under torchrun: the straggler model's slowest-rank prediction against the measured slowest rank."""
    chk = report.get("straggler_check")
    if not chk:
        return None
    rows = [
        [
            name,
            str(c["steps"]),
            f"{c['measured_ms']:.1f}",
            f"{c['predicted_ms']:.1f}",
            f"{c['error']:+.1%}",
            f"{c['factor_measured']:.3f}",
            f"{c['factor_predicted']:.3f}",
        ]
        for name, c in chk.items()
    ]
    return ["source", "steps", "measured slowest rank ms", "model ms", "error", "factor measured", "factor model"], rows
