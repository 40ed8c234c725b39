"""The advice under a verdict: rules on the real source's summary, each with the share of step time at stake,
largest first (``verdict.decide`` names the first as the next knob to look at).

Rules: data wait > 5% of step time (the loader), the vision encoder's share of the forward (> 30%, or the
largest forward stage), padding > 30% of tokens, host-to-device copies > 5%, lm_head + loss > 25%, step-time
variation (cv > 20%), and ranks flagged as stragglers under torchrun.
"""

from __future__ import annotations

from vlmdata.audit.workload.stages import FORWARD_STAGES

__all__ = ["knobs"]


def knobs(real: dict, stragglers: list[int] | None = None) -> list[dict]:
    """Rules on the real source's summary, each with the share of step time at stake, largest first."""
    st, step = real.get("stages_ms") or {}, real["step_ms"]["mean"]
    share = (lambda *ks: sum(st.get(k, 0.0) for k in ks) / step) if step else (lambda *ks: 0.0)
    fwd = sum(st.get(k, 0.0) for k in FORWARD_STAGES)
    out = []
    wait = real.get("data_wait_fraction") or 0.0
    if wait > 0.05:
        out.append(
            {
                "knob": "data_wait",
                "share": wait,
                "message": f"data wait is {wait:.0%} of step time (> 5%): the loader does not keep up; add DataLoader "
                "workers, pin memory, use the fast image path or GPU JPEG decode",
            }
        )
    vis = st.get("vision", 0.0) + st.get("projector", 0.0)
    if fwd and (vis / fwd > 0.30 or vis == max(st.get(k, 0.0) for k in FORWARD_STAGES) > 0):
        out.append(
            {
                "knob": "vision_encoder",
                "share": min(3 * share("vision", "projector"), 1.0),
                "message": f"vision encoder dominates: {vis / fwd:.0%} of the forward (backward about the same share); "
                "profile it separately, use varlen flash attention, lower max_pixels, or give it its own "
                "parallelism",
            }
        )
    pad = (real.get("shape") or {}).get("padding_fraction") or 0.0
    if pad > 0.30:
        out.append(
            {
                "knob": "padding",
                "share": pad,
                "message": f"padding is {pad:.0%} of tokens (> 30%): pack sequences or pad to a multiple of 128 "
                "instead of seq_length; compare runs by non-pad tokens/s",
            }
        )
    h2d = share("h2d")
    if h2d > 0.05:
        out.append(
            {
                "knob": "h2d",
                "share": h2d,
                "message": f"host-to-device copies take {h2d:.0%} of step time: pin memory (non_blocking copies)",
            }
        )
    head = share("lm_head_loss")
    if head > 0.25:
        out.append(
            {
                "knob": "lm_head",
                "share": head,
                "message": f"lm_head + loss take {head:.0%} of step time: the vocabulary projection over every token; "
                "compute logits on loss tokens only or fuse the cross entropy",
            }
        )
    cv = real["step_ms"].get("cv") or 0.0
    if cv > 0.20:
        out.append(
            {
                "knob": "variance",
                "share": cv / 2,
                "message": f"step time varies (cv {cv:.0%}): batches carry different visual work; bucket by visual "
                "tokens or balance images across micro-batches",
            }
        )
    if stragglers:
        out.append(
            {
                "knob": "stragglers",
                "share": 1.0,
                "message": f"ranks {stragglers} carry more visual tokens per step and stall the others: balance images "
                "across data-parallel ranks",
            }
        )
    return sorted(out, key=lambda k: -k["share"])
