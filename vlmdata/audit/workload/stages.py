"""Stage arithmetic of one timed global step: the timing marks ``vlmdata.audit.workload.step.TrainStep`` placed, turned
into stage times (no torch: the report, the rank merge and the logs read the stage names from here).

``STAGES`` (they add up to the step's wall time, up to ``other``; ``vlmdata.audit.workload.step`` says what each
covers); ``FORWARD_STAGES`` and ``BACKWARD_STAGES`` are its forward and backward parts.

``stage_times(marks, micro)`` reads a global step's marks (``(name, ms since the first mark)``, in order:
``start``, ``h2d_end``, the vision / projector / decoder / head marks, ``fwd_end``, the backward's gradient
marks, ``bwd_end`` per micro-batch; ``sync_end`` and ``opt_end`` once) and each micro-batch's host figures
(``wait_ms``, ``prep_ms``, the index of its first mark): the device idle between micro-batches is split into
data wait (at most what the host waited), prep (at most the host's preparation) and ``host_gap`` (the rest).
``plain_layers(marks, first, n)``: the forward and backward time of the decoder layers without DeepStack
additions, and the step's cost of one such layer (the lower median per micro-batch): the per-layer cost a slice
composes with (``vlmdata.audit.analysis.compose``). ``STAGE_PARTS`` maps the
stages to the model parts whose FLOPs they compute (``vlmdata.audit.workload.flops``); ``stage_tflops`` gives each
stage's TFLOP/s, the backward stages counted as they ran (``backward_factors``: a frozen part computes no weight
gradients, a part with nothing trainable before it no input gradients; a stage with no work has no figure).
"""

from __future__ import annotations

__all__ = [
    "STAGE_ORDER",
    "STAGES",
    "FORWARD_STAGES",
    "BACKWARD_STAGES",
    "STAGE_PARTS",
    "stage_times",
    "plain_layers",
    "stage_tflops",
    "backward_factors",
]

# every stage a report shows, in order (the one list of stage names)
STAGE_ORDER = (
    "data_wait",
    "prep",
    "h2d",
    "forward_other",
    "vision",
    "projector",
    "lm_forward",
    "lm_head_loss",
    "backward_head",
    "backward_decoder",
    "backward_vision",
    "backward",  # a step that does not split its backward (older reports, user steps)
    "host_gap",
    "grad_sync",
    "optimizer",
    "ep_all_to_all",  # modelled (vlmdata.audit.analysis.compose), not measured
    "other",
)
NOT_TIMED = ("backward", "ep_all_to_all", "other")  # in reports only: unsplit backward, modelled, the rest
STAGES = tuple(s for s in STAGE_ORDER if s not in NOT_TIMED)  # what TrainStep times
FORWARD_STAGES = ("forward_other", "vision", "projector", "lm_forward", "lm_head_loss")
BACKWARD_STAGES = ("backward_head", "backward_decoder", "backward_vision")


def stage_times(marks: list[tuple[str, float]], micro: list[dict]) -> tuple[dict[str, float], list[float], list[float]]:
    """Stage times of a global step from its marks and the micro-batches' host figures; also each
    micro-batch's device time and its decoder layers' share (forward + backward)."""
    t = {k: 0.0 for k in STAGES}
    micro_ms, decoder_ms = [], []
    starts = [m["mark"] for m in micro] + [len(marks)]
    prev_end = None
    for j, m in enumerate(micro):
        seg = marks[starts[j] : starts[j + 1]]
        at = dict(reversed(seg))  # first occurrence of each name
        end = at.get("bwd_end", seg[-1][1])
        micro_ms.append(end - at["start"])
        before = t["lm_forward"] + t["backward_decoder"]
        _micro_stages(t, seg, at, end)
        decoder_ms.append(t["lm_forward"] + t["backward_decoder"] - before)
        if prev_end is None:
            t["data_wait"] += m["wait_ms"]
            t["prep"] += m["prep_ms"]
        else:  # the device idled from the previous micro-batch's end to this one's start
            gap = max(at["start"] - prev_end, 0.0)
            waited = min(gap, m["wait_ms"])
            prepped = min(gap - waited, m["prep_ms"])
            t["data_wait"] += waited
            t["prep"] += prepped
            t["host_gap"] += gap - waited - prepped
        prev_end = end
    at = dict(reversed(marks))
    if prev_end is not None:
        t["grad_sync"] = at["sync_end"] - prev_end
        t["optimizer"] = at["opt_end"] - at["sync_end"]
    first = micro[0] if micro else {"wait_ms": 0.0, "prep_ms": 0.0}
    t["total"] = first["wait_ms"] + first["prep_ms"] + at.get("opt_end", 0.0)
    return t, micro_ms, decoder_ms


