"""Which tuning decisions does a mock get wrong? Choice sets, agreement and regret over a sweep.

A sweep runs every configuration (micro-batch size, frozen vision, recompute, parallelism...) on every
source. For each source the configurations that *fit* (did not run out of memory, and whose measured peak
memory is at most ``memory_limit_gb`` when one is given) are ranked by throughput (samples/s, and
non-pad tokens/s apart). Choices are made only where the data decides (intervals: ``resample``, the
headline's bootstrap over global steps, each configuration drawn independently):

- **best set**: the configurations not separable from the source's best: their throughput ratio to the best
  has an interval reaching 1 (every fitting configuration without an interval: fewer than
  ``verdict.MIN_INTERVAL_STEPS`` steps decide nothing); the point best (``best``) is its first member;
- **choice** and **choice set**: a mock's best and best set, the configurations a team tuning on the mock
  would adopt; **same**: every configuration of the mock's set is in real's set (``agreement``: same,
  partly or different);
- **Kendall tau**: rank agreement of the mock's and real's throughputs over the configurations that ran
  on both (``scipy.stats.kendalltau``; 1 = same order, -1 = reversed; None with fewer than two);
- **regret** of a configuration: the fraction of real throughput lost by adopting it,
  ``1 - real(config) / real(real's best)`` with its interval; infinite when it runs out of memory (or does
  not fit) on real data. The mock's regret is over its choice set: ``regret`` the largest point, its
  interval, ``regret_range`` the points' range.

A mock is MISLEADING when every configuration of its choice set costs more than ``threshold`` with its whole
interval (``state`` offender), within when every one costs at most ``threshold`` with its whole interval,
else undecided (measure more); its line says why in one sentence. A configuration stored without its steps
gives exact points (``resample``): the sets are the point bests, as before intervals existed.
"""

from __future__ import annotations

import math

from vlmdata.audit.analysis.resample import LogFigure, SweepReplicates, interval

METRICS = ("samples_per_s", "nonpad_tokens_per_s")
OFFENDER, WITHIN, UNDECIDED = "offender", "within", "undecided"
ROUNDING = 1e-9  # equal figures that differ only in float rounding (a fake clock's sums) are not separable


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
    seed: int = 0,
    replicates: SweepReplicates | None = None,
) -> dict:
    """The decisions of a sweep.

    Args:
        configs: ``[{"values": {key: value}, "sources": {name: {"rates": {metric: float}, "peak_mem_bytes":
            int | None, "oom": bool, "steps"?: resample.step_columns(...)}}, "paired"?: bool}]``, one per
            configuration.
        threshold: a mock whose choice set costs more than this of real throughput is misleading.
        memory_limit_gb: configurations whose measured peak memory exceeds this do not fit.
        real: the reference source.
        metric: the throughput the choice is made by (rankings are given for ``METRICS``).
        seed: the bootstrap's seed (when ``replicates`` is not given).
        replicates: the sweep's ``SweepReplicates`` (shared with the knob effects).

    Returns:
        ``{"metric", "memory_limit_gb", "configs": [label], "per_source": {name: {"rows", "ranking": {metric:
        [label]}, "best", "best_set"}}, "mocks": {name: {"choice", "choice_set", "real_best", "real_set",
        "same", "agreement", "kendall_tau", "regret", "regret_lo", "regret_hi", "regret_range", "state",
        "choice_on_real", "line"}}, "misleading": [name], "undecided": [name], "line"}``.
    """
    reps = replicates or SweepReplicates(configs, seed=seed)
    limit = None if memory_limit_gb is None else memory_limit_gb * 1e9
    labels = [label(c["values"]) for c in configs]
    names = list(dict.fromkeys(n for c in configs for n in c["sources"]))
    per_source = {name: _source_rows(name, labels, configs, limit, metric, reps) for name in names}
    result = {
        "metric": metric,
        "memory_limit_gb": memory_limit_gb,
        "threshold": threshold,
        "configs": labels,
        "per_source": per_source,
        "mocks": {},
        "misleading": [],
        "undecided": [],
    }
    if real not in per_source:
        result["line"] = "no decisions: the sweep did not measure real"
        return result
    for name in names:
        if name in (real, "synthetic"):
            continue
        d = _mock_decision(per_source[name], per_source[real], metric, labels, reps, real, threshold)
        d["line"] = _line(name, d, threshold)
        result["mocks"][name] = d
        if d["state"] == OFFENDER:
            result["misleading"].append(name)
        elif d["state"] == UNDECIDED:
            result["undecided"].append(name)
    result["line"] = _decisions_line(result, per_source[real], threshold)
    return result


def _decisions_line(result: dict, real: dict, threshold: float) -> str:
    bad = [result["mocks"][n]["line"] for n in result["misleading"] + result["undecided"]]
    if bad:
        return "; ".join(bad)
    best = ", ".join(real["best_set"]) or None
    return f"every mock's choices are within {threshold:.0%} of real's best ({best})"


def _vs(reps: SweepReplicates, source: str, i: int, j: int, metric: str) -> dict | None:
    """Configuration i's throughput over configuration j's on ``source``: ratio and interval (None bounds
    from too few steps)."""
    a, b = reps.figure(i, source, metric), reps.figure(j, source, metric)
    if a is None or b is None:
        return None
    lf = LogFigure.ratio(a, b)
    ci = interval(lf)
    return {
        "ratio": math.exp(lf.point),
        "lo": None if ci is None else math.exp(ci[0]),
        "hi": None if ci is None else math.exp(ci[1]),
    }


