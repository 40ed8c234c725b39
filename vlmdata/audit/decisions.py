"""Which tuning decisions does a mock get wrong? Rankings, agreement and regret over a sweep.

A sweep runs every configuration (micro-batch size, frozen vision, recompute, parallelism...) on every
source. For each source the configurations that *fit* (did not run out of memory, and whose measured peak
memory is at most ``memory_limit_gb`` when one is given) are ranked by throughput (samples/s, and
non-pad tokens/s apart). Then, for each mock:

- **choice**: the mock's best configuration, the one a team tuning on the mock would adopt;
- **same**: whether it is real's best;
- **Kendall tau**: rank agreement of the mock's and real's throughputs over the configurations that ran
  on both (``scipy.stats.kendalltau``; 1 = same order, -1 = reversed; None with fewer than two);
- **regret**: the fraction of real throughput lost by adopting the mock's choice,
  ``1 - real(choice) / real(real's best)``; infinite when the choice runs out of memory (or does not fit)
  on real data.

A mock whose regret exceeds ``threshold`` makes the audit MISLEADING; its line says why in one sentence.
"""

from __future__ import annotations

import math

METRICS = ("samples_per_s", "nonpad_tokens_per_s")


def label(values: dict) -> str:
    """A configuration's name: ``micro_batch_size=4 freeze_vision=1`` (booleans as 0/1)."""
    return " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in values.items())


def _fits(cell: dict | None, limit_bytes: float | None) -> bool:
    if not cell or cell.get("oom") or cell.get("rates", {}).get("samples_per_s") is None:
        return False
    peak = cell.get("peak_mem_bytes")
    return limit_bytes is None or peak is None or peak <= limit_bytes


def decide_configs(
    configs: list[dict],
    *,
    threshold: float = 0.10,
    memory_limit_gb: float | None = None,
    real: str = "real",
    metric: str = "samples_per_s",
) -> dict:
    """The decisions of a sweep.

    Args:
        configs: ``[{"values": {key: value}, "sources": {name: {"rates": {metric: float}, "peak_mem_bytes":
            int | None, "oom": bool}}}]``, one per configuration.
        threshold: a mock whose regret exceeds it is misleading.
        memory_limit_gb: configurations whose measured peak memory exceeds this do not fit.
        real: the reference source.
        metric: the throughput the choice is made by (rankings are given for ``METRICS``).

    Returns:
        ``{"metric", "memory_limit_gb", "configs": [label], "per_source": {name: {"rows", "ranking": {metric:
        [label]}, "best"}}, "mocks": {name: {"choice", "real_best", "same", "kendall_tau", "regret",
        "choice_on_real", "line"}}, "misleading": [name], "line"}``.
    """
    limit = None if memory_limit_gb is None else memory_limit_gb * 1e9
    labels = [label(c["values"]) for c in configs]
    names = list(dict.fromkeys(n for c in configs for n in c["sources"]))
    per_source = {name: _source_rows(name, labels, configs, limit, metric) for name in names}
    result = {
        "metric": metric,
        "memory_limit_gb": memory_limit_gb,
        "threshold": threshold,
        "configs": labels,
        "per_source": per_source,
        "mocks": {},
        "misleading": [],
    }
    if real not in per_source:
        result["line"] = "no decisions: the sweep did not measure real"
        return result
    real_best = per_source[real]["best"]
    for name in names:
        if name in (real, "synthetic"):
            continue
        d = _mock_decision(per_source[name], per_source[real], metric)
        d["line"] = _line(name, d)
        result["mocks"][name] = d
        if d["regret"] is not None and d["regret"] > threshold:
            result["misleading"].append(name)
    bad = [result["mocks"][n]["line"] for n in result["misleading"]]
    result["line"] = (
        "; ".join(bad)
        if bad
        else f"every mock picks a configuration within {threshold:.0%} of real's best ({real_best})"
    )
    return result


def _source_rows(name: str, labels: list[str], configs: list[dict], limit: float | None, metric: str) -> dict:
    """One source's row per configuration, its rankings (configurations that fit) and its best."""
    rows = []
    for lab, c in zip(labels, configs):
        cell = c["sources"].get(name) or {}
        peak = cell.get("peak_mem_bytes")
        rows.append(
            {
                "config": lab,
                "oom": bool(cell.get("oom")),
                "fits": _fits(cell, limit),
                "peak_mem_gb": None if peak is None else peak / 1e9,
                **{m: (cell.get("rates") or {}).get(m) for m in METRICS},
            }
        )
    ranking = {
        m: [r["config"] for r in sorted((r for r in rows if r["fits"] and r[m] is not None), key=lambda r: -r[m])]
        for m in METRICS
    }
    return {"rows": rows, "ranking": ranking, "best": (ranking[metric] or [None])[0]}


def _mock_decision(mock: dict, real: dict, metric: str) -> dict:
    """A mock's choice against real's: the same or not, the rank agreement, the real throughput it loses."""
    # scipy: heavy, needed only once configurations are ranked (`vlmdata audit --help` reads `label`)
    from scipy.stats import kendalltau

    real_rows = {r["config"]: r for r in real["rows"]}
    choice, real_best = mock["best"], real["best"]
    d = {"choice": choice, "real_best": real_best, "same": choice is not None and choice == real_best}
    both = [
        (r[metric], real_rows[r["config"]][metric])
        for r in mock["rows"]
        if r[metric] is not None
        and not r["oom"]
        and real_rows[r["config"]][metric] is not None
        and not real_rows[r["config"]]["oom"]
    ]
    # scipy's inferred return type of kendalltau lacks SignificanceResult.statistic
    tau = kendalltau([a for a, _ in both], [b for _, b in both]).statistic if len(both) >= 2 else None  # pyright: ignore[reportAttributeAccessIssue]
    d["kendall_tau"] = None if tau is None or math.isnan(tau) else float(tau)
    on_real = real_rows.get(choice) if choice else None
    if choice is None or real_best is None:
        d["regret"], d["choice_on_real"] = None, None
    else:
        assert on_real is not None  # every source has a row per configuration
        if on_real["oom"]:
            d["regret"], d["choice_on_real"] = math.inf, "oom"
        elif not on_real["fits"]:
            d["regret"], d["choice_on_real"] = math.inf, "does not fit"
        else:
            d["regret"] = 1 - on_real[metric] / real_rows[real_best][metric]
            d["choice_on_real"] = on_real[metric]
    return d


def _line(name: str, d: dict) -> str:
    if d["choice"] is None:
        return f"{name}: no configuration fits"
    if d["same"]:
        return f"{name} picks real's best ({d['choice']})"
    if d["choice_on_real"] == "oom":
        return f"{name} picks {d['choice']}, which runs out of memory on real data; real's best is {d['real_best']}"
    if d["choice_on_real"] == "does not fit":
        return (
            f"{name} picks {d['choice']}, which does not fit the memory limit on real data; real's best is "
            f"{d['real_best']}"
        )
    return f"{name} picks {d['choice']}, {d['regret']:.0%} slower on real data than real's best ({d['real_best']})"