def plain_layers(marks: list[tuple[str, float]], first: int, n: int) -> dict[str, float]:
    """Forward and backward device time of the decoder layers that get no DeepStack addition (``first``..n-1):
    the per-layer cost a slice composes with (``vlmdata.audit.analysis.compose``). Layer i's forward runs from its mark
    to the next layer's (or the final norm's); its backward from the gradient of the next layer's input (or of
    the final norm's input) to the gradient of its own input.

    ``forward_ms`` / ``backward_ms``: summed over every plain layer of every micro-batch (``layers`` of them).
    ``layer_forward_ms`` / ``layer_backward_ms``: the cost of *one* plain layer over the step, the sum over
    micro-batches of the lower median of that micro-batch's plain layers (same shapes, same work). A one-off
    host pause inside one layer's forward (on the H200: about 20 ms more in a step's four 4-ms passes) is then
    counted once, in the measured time, instead of once for every layer the composition adds; a slowdown of
    the whole micro-batch moves every layer alike and so moves the median too."""
    out = {"forward_ms": 0.0, "backward_ms": 0.0, "layers": 0, "layer_forward_ms": 0.0, "layer_backward_ms": 0.0}
    seg: dict[str, float] = {}
    for name, ms in marks + [("", 0.0)]:
        if name in ("start", ""):  # a micro-batch boundary (or the end)
            fwd, bwd = [], []
            for i in range(first, n):
                f0, f1 = seg.get(f"L{i}"), seg.get(f"L{i + 1}", seg.get("lm_norm"))
                b0, b1 = seg.get(f"B{i + 1}", seg.get("bwd_head_end")), seg.get(f"B{i}")
                if None not in (f0, f1, b0, b1):
                    fwd.append(f1 - f0)  # pyright: ignore[reportOperatorIssue]  # not None (checked)
                    bwd.append(b1 - b0)  # pyright: ignore[reportOperatorIssue]
            out["forward_ms"] += sum(fwd)
            out["backward_ms"] += sum(bwd)
            out["layers"] += len(fwd)
            out["layer_forward_ms"] += lower_median(fwd)
            out["layer_backward_ms"] += lower_median(bwd)
            seg = {}
        seg.setdefault(name, ms)
    return out