def _source_rows(
    name: str, labels: list[str], configs: list[dict], limit: float | None, metric: str, reps: SweepReplicates
) -> dict:
    """One source's row per configuration, its rankings (configurations that fit), its best and best set."""
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
    best = (ranking[metric] or [None])[0]
    best_set = []
    if best is not None:
        b = labels.index(best)
        for lab in ranking[metric]:
            i = labels.index(lab)
            vs = _vs(reps, name, i, b, metric)
            rows[i]["vs_best"] = vs
            if i == b or vs is None or vs["hi"] is None or vs["hi"] >= 1 - ROUNDING:
                best_set.append(lab)
    return {"rows": rows, "ranking": ranking, "best": best, "best_set": best_set}


def _regret(i: int, real: dict, best: int, metric: str, reps: SweepReplicates, real_name: str) -> dict:
    """Configuration i's regret on real data (module docstring)."""
    row = real["rows"][i]
    if row["oom"] or not row["fits"]:
        why = "oom" if row["oom"] else "does not fit"
        return {"config": row["config"], "regret": math.inf, "lo": math.inf, "hi": math.inf, "on_real": why}
    vs = _vs(reps, real_name, i, best, metric)
    assert vs is not None  # it fits, so it has a figure
    lo, hi = (None, None) if vs["lo"] is None else (1 - vs["hi"], 1 - vs["lo"])
    return {"config": row["config"], "regret": 1 - vs["ratio"], "lo": lo, "hi": hi, "on_real": row[metric]}


def _mock_decision(
    mock: dict, real: dict, metric: str, labels: list[str], reps: SweepReplicates, real_name: str, threshold: float
) -> dict:
    """A mock's choice set against real's: the same or not, the rank agreement, the real throughput it loses."""
    choice, real_best = mock["best"], real["best"]
    m_set, r_set = mock["best_set"], real["best_set"]
    d: dict = {"choice": choice, "choice_set": m_set, "real_best": real_best, "real_set": r_set}
    d["same"] = bool(m_set) and set(m_set) <= set(r_set)
    d["agreement"] = "same" if d["same"] else "partly" if set(m_set) & set(r_set) else "different"
    d["kendall_tau"] = _tau(mock, real, metric)
    if choice is None or real_best is None:
        d.update(regret=None, regret_lo=None, regret_hi=None, regret_range=None, choice_on_real=None)
        d["state"], d["regrets"] = UNDECIDED if choice is None else None, []
        return d
    regrets = [_regret(labels.index(c), real, labels.index(real_best), metric, reps, real_name) for c in m_set]
    worst = max(regrets, key=lambda r: r["regret"])
    d["regrets"] = regrets
    d["regret"], d["regret_lo"], d["regret_hi"] = worst["regret"], worst["lo"], worst["hi"]
    d["regret_range"] = [min(r["regret"] for r in regrets), worst["regret"]]
    d["choice_on_real"] = next(r["on_real"] for r in regrets if r["config"] == choice)
    d["worst"] = worst["config"]
    if all(r["lo"] is not None and r["lo"] > threshold for r in regrets):
        d["state"] = OFFENDER
    elif all(r["hi"] is not None and r["hi"] <= threshold for r in regrets):
        d["state"] = WITHIN
    else:
        d["state"] = UNDECIDED
    return d


def _tau(mock: dict, real: dict, metric: str) -> float | None:
    """Kendall's tau of the mock's and real's throughputs over the configurations both ran."""
    # scipy: heavy, needed only once configurations are ranked (`vlmdata audit --help` reads `label`)
    from scipy.stats import kendalltau

    real_rows = {r["config"]: r for r in real["rows"]}
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
    return None if tau is None or math.isnan(tau) else float(tau)


def _pct(r: dict) -> str:
    if r["regret"] == math.inf:
        return str(r["on_real"])
    text = f"{r['regret']:.0%}"
    if r["lo"] is None:
        return text
    lo, hi = f"{round(r['lo'], 9):.0%}", f"{round(r['hi'], 9):.0%}"
    return text + ("" if lo == hi == text else f" [{lo}, {hi}]")  # an exact figure without its interval


def _line(name: str, d: dict, threshold: float) -> str:
    if d["choice"] is None:
        return f"{name}: no configuration fits"
    if d["real_best"] is None:
        return f"{name} picks {d['choice']}; no configuration fits on real data"
    if len(d["choice_set"]) == 1:
        choice = d["choice"]
        if d["same"]:
            return f"{name} picks real's best ({choice})"
        if d["choice_on_real"] == "oom":
            return f"{name} picks {choice}, which runs out of memory on real data; real's best is {d['real_best']}"
        if d["choice_on_real"] == "does not fit":
            return (
                f"{name} picks {choice}, which does not fit the memory limit on real data; real's best is "
                f"{d['real_best']}"
            )
        only = d["regrets"][0]
        text = f"{name} picks {choice}, {_pct(only)} slower on real data than real's best ({d['real_best']})"
        return text + (f": undecided against {threshold:.0%}" if d["state"] == UNDECIDED else "")
    cannot = f"{name} cannot separate {', '.join(d['choice_set'])} (within its interval)"
    if d["same"]:
        return f"{cannot}, all among real's best ({', '.join(d['real_set'])})"
    costs = "; ".join(f"{r['config']} {_pct(r)}" for r in d["regrets"])
    verdict = {
        OFFENDER: f"every one costs more than {threshold:.0%}",
        WITHIN: f"none costs more than {threshold:.0%}",
        UNDECIDED: f"undecided against {threshold:.0%}",
    }[d["state"]]
    return f"{cannot}; real throughput lost against real's best ({d['real_best']}): {costs}: {verdict}"
