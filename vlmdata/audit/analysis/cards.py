"""GPU cards a sweep's peak memory is held against: the named cards, and which configurations fit each.

``CARDS``: a card's name -> its nominal memory in GB (1e9 bytes, the unit of ``memory_limit_gb`` and of the
report's peaks): ``h100`` (and ``a100``) 80, ``h200`` 141, ``b200`` 192. ``memory_limit(text)``: a number of
GB or a card's name -> GB (``memory_limit_gb`` takes either). A configuration fits a card on a source when
the peak memory measured there (bytes allocated by tensors, the largest of any step) is at most the card's
GB; the CUDA context and the allocator's cache need a few GB more, so a peak within 5% of the card is
flagged ``tight``.

``card_fits(configs, ...)``: per card (``SWEEP_CARDS``, and the user's ``memory_limit_gb`` when it is none of
them) the configurations that fit per source, and, deciding as on that card (``decisions.decide_configs``
with its limit: a mock chooses among the configurations that fit *on the mock*), each mock's choice set
and whether it fits on real data; a line for each mock whose choice does not ("on h100 (80 GB): imagefree's
best micro_batch_size=4 (95.1 GB on real data) does not fit; real's best there is micro_batch_size=2"). Without measured peaks (a CPU run) nothing is stated.
"""

from __future__ import annotations

from vlmdata.audit.analysis.decisions import decide_configs
from vlmdata.audit.analysis.resample import SweepReplicates
from vlmdata.audit.sources.registry import AuditError

__all__ = ["CARDS", "SWEEP_CARDS", "TIGHT", "memory_limit", "card_fits"]

CARDS = {"a100": 80.0, "h100": 80.0, "h200": 141.0, "b200": 192.0}
SWEEP_CARDS = ("h100", "h200", "b200")  # the cards every sweep report holds its peaks against
TIGHT = 0.95


def memory_limit(text: str | float) -> float:
    """A memory limit in GB from a number or a card's name (``CARDS``); ``AuditError`` naming
    ```memory_limit_gb``` otherwise."""
    if isinstance(text, (int, float)):
        value = float(text)
    elif text.strip().lower() in CARDS:
        return CARDS[text.strip().lower()]
    else:
        try:
            value = float(text)
        except ValueError:
            names = ", ".join(CARDS)
            raise AuditError(f"`memory_limit_gb` takes a number of GB or a card ({names}), got {text!r}") from None
    if not value > 0:
        raise AuditError(f"`memory_limit_gb` must be > 0, got {text!r}")
    return value


def _cards(memory_limit_gb: float | None) -> list[tuple[str, float]]:
    cards = [(name, CARDS[name]) for name in SWEEP_CARDS]
    if memory_limit_gb is not None and memory_limit_gb not in {gb for _, gb in cards}:
        cards.append(("limit", float(memory_limit_gb)))
    return sorted(cards, key=lambda c: c[1])


def _name(card: str, gb: float) -> str:
    return f"{card} ({gb:g} GB)" if card != "limit" else f"the {gb:g} GB limit"


def _mock_line(name: str, card: str, gb: float, d: dict, real_peaks: dict) -> str | None:
    """The line of a mock whose choice set holds a configuration that does not fit on real data."""
    bad = [r for r in d.get("regrets") or [] if r["on_real"] in ("does not fit", "oom")]
    if not bad:
        return None
    items = [
        f"{r['config']} ("
        + ("out of memory" if r["on_real"] == "oom" else f"{real_peaks[r['config']]:.1f} GB")
        + " on real data)"
        for r in bad
    ]
    if len(d["choice_set"]) == 1:
        text = f"{name}'s best {items[0]} does not fit"
    else:
        verb = "does" if len(items) == 1 else "do"
        text = f"{name} cannot separate {', '.join(d['choice_set'])}; of those {', '.join(items)} {verb} not fit"
    best = f"real's best there is {d['real_best']}" if d.get("real_best") else "nothing fits on real data"
    return f"on {_name(card, gb)}: {text}; {best}"


def card_fits(
    configs: list[dict],
    *,
    threshold: float,
    memory_limit_gb: float | None = None,
    replicates: SweepReplicates | None = None,
    real: str = "real",
) -> dict:
    """Which configurations fit each card, and which mocks' choices do not fit on real data (module docstring).

    Args:
        configs: the sweep's configurations as ``decisions.decide_configs`` takes them.
        threshold: the decisions' threshold.
        memory_limit_gb: the user's limit (added as a card of its own when it is none of ``SWEEP_CARDS``).
        replicates: the sweep's ``SweepReplicates``.
        real: the reference source.

    Returns:
        ``{"measured": bool, "cards": [{"card", "gb", "fits": {source: [label]}, "tight": {source: [label]},
        "real_best", "mocks": {name: {"choice", "choice_set", "fits_on_real", "line"}}}], "lines": [line]}``;
        ``measured`` False (and no cards) without a measured peak.
    """
    peaks = any(
        (cell or {}).get("peak_mem_bytes") is not None and not (cell or {}).get("oom")
        for c in configs
        for cell in c["sources"].values()
    )
    out: dict = {"measured": peaks, "cards": [], "lines": []}
    if not peaks:
        return out
    for card, gb in _cards(memory_limit_gb):
        d = decide_configs(configs, threshold=threshold, memory_limit_gb=gb, real=real, replicates=replicates)
        entry: dict = {"card": card, "gb": gb, "fits": {}, "tight": {}, "mocks": {}}
        entry["real_best"] = d["per_source"].get(real, {}).get("best")
        for name, ps in d["per_source"].items():
            entry["fits"][name] = [r["config"] for r in ps["rows"] if r["fits"]]
            entry["tight"][name] = [
                r["config"] for r in ps["rows"] if r["fits"] and (r["peak_mem_gb"] or 0) > TIGHT * gb
            ]
        real_peaks = {r["config"]: r["peak_mem_gb"] for r in d["per_source"].get(real, {}).get("rows", [])}
        for name, m in d["mocks"].items():
            line = _mock_line(name, card, gb, m, real_peaks)
            entry["mocks"][name] = {
                "choice": m["choice"],
                "choice_set": m["choice_set"],
                "fits_on_real": line is None,
                "line": line,
            }
            if line:
                out["lines"].append(line)
        out["cards"].append(entry)
    return out