def lower_median(values: list[float]) -> float:
    """The lower median (of two values the smaller; 0.0 for none): robust to one outlier from two values on."""
    return sorted(values)[(len(values) - 1) // 2] if values else 0.0


def _micro_stages(t: dict[str, float], seg: list[tuple[str, float]], at: dict[str, float], end: float) -> None:
    """Add one micro-batch's forward and backward stages to ``t``."""
    proj, open_at = 0.0, None
    for name, ms in seg:
        if name == "proj_start":
            open_at = ms
        elif name == "proj_end" and open_at is not None:
            proj, open_at = proj + ms - open_at, None
    vis_total = at["vision_end"] - at["vision_start"] if "vision_start" in at else 0.0
    lm = at["head_start"] - at["lm_start"]
    head = at["fwd_end"] - at["head_start"]
    fwd = at["fwd_end"] - at["h2d_end"]
    t["h2d"] += at["h2d_end"] - at["start"]
    t["vision"] += vis_total - proj
    t["projector"] += proj
    t["lm_forward"] += lm
    t["lm_head_loss"] += head
    t["forward_other"] += fwd - vis_total - lm - head
    head_end = at.get("bwd_head_end", at["fwd_end"])
    dec_end = at.get("B0", head_end)
    t["backward_head"] += head_end - at["fwd_end"]
    t["backward_decoder"] += dec_end - head_end
    t["backward_vision"] += end - dec_end


# the step's stages -> (the parts whose FLOPs they compute, fraction of the training FLOPs)
STAGE_PARTS = {
    "vision": (("vision_flops",), 1 / 3),
    "projector": (("projector_flops",), 1 / 3),
    "lm_forward": (("lm_layers_flops",), 1 / 3),
    "lm_head_loss": (("lm_head_flops",), 1 / 3),
    "backward_head": (("lm_head_flops",), 2 / 3),
    "backward_decoder": (("lm_layers_flops",), 2 / 3),
    "backward_vision": (("vision_flops", "projector_flops"), 2 / 3),
}


BACKWARD_PARTS = ("lm_layers_flops", "lm_head_flops", "vision_flops", "projector_flops")


def backward_factors(trains: dict[str, bool], images: bool) -> dict[str, int]:
    """How many forwards' worth of FLOPs each part's backward computes, given what trains (``trains``:
    ``language``, ``vision``, ``projection``, ``decoder_adapters``, ``vision_adapters``, as the workload reports
    them) and whether the batch has images: 1 for the weight gradients when the part's own weights train, 1 for the
    input gradients when anything before it trains (a frozen part behind a trained one still carries the gradient
    through); 0 when neither (the stage does no work). A full backward is 2."""
    vision_in = bool(images) and (trains.get("vision") or trains.get("vision_adapters"))
    visual_grads = bool(images) and (vision_in or trains.get("projection"))
    decoder_in = bool(trains.get("language") or trains.get("decoder_adapters") or visual_grads)
    own = {
        "vision_flops": bool(trains.get("vision")),  # PEFT adapters' own weight gradients: a fraction of a percent
        "projector_flops": bool(trains.get("projection")),
        "lm_layers_flops": bool(trains.get("language")),
        "lm_head_flops": bool(trains.get("language")),
    }
    through = {
        "vision_flops": bool(vision_in),
        "projector_flops": bool(vision_in),
        "lm_layers_flops": decoder_in,
        "lm_head_flops": decoder_in,
    }
    return {p: int(own[p] and bool(images or p.startswith("lm"))) + int(through[p]) for p in BACKWARD_PARTS}


def stage_tflops(
    stages_ms: dict[str, float], flops: dict[str, float], backward: dict[str, float] | None = None
) -> dict[str, float | None]:
    """TFLOP/s of each stage of ``STAGE_PARTS`` from its mean ms and the mean FLOPs of the parts it runs
    (``flops``: part name -> FLOPs per step); also ``backward`` (all three) and ``step`` (``total_flops`` over
    ``total_ms`` when both are given). ``backward``: each part's backward FLOPs as it ran (``backward_factors``:
    frozen parts compute no weight gradients, a stage with no work gets no figure); default two thirds of the
    part's training FLOPs (everything trains)."""
    out: dict[str, float | None] = {}
    for stage, (parts, frac) in STAGE_PARTS.items():
        ms = stages_ms.get(stage)
        if backward is not None and stage in BACKWARD_STAGES:
            work = sum(backward.get(p) or 0.0 for p in parts)
        else:
            work = sum(flops.get(p) or 0.0 for p in parts) * frac
        out[stage] = work / ms / 1e9 if ms and work else None
    back_ms = sum(stages_ms.get(s, 0.0) for s in ("backward_head", "backward_decoder", "backward_vision"))
    if backward is not None:
        back = sum(backward.get(p) or 0.0 for p in BACKWARD_PARTS)
    else:
        back = 2 / 3 * sum(flops.get(p) or 0.0 for p in BACKWARD_PARTS)
    out["backward"] = back / back_ms / 1e9 if back_ms and back else None
    if flops.get("total_flops") and stages_ms.get("total"):
        out["step"] = flops["total_flops"] / stages_ms["total"] / 1e9
    return out
