"""From what one GPU measured to the step of the user's run: slices, the optimizer's shard, expert parallelism.

A model too big for one GPU (Qwen3-VL-30B-A3B: 48 decoder layers x 128 experts) is measured as a *slice*
(``vlmdata.audit.settings.config``): the whole vision tower, embeddings and lm_head, ``k`` of the ``L`` decoder
layers at the true width, and the experts one GPU holds under expert parallelism (E / EP per layer, top-k
routing kept). Each measured global step is then composed into the step of one rank of the user's run::

    step = measured step
         + (L - k) * (forward + backward of one plain decoder layer)   the other decoder layers
         + optimizer * (shard / measured - 1)                          the optimizer on this GPU's shard
         + ep_all_to_all                                               modelled, shown apart

- *decoder layers*: a *plain* layer is one without a DeepStack addition (Qwen3-VL adds the vision tower's
  DeepStack features after the first ``len(deepstack_visual_indexes)`` layers, with boolean-mask indexing that
  syncs the device). The step times each layer (``TrainStep``'s per-layer marks, ``plain_layers``); the
  per-layer cost is, per micro-batch, the lower median of the slice's plain layers (the same work each), so
  the DeepStack layers are counted once, as in the whole model, and a one-off pause inside one measured layer
  is counted once, not L - k times. (The mean did that: on the H200, one 30B-A3B step in each of three runs
  spent 34-38 ms in its four plain-layer forward passes instead of 15, about 4 ms each, and composed 410-470
  ms slower than its neighbours, +22%; the backward passes, which Python does not run, were unchanged.) (Scaling the whole ``lm_forward + backward_decoder`` by L/k instead, the first version,
  overstated real batches' decoder by 15-30% on the H200 for a 4-layer slice: 3 of its 4 layers carry DeepStack
  additions; a slice without plain layers falls back to that, and says so.) Each micro-batch's device time
  grows by its share (its decoder time x the same factor);
- *optimizer*: AdamW is memory-bound, linear in parameters. This GPU's shard under Megatron's distributed
  optimizer is dense / DP + experts / EDP (EDP = DP*CP*TP / (EP*ETP), the expert data-parallel size), of the
  trainable parameters, where the full model's are the measured ones plus (L - k) more decoder layers; without
  the distributed optimizer, every trainable parameter this GPU holds;
- *expert-parallel all-to-all* (EP > 1), per micro-batch and MoE layer: every token's hidden state (bf16) goes
  to its top-k experts, (EP-1)/EP of them on other GPUs, and comes back; the backward does both again (and the
  recompute of an MoE block once more)::

      bytes = T * k * h * 2 * (EP - 1) / EP        (T = the micro-batch's tokens, padding included)
      ms    = n_a2a * (bytes / link_bytes_per_s * 1e3 + latency_ms),   n_a2a = 4 (6 with recompute)

  ``link_gbps`` (default 200 GB/s per GPU, a conservative NVLink all-to-all figure) and ``latency_us``
  (default 25) are parameters; the multi-GPU issue measures them. The term is added to the step and shown
  apart as the stage ``ep_all_to_all`` ("modelled").

Not composed: the data-parallel gradient reduce-scatter and parameter all-gather (Bridge's recipes overlap
them with the backward; ``dp_grad_reduce_ms`` reports what they would take at ``link_gbps`` if not
overlapped), pipeline bubbles, tensor-parallel collectives.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

from vlmdata.audit.analysis.result_types import StepRecord

COMPOSED_STAGES = ("lm_forward", "backward_decoder", "optimizer", "ep_all_to_all")


@dataclass(frozen=True)
class Composition:
    """How measured steps become steps of the user's run (see the module docstring)."""

    layers_full: int
    layers_measured: int
    optimizer_scale: float  # this GPU's optimizer shard / the parameters the measured step's optimizer ran
    ep: int = 1
    top_k: int = 0
    hidden: int = 0
    moe_layers: int = 0  # MoE layers of the full model
    recompute: str = "none"
    link_gbps: float = 200.0
    latency_us: float = 25.0
    grad_bytes: int = 0  # this GPU's gradient bytes reduced over DP (bf16)
    dp: int = 1

    @property
    def decoder_scale(self) -> float:
        return self.layers_full / self.layers_measured

    @property
    def identity(self) -> bool:
        return self.decoder_scale == 1 and self.optimizer_scale == 1 and self.ep <= 1

    def a2a_ms(self, tokens: int) -> float:
        """Modelled expert-parallel all-to-all of one micro-batch of ``tokens`` over all MoE layers."""
        if self.ep <= 1 or not self.moe_layers:
            return 0.0
        n = 6 if self.recompute in ("selective", "full") else 4
        per = tokens * self.top_k * self.hidden * 2 * (self.ep - 1) / self.ep
        return self.moe_layers * n * (per / (self.link_gbps * 1e9) * 1e3 + self.latency_us / 1e3)

    def dp_grad_reduce_ms(self) -> float:
        """A ring reduce-scatter + all-gather of this GPU's gradients at ``link_gbps`` (not added: overlapped)."""
        if self.dp <= 1:
            return 0.0
        return 2 * (self.dp - 1) / self.dp * self.grad_bytes / (self.link_gbps * 1e9) * 1e3

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "decoder_scale": self.decoder_scale,
            "identity": self.identity,
            "dp_grad_reduce_ms": self.dp_grad_reduce_ms(),
            "formula": "step = measured + (L - k) x (forward + backward of one plain decoder layer, per micro-batch the "
            "lower median of the slice's layers without DeepStack; a slice with none: (L/k - 1)(lm_forward + "
            "backward_decoder)) "
            "+ optimizer (shard/measured - 1) "
            "+ ep_all_to_all (modelled: n_a2a * MoE layers * (T k h 2 (EP-1)/EP / link + latency))",
        }


