"""A configuration's parallel layout composed from one GPU's measured step: ``layout_efficiency``.

The audit measures one data-parallel rank's whole step on one GPU (a slice composed to the whole model:
``vlmdata.audit.analysis.compose``). A run spreads that step over ``TP * PP * CP`` GPUs (expert parallelism lies inside
them). Its per-GPU throughput is the measured throughput times the layout's **efficiency** ``e`` (1 = perfect
scaling)::

    samples/s/GPU = measured samples/s * e,        e = T0 / (TP * CP * PP * T4)

from the measured step's mean stage times per global step (``stages``, composed), grouped as

    V = vision + projector + backward_vision           the vision tower (first pipeline stage only)
    D = forward_other + lm_forward + backward_decoder + ep_all_to_all   the decoder (x: its routed-expert share)
    H = lm_head_loss + backward_head                   the output layer and loss (last pipeline stage)
    O = optimizer + grad_sync                          sharded with the weights
    W = the rest (data wait, host preparation, copies, host gaps): the host's, not divided by any GPU count
    T0 = W + O + V + D + H                             the measured step

and four terms, applied in this order, each an efficiency whose product is ``e`` (``TERMS``):

    tp       T1 = W + (O + V + D + H) / TP                               e_tp = T0 / (TP * T1)
    cp       T2 = W + O/(TP CP) + V/TP + (D + H)/(TP CP)                 e_cp = T1 / (CP * T2)
             (the vision tower is replicated on every context-parallel rank; the decoder is split)
    experts  D' = D (1 - x) + D x b,  b = 1 with forced balance or EP = 1, else ``expert_imbalance``
             T3 = T2 with D' for D                                        e_ep = T2 / T3
    pp       per micro-batch: v = V/(m TP), d = D'/(m TP CP), h = H/(m TP CP); stage i holds a fraction f_i of the
             decoder layers (uniform, or ``pp_first_layers`` / ``pp_last_layers``), the vision tower on stage 0 and
             the output layer on the last: s_0 = v + d f_0, s_last = d f_last + h, s_i = d f_i
             T4 = W + O/(TP CP PP) + (m + (PP - 1)/VP) * max_i s_i       e_pp = T3 / (PP * T4)
             (1F1B: the slowest stage sets the pace, a bubble of PP - 1 micro-batches, divided by VP with
             interleaving)

Assumed, not measured (one GPU cannot): tensor- and context-parallel collectives are hidden (sequence parallelism,
overlap), so TP and CP scale compute perfectly and only the host's share ``W`` does not scale; pipeline
send/receive is free; ``x`` (the routed experts' share of the decoder's time) is their share of the decoder's
FLOPs per token (``expert_share``); ``b``, the busiest expert-parallel rank's load over the mean under natural
routing, is a parameter (``EXPERT_IMBALANCE``, no trained router exists here to measure it) and the report shows
the efficiency at each of ``SENSITIVITY``. Pure: no torch.
"""

from __future__ import annotations

from typing import Any

from vlmdata.audit.settings.defaults import EXPERT_IMBALANCE

__all__ = ["EXPERT_IMBALANCE", "SENSITIVITY", "TERMS", "layout_efficiency", "expert_share", "stage_groups"]

SENSITIVITY = (1.0, 1.1, 1.25, 1.5)
TERMS = ("tp", "cp", "experts", "pp")
FORMULAS = {
    "tp": "T1 = W + (O + V + D + H)/TP; e_tp = T0/(TP T1)",
    "cp": "T2 = W + O/(TP CP) + V/TP + (D + H)/(TP CP); e_cp = T1/(CP T2)",
    "experts": "D' = D(1 - x) + D x b (b = 1 forced balance or EP = 1); T3 = T2 with D'; e_ep = T2/T3",
    "pp": "T4 = W + O/(TP CP PP) + (m + (PP-1)/VP) max_i s_i; s_0 = v + d f_0, s_last = d f_last + h; e_pp = T3/(PP T4)",
}
_GROUPS = {
    "V": ("vision", "projector", "backward_vision"),
    "D": ("forward_other", "lm_forward", "backward_decoder", "ep_all_to_all"),
    "H": ("lm_head_loss", "backward_head"),
    "O": ("optimizer", "grad_sync"),
}


def stage_groups(stages: dict[str, float]) -> dict[str, float]:
    """``V``, ``D``, ``H``, ``O``, ``W`` and ``T0`` (ms per step) from a stage split (module docstring)."""
    out = {g: sum(float(stages.get(s, 0.0) or 0.0) for s in names) for g, names in _GROUPS.items()}
    total = sum(float(v or 0.0) for k, v in stages.items() if k != "total")
    out["W"] = max(total - sum(out.values()), 0.0)
    out["T0"] = sum(out[g] for g in ("V", "D", "H", "O", "W"))
    return out


