"""The benchmark against the training run, per GPU, and its gap split into factors: ``attribute(report)``.

Input: a report (``report.build``) whose result has a ``benchmark`` block (``runner.benchmark_block``): both
sides' configurations, every measured name's data and configuration (``arms``), the model's decoder layers, the
routed experts' share of the decoder (``layout.expert_share``), ``expert_imbalance`` and the whole model's
parameters per freezable part. The measured names (``vlmdata.audit.settings.benchmark``): each mock ``m`` under the
benchmark's configuration, ``real`` under the run's, ``m@run`` (the mock under the run's), ``m@+<link>`` (the
chain between) and ``real@benchmark``.

**Headline**, per mock, per GPU (``layout.layout_efficiency`` turns one GPU's step into the layout's)::

    gap = rate(m) e_B(m) / (rate(real) e_R(real))        for samples/s, non-pad tokens/s and TFLOP/s
                                                          (TFLOP/s with and without the vision tower's FLOPs)

**Factors**, whose product is the gap exactly (the chain telescopes)::

    data      = rate(m@run) e_R(m@run) / (rate(real) e_R(real))     the data, under the run's configuration
    link i    = rate(C_i) / rate(C_{i-1})                           each measured setting, on the mock's data
                (C_0 = m@run, C_n = m)
    composed  = e_B(m) / e_R(m@run)                                 the layout and routing balance (modelled),
                split into the layout terms' ratios (tp, cp, experts, pp)

Measured factors carry a paired bootstrap interval (``metrics.ratio_ci``; the arms are interleaved, step k of each
in the same round); the composed factor is a model (no interval). The order is fixed (data first, then the links
in ``benchmark.LINK_GROUPS`` order); the **interaction** it hides is measured when ``real@benchmark`` ran:
``(rate(m) / rate(real@benchmark)) / (rate(m@run) / rate(real))``, the data factor under the benchmark's
configuration over the data factor under the run's (1: the data costs the same share in both).

**Degenerate benchmark**: the trainable parameters on each side (whole model: ``part_params``, less the frozen
parts), and those the mock can reach: an image-free mock (no image in any step) reaches no vision or projection
parameter. A benchmark whose mock trains nothing, or under ``DEGENERATE_FRACTION`` of the run's trainable
parameters, is a finding (``degenerate``) the verdict reports as MISLEADING. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vlmdata.audit.analysis.layout import FORMULAS, layout_efficiency
from vlmdata.audit.analysis.metrics import ratio_ci
from vlmdata.audit.settings.benchmark import ACTION, REAL_ARM, RUN_ARM

__all__ = ["attribute", "HEADLINE_METRICS", "DEGENERATE_FRACTION"]

HEADLINE_METRICS = ("samples_per_s", "nonpad_tokens_per_s", "tflops")
DEGENERATE_FRACTION = 0.1  # a mock that trains under a tenth of the run's trainable parameters
REAL = "real"


def _efficiency(block: dict, side: str, summary: dict, micro_batches: int) -> dict:
    cfg = block[side]
    run, ex = cfg["run"], cfg["execution"]
    return layout_efficiency(
        summary.get("stages_ms") or {},
        micro_batches=micro_batches,
        tp=int(run["tp"]),
        cp=int(run["cp"]),
        pp=int(run["pp"]),
        vp=int(ex.get("vp") or 1),
        ep=int(run["ep"]),
        layers=int(block["layers"]),
        expert_fraction=float(block["expert_share"]),
        force_balance=bool(ex.get("force_balance")),
        imbalance=float(block["expert_imbalance"]),
        pp_first_layers=ex.get("pp_first_layers"),
        pp_last_layers=ex.get("pp_last_layers"),
    )


def _tflops_no_vision(records: list[dict]) -> float | None:
    ms = sum(float(r.get("step_ms") or 0.0) for r in records)
    if not ms or any(r.get("flops") is None for r in records):
        return None
    flops = sum(
        float(r["flops"]) - float(r.get("vision_flops") or 0) - float(r.get("projector_flops") or 0) for r in records
    )
    return flops / (ms / 1e3) / 1e12


def _ratio(sources: dict, a: str, b: str, metric: str, seed: int) -> dict | None:
    ra, rb = sources[a]["records"], sources[b]["records"]
    return ratio_ci(ra, rb, metric, paired=True, seed=seed)


def _scaled(ci: dict | None, k: float) -> dict | None:
    if ci is None:
        return None
    return {
        "ratio": ci["ratio"] * k,
        "lo": None if ci["lo"] is None else ci["lo"] * k,
        "hi": None if ci["hi"] is None else ci["hi"] * k,
    }


def _per_gpu(src: dict, eff: float) -> dict:
    rates = src["summary"]["rates"]
    out = {m: (rates.get(m) * eff if rates.get(m) is not None else None) for m in HEADLINE_METRICS}
    nv = _tflops_no_vision(src["records"])
    out["tflops_without_vision"] = None if nv is None else nv * eff
    return out


def _trainable(params: dict, run: dict, image_free: bool) -> dict:
    parts = {
        "language": not run["freeze_language_model"],
        "vision": not run["freeze_vision_model"],
        "projection": not run["freeze_vision_projection"],
    }
    total = sum(params[p] for p, on in parts.items() if on)
    reach = sum(params[p] for p, on in parts.items() if on and (p == "language" or not image_free))
    return {"trainable": total, "reachable": reach, "parts": [p for p, on in parts.items() if on]}


def _degenerate(block: dict, mock: str, image_free: bool) -> dict:
    params = block["part_params"]
    run = _trainable(params, block["run"]["run"], False)
    bench = _trainable(params, block["benchmark"]["run"], image_free)
    finding = None
    if bench["reachable"] == 0:
        finding = (
            f"{mock} trains nothing under the benchmark's configuration: its trainable parts "
            f"({', '.join(bench['parts']) or 'none'}) are unreachable without images, so its step has no backward "
            f"pass (the run trains {params_text(run['trainable'])} parameters)"
        )
    elif run["trainable"] and bench["reachable"] < DEGENERATE_FRACTION * run["trainable"]:
        finding = (
            f"{mock} trains {params_text(bench['reachable'])} parameters under the benchmark's configuration, "
            f"{bench['reachable'] / run['trainable']:.1%} of the run's {params_text(run['trainable'])}"
        )
    return {"run": run, "benchmark": bench, "finding": finding}


def _factors(report: Mapping[str, Any], block: dict, mock: str, e: dict, seed: int) -> list[dict]:
    """data, each link, composed (module docstring); each with ``value`` and, when measured, ``lo`` / ``hi``."""
    sources = report["sources"]
    at_run = f"{mock}@{RUN_ARM}" if f"{mock}@{RUN_ARM}" in sources else mock
    out = []
    data = _scaled(_ratio(sources, at_run, REAL, "samples_per_s", seed), e[at_run] / e[REAL])
    out.append({"factor": "data", "action": ACTION["data"], "measured": True, **(data or {"ratio": None})})
    chain = [at_run] + [f"{mock}@+{lk['name']}" for lk in block["links"][:-1]] + ([mock] if at_run != mock else [])
    for lk, (a, b) in zip(block["links"], zip(chain[1:], chain[:-1])):
        ci = _ratio(sources, a, b, "samples_per_s", seed) if a in sources and b in sources else None
        out.append({"factor": lk["name"], "action": lk["action"], "measured": True, **(ci or {"ratio": None})})
    out.append(
        {
            "factor": "composed",
            "action": ACTION["composed"],
            "measured": False,
            "ratio": e[mock] / e[at_run] if e[at_run] else None,
            "lo": None,
            "hi": None,
        }
    )
    return out


def _mock_attribution(report: Mapping[str, Any], block: dict, mock: str, seed: int) -> dict:
    sources = report["sources"]
    arms = block["arms"]
    layouts = {
        n: _efficiency(
            block,
            "benchmark" if arms[n]["config"] == "benchmark" else "run",
            sources[n]["summary"],
            arms[n]["micro_batches"],
        )
        for n in sources
        if n in arms and sources[n].get("summary") and (n in (mock, REAL, REAL_ARM) or n.startswith(f"{mock}@"))
    }
    e = {n: lay["efficiency"] for n, lay in layouts.items()}
    gpu_mock = _per_gpu(sources[mock], e[mock])
    gpu_real = _per_gpu(sources[REAL], e[REAL])
    headline = {}
    for m in (*HEADLINE_METRICS, "tflops_without_vision"):
        a, b = gpu_mock.get(m), gpu_real.get(m)
        headline[m] = {"benchmark": a, "run": b, "ratio": a / b if a is not None and b else None}
    ci = _scaled(_ratio(sources, mock, REAL, "samples_per_s", seed), e[mock] / e[REAL])
    if ci is not None:
        headline["samples_per_s"].update(lo=ci["lo"], hi=ci["hi"])
    factors = _factors(report, block, mock, e, seed)
    product = math.prod(f["ratio"] for f in factors if f["ratio"] is not None)
    images = (sources[mock]["summary"].get("shape") or {}).get("images_per_sample")
    interaction = None
    if REAL_ARM in sources and sources[REAL_ARM].get("summary") and f"{mock}@{RUN_ARM}" in sources:
        r = sources
        interaction = (_rate(r[mock]) / _rate(r[REAL_ARM])) / (_rate(r[f"{mock}@{RUN_ARM}"]) / _rate(r[REAL]))
    ranked = [f for f in factors if f["ratio"] is not None and f["factor"] != "data"]
    largest = max(ranked, key=lambda f: abs(math.log(f["ratio"])), default=None)
    return {
        "headline": headline,
        "factors": factors,
        "product": product,
        "interaction": interaction,
        "largest": largest,
        "layout": {n: {k: v for k, v in lay.items() if k != "formulas"} for n, lay in layouts.items()},
        "degenerate": _degenerate(block, mock, not images),
    }


def _rate(src: dict) -> float:
    return float(src["summary"]["rates"]["samples_per_s"])


def attribute(report: Mapping[str, Any], seed: int = 0) -> dict | None:
    """Per mock: the per-GPU headline, the factors and their product, the interaction, the largest factor, the
    layout terms and the degenerate-benchmark check (module docstring); None without a benchmark."""
    block = report.get("benchmark")
    sources = report.get("sources") or {}
    if not block or not (sources.get(REAL) or {}).get("summary"):
        return None
    mocks = [n for n in block["arms"] if block["arms"][n]["config"] == "benchmark" and "@" not in n]
    out = {}
    for mock in mocks:
        if (sources.get(mock) or {}).get("summary"):
            out[mock] = _mock_attribution(report, block, mock, seed)
    return {"mocks": out, "formulas": dict(FORMULAS), "imbalance": block["expert_imbalance"]}


def benchmark_verdict(attr: dict, limit: float, margin: float) -> dict:
    """Each mock's per-GPU samples/s gap against ``limit`` (its interval widened by ``margin``, as the headline
    verdict's) and its degenerate finding: ``{"states": {mock: offender|within|undecided}, "lines": [...],
    "status"}``; a degenerate benchmark is an offender whatever its figure."""
    states, lines = {}, []
    for mock, a in attr["mocks"].items():
        h = a["headline"]["samples_per_s"]
        lo, hi = h.get("lo"), h.get("hi")
        if lo is not None and margin:
            lo, hi = lo / (1 + margin), hi * (1 + margin)
        figure = "undecided" if lo is None else "offender" if lo > limit else "within" if hi <= limit else "undecided"
        states[mock] = "offender" if a["degenerate"]["finding"] else figure
        lines.append(benchmark_line(mock, a, figure, limit, (lo, hi)))
    status = "MISLEADING" if "offender" in states.values() else "UNDECIDED" if "undecided" in states.values() else "OK"
    return {"states": states, "lines": lines, "status": status}


def params_text(n: float) -> str:
    """A parameter count for people: 30.5B, 612M, 4.1K."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(int(n))


def benchmark_line(mock: str, a: dict, figure: str, limit: float, bounds: tuple) -> str:
    """One mock's benchmark-against-run sentence: the per-GPU gap, its largest factor, the degenerate finding."""
    h = a["headline"]["samples_per_s"]
    ratio = h.get("ratio")
    lo, hi = bounds
    shown = "n/a" if ratio is None else f"{ratio:.2f}x" + ("" if lo is None else f" [{lo:.2f}, {hi:.2f}]")
    words = {"offender": "above", "within": "within", "undecided": "not separable from"}
    text = (
        f"benchmark vs run: {mock} under the benchmark's configuration runs {shown} the samples/s per GPU of real "
        f"under the run's ({words[figure]} the {limit:.2f}x limit)"
    )
    big = a.get("largest")
    if big and big.get("ratio"):
        text += f"; largest factor: {big['action']}: x{big['ratio']:.2f}"
    if a["degenerate"]["finding"]:
        text += f"; DEGENERATE: {a['degenerate']['finding']}"
    return text