def plan(run, shape, summary: dict, *, link_gbps: float = 200.0, latency_us: float = 25.0) -> Composition:
    """The composition for a ``RunSpec`` ``run``, the full ``ModelShape`` and the measured model's
    ``model_summary``."""
    measured = summary.get("slice") or {}
    k = int(measured.get("layers") or shape.layers)
    L = shape.layers
    t_all = int(summary.get("params_trainable") or 0)
    t_exp = int(summary.get("params_trainable_experts") or 0)
    t_layer = int(summary.get("params_trainable_decoder_layer") or 0)
    t_layer_exp = t_exp // k if k else 0
    dense_full = (t_all - t_exp) + (L - k) * (t_layer - t_layer_exp)
    experts_full = t_exp * L // k if k else 0
    dist_opt = run.use_distributed_optimizer
    shard = dense_full / (run.data_parallel if dist_opt else 1) + experts_full / (
        run.expert_data_parallel if dist_opt else 1
    )
    scale = shard / t_all if t_all else 1.0
    moe = shape.experts is not None
    return Composition(
        layers_full=L,
        layers_measured=k,
        optimizer_scale=scale,
        ep=run.ep if moe else 1,
        top_k=int(shape.top_k or 0),
        hidden=int(shape.text.hidden_size),
        moe_layers=L if moe else 0,
        recompute=run.recompute,
        link_gbps=link_gbps,
        latency_us=latency_us,
        grad_bytes=2 * int(dense_full + experts_full),
        dp=run.data_parallel,
    )


def compose_record(rec: StepRecord, comp: Composition) -> StepRecord:
    """One measured global step as a step of the user's run (``measured_step_ms`` keeps the measurement)."""
    if comp.identity:
        return rec
    out = copy.copy(rec)
    t = dict(rec.get("times_ms") or {})
    s = comp.decoder_scale
    dec = t.get("lm_forward", 0.0) + t.get("backward_decoder", 0.0)
    plain = rec.get("plain_layers") or {}
    n_plain = int(plain.get("layers") or 0)
    micro_n = max(1, int(rec.get("micro_batches") or 1))
    if s != 1 and n_plain:  # (L - k) more plain layers, at the slice's plain-layer cost
        extra = comp.layers_full - comp.layers_measured
        if "layer_forward_ms" in plain:  # one plain layer over the step: the lower median per micro-batch
            f_layer, b_layer = plain["layer_forward_ms"], plain["layer_backward_ms"]
        else:  # records of before 2026-12-02: the mean over the plain layers
            f_layer, b_layer = plain["forward_ms"] / n_plain * micro_n, plain["backward_ms"] / n_plain * micro_n
        extra_f, extra_b = extra * f_layer, extra * b_layer
        out["composed_decoder"] = "plain layers"
    else:
        extra_f, extra_b = (s - 1) * t.get("lm_forward", 0.0), (s - 1) * t.get("backward_decoder", 0.0)
        out["composed_decoder"] = "scaled" if s != 1 else "whole"
    extra_dec = extra_f + extra_b
    grow = extra_dec / dec if dec else 0.0  # each micro-batch's decoder time grows by this factor
    opt = t.get("optimizer", 0.0)
    opt_new = opt * comp.optimizer_scale
    micro = [copy.copy(m) for m in rec.get("micro") or []]
    a2a = 0.0
    for m in micro:
        m_a2a = comp.a2a_ms(int(m.get("tokens_total") or 0))
        if (ms := m.get("ms")) is not None:
            m["ms"] = ms + grow * (m.get("decoder_ms") or 0.0) + m_a2a
        m["ep_all_to_all_ms"] = m_a2a
        a2a += m_a2a
    t["lm_forward"] = t.get("lm_forward", 0.0) + extra_f
    t["backward_decoder"] = t.get("backward_decoder", 0.0) + extra_b
    t["optimizer"] = opt_new
    t["ep_all_to_all"] = a2a
    added = extra_dec + (opt_new - opt) + a2a
    if "total" in t:
        t["total"] = t["total"] + added
    out.update(times_ms=t, micro=micro, measured_step_ms=rec["step_ms"], step_ms=rec["step_ms"] + added)
    if (lm_layers := rec.get("lm_layers_flops")) is not None:
        layers = lm_layers * s
        out["lm_layers_flops"] = layers
        out["lm_flops"] = lm = layers + (rec.get("lm_head_flops") or 0)
        out["flops"] = lm + (rec.get("vision_flops") or 0) + (rec.get("projector_flops") or 0)
    return out


def compose(records: list[StepRecord], comp: Composition) -> list[StepRecord]:
    """Every record composed (the same list when the composition is the identity)."""
    return records if comp.identity else [compose_record(r, comp) for r in records]
