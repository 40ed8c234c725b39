"""``build_report(results)``: the runner's result of each rank -> the report dict (summaries per source, the
ranks merged, stragglers flagged and checked against the model, the verdict). Both are typed
(``vlmdata.audit.analysis.result_types``: ``AuditResult`` in, ``Report`` out); the JSON is the same dicts."""

from __future__ import annotations

from typing import cast

from vlmdata.audit.analysis.attribution import attribute, benchmark_verdict
from vlmdata.audit.analysis.metrics import TOKEN_DEFINITIONS, summarize
from vlmdata.audit.analysis.ranks import merge_ranks
from vlmdata.audit.analysis.ranks import stragglers as find_stragglers
from vlmdata.audit.analysis.result_types import AuditResult, Report, ReportSource
from vlmdata.audit.analysis.straggler_check import check_ranks
from vlmdata.audit.analysis.verdict import decide, out_of_memory_verdict
from vlmdata.audit.report.notes import collect_notes, stop_words
from vlmdata.audit.report.run_tables import summary_stage_tflops

SCHEMA = "vlmdata.audit/2"


def build_report(
    results: list[AuditResult], *, threshold: float, straggler_ratio: float = 1.10, seed: int = 0
) -> Report:
    """``results``: the runner's result of each rank (one element without torchrun)."""
    first = results[0]
    world = len(results)
    interleaved = (first.get("measurement") or {}).get("method") == "interleaved"
    report: Report = {
        "schema": SCHEMA,
        "kind": "run",
        "config": first["config"],
        "environment": first["environment"],
        "workload": first["workload"],
        "world_size": world,
        "measurement": first.get("measurement"),
        "run": first.get("run"),
        "composition": first.get("composition"),
        "straggler_model": first.get("straggler_model"),
        "benchmark": first.get("benchmark"),
        "plan": first.get("plan"),
        "notes": collect_notes(first),  # beside the verdict in every rendering (report.notes)
        "stopped": stop_words(first.get("measurement")),
        "definitions": {
            "tokens": TOKEN_DEFINITIONS,
            "sources": {n: s.get("definition") for n, s in first["sources"].items()},
        },
        "sources": {},
        "stragglers": {},
    }
    runs = {}
    for name in first["sources"]:
        if first["sources"][name].get("oom") or not first["sources"][name]["records"]:
            kept = {k: v for k, v in first["sources"][name].items() if k != "world_size"}
            report["sources"][name] = cast(ReportSource, kept)
            report["sources"][name]["summary"] = None  # ran out of memory: a result, not a figure
            continue
        per_rank = [r["sources"][name]["records"] for r in results]
        records = per_rank[0] if world == 1 else merge_ranks(per_rank)
        summary = summarize(records, world)
        summary["stage_tflops"] = summary_stage_tflops(summary, records, first["sources"][name].get("trains"))
        src = {
            "summary": summary,
            "records": records,
            **{k: v for k, v in first["sources"][name].items() if k not in ("records", "world_size")},
        }
        if world > 1:
            src["per_rank"] = [summarize(recs) for recs in per_rank]
            report["stragglers"][name] = find_stragglers(per_rank, straggler_ratio)
        report["sources"][name] = cast(ReportSource, src)
        runs[name] = {"records": records, "world_size": world, "interleaved": interleaved}
    if world > 1:  # the straggler model against the measured slowest rank of every step
        ep = ((first.get("run") or {}).get("run") or {}).get("ep") or 1
        per = {n: [r["sources"][n]["records"] for r in results] for n in runs}
        report["straggler_check"] = check_ranks(per, sync="micro_batch" if ep > 1 else "step")
    summaries = {k: v["summary"] for k, v in report["sources"].items() if v["summary"] is not None}
    flagged = sorted({r for s in report["stragglers"].values() for r in s["flagged"]})
    if "real" in runs and len(runs) > 1:
        margin = float((first.get("config") or {}).get("repeat_margin") or 0.0)
        verdict = decide(runs, summaries, threshold=threshold, stragglers=flagged, seed=seed, repeat_margin=margin)
        report["verdict"] = verdict
        _judge_benchmark(report, verdict, threshold, margin, seed)
    elif (report["sources"].get("real") or {}).get("oom"):  # no gap to measure: real data does not fit
        oom = {n: o for n, s in report["sources"].items() if (o := s.get("oom"))}
        report["verdict"] = out_of_memory_verdict(oom, list(runs))
    else:
        report["verdict"] = None
    return report


def _judge_benchmark(report: Report, v: dict, threshold: float, margin: float, seed: int) -> None:
    """With a benchmark configuration: the attribution (``report["attribution"]``) and its verdict, which decides
    the status of the report's verdict ``v`` when it is worse (a benchmark run as the training run is not cannot be judged by data alone)."""
    attr = attribute(report, seed=seed)
    report["attribution"] = attr
    if not attr or not attr["mocks"]:
        return
    bv = benchmark_verdict(attr, 1 + threshold, margin)
    v["benchmark"] = bv
    v["status"] = bv["status"]  # the headline: the benchmark as it ran against the run as it runs
    v["line"] = "\n".join([v["line"], *bv["lines"]])