def expert_share(text_config: Any) -> float:
    """The routed experts' share of one decoder layer's FLOPs per token (0 for a dense decoder)."""
    n_exp = getattr(text_config, "num_experts", None)
    k = getattr(text_config, "num_experts_per_tok", None)
    f = getattr(text_config, "moe_intermediate_size", None)
    if not n_exp or not k or not f:
        return 0.0
    h = int(text_config.hidden_size)
    nq, nkv = int(text_config.num_attention_heads), int(text_config.num_key_value_heads)
    d = int(getattr(text_config, "head_dim", None) or h // nq)
    attn = h * nq * d + 2 * h * nkv * d + nq * d * h
    experts = int(k) * 3 * h * int(f)
    return experts / (attn + h * int(n_exp) + experts)


def _stage_fractions(pp: int, layers: int, first: int | None, last: int | None) -> list[float]:
    if pp <= 1:
        return [1.0]
    rest = layers - (first or 0) - (last or 0)
    middle = pp - (first is not None) - (last is not None)
    even = rest / middle if middle > 0 else 0.0
    counts = [float(first) if first is not None else even]
    counts += [even] * (pp - 2)
    counts.append(float(last) if last is not None else even)
    return [c / layers for c in counts]


def layout_efficiency(
    stages: dict[str, float],
    *,
    micro_batches: int,
    tp: int = 1,
    cp: int = 1,
    pp: int = 1,
    vp: int = 1,
    ep: int = 1,
    layers: int = 1,
    expert_fraction: float = 0.0,
    force_balance: bool = False,
    imbalance: float = EXPERT_IMBALANCE,
    pp_first_layers: int | None = None,
    pp_last_layers: int | None = None,
) -> dict[str, Any]:
    """The layout's efficiency and its terms (module docstring).

    Args:
        stages: mean ms per global step of each stage (``metrics.stage_split``), composed to the whole model.
        micro_batches: m, micro-batches per global step on one data-parallel rank.
        tp, cp, pp, vp, ep: the layout; layers: the decoder's layers; expert_fraction: x.
        force_balance: Megatron's ``moe_router_force_load_balancing`` (b = 1).
        imbalance: b under natural routing; pp_first_layers / pp_last_layers: an uneven pipeline split.

    Returns:
        ``{"efficiency", "terms": {term: e}, "times_ms": {T0..T4}, "groups", "stage_ms", "imbalance",
        "sensitivity": {b: efficiency}, "formulas"}``.
    """
    g = stage_groups(stages)
    m = max(1, int(micro_batches))
    shape = (m, tp, cp, pp, vp, ep, layers, expert_fraction, force_balance)
    sens = {b: _efficiency(g, *shape, b, pp_first_layers, pp_last_layers)[0] for b in SENSITIVITY}
    e, terms, times, stage_ms = _efficiency(g, *shape, imbalance, pp_first_layers, pp_last_layers)
    return {
        "efficiency": e,
        "terms": terms,
        "times_ms": times,
        "groups": g,
        "stage_ms": stage_ms,
        "imbalance": 1.0 if (force_balance or ep <= 1) else imbalance,
        "sensitivity": {str(b): v for b, v in sens.items()},
        "formulas": dict(FORMULAS),
    }


def _efficiency(g, m, tp, cp, pp, vp, ep, layers, x, force, b, first, last):
    W, Opt, V, D, H, T0 = g["W"], g["O"], g["V"], g["D"], g["H"], g["T0"]
    T1 = W + (Opt + V + D + H) / tp
    T2 = W + Opt / (tp * cp) + V / tp + (D + H) / (tp * cp)
    bal = 1.0 if (force or ep <= 1) else b
    Db = D * (1 - x) + D * x * bal
    T3 = W + Opt / (tp * cp) + V / tp + (Db + H) / (tp * cp)
    v, d, h = V / (m * tp), Db / (m * tp * cp), H / (m * tp * cp)
    fr = _stage_fractions(pp, layers, first, last)
    if pp <= 1:
        stage_ms = [v + d + h]
        T4 = T3
    else:
        stage_ms = [v + d * fr[0]] + [d * f for f in fr[1:-1]] + [d * fr[-1] + h]
        T4 = W + Opt / (tp * cp * pp) + (m + (pp - 1) / max(1, vp)) * max(stage_ms)
    terms = {
        "tp": T0 / (tp * T1) if T1 else 1.0,
        "cp": T1 / (cp * T2) if T2 else 1.0,
        "experts": T2 / T3 if T3 else 1.0,
        "pp": T3 / (pp * T4) if T4 else 1.0,
    }
    e = T0 / (tp * cp * pp * T4) if T4 else 1.0
    return e, terms, {"T0": T0, "T1": T1, "T2": T2, "T3": T3, "T4": T4}, stage_ms
