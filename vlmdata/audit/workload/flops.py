"""Model FLOPs of one training micro-batch, from the batch's actual shapes, per part of the model.

Conventions: a multiply-add is 2 FLOPs; training = forward + backward = 3 x forward (backward computes
gradients for activations and weights); norms, activations, softmax, RoPE, routing softmax/top-k, embedding
lookups and the loss are not counted. Every token the model processes counts, padding included (it is
computed); non-pad and loss tokens are reported apart.

Decoder, B rows of S tokens (T = B*S; a packed row of samples s_i counts each sample's own attention),
hidden h, L layers, nq query heads, nkv key/value heads of size d, vocab V; a MoE layer has E experts of
which k are active, of width f; a dense layer an MLP of width F (gate, up, down)::

    N_layer = h*nq*d + 2*h*nkv*d + nq*d*h      # q, k, v, o projections
            + h*E + k*3*h*f  (MoE)  |  3*h*F  (dense)
    lm_layers = 6 * L * N_layer * T  +  3 * L * 4*nq*d * sum_rows S_r^2      (full S x S: the PaLM convention;
                                                                               causal=True counts S(S+1)/2)
    lm_head   = 6 * h * V * head_tokens                                      (all tokens, or loss tokens)

Vision tower, per image i with grid (t, gh, gw): n_i = t*gh*gw patches, hidden hv, MLP width iv, D blocks,
P = 3*2*p*p input values per patch; the MLP has 2 matrices (Qwen3-VL, GELU) or 3 (Qwen2.5-VL, gated)::

    vision    = 3 * sum_i [ n_i * (2*P*hv + D * 2*(4*hv^2 + m*hv*iv)) + 4*hv * sum_blocks sum_seg len_seg^2 ]
    projector = 3 * sum_i (n_i/4) * n_mergers * 2*(16*hv^2 + 4*hv*h)

Attention segments are each frame (t segments of gh*gw patches, bidirectional); Qwen2.5-VL's windowed
blocks (all but ``fullatt_block_indexes``) attend within windows of ``window_size`` pixels (the windows of
``transformers.vision_utils.get_vision_window_index``). ``n_mergers`` = 1 + the DeepStack mergers
(Qwen3-VL) or 1 (Qwen2.5-VL). Forward FLOPs of a part are a third of its training FLOPs; the backward two
thirds (``STAGE_PARTS`` in ``vlmdata.audit.workload.stages`` maps the step's stages to them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from vlmdata.audit.settings.model_config import PAD_TOKEN_ID, vision_widths
from vlmdata.audit.workload.stages import STAGE_PARTS, stage_tflops  # noqa: F401  # re-exported: their home is audit.stages


def _as_tensor(x) -> torch.Tensor | None:
    return None if x is None else torch.as_tensor(x)


def _visual(batch: dict) -> Any:
    v = batch.get("visual_inputs")
    if v is None:
        return None, None
    get = v.get if isinstance(v, dict) else lambda k, d=None: getattr(v, k, d)
    return get("pixel_values", None), get("image_grid_thw", None)


def count_tokens(batch: dict, image_token_id: int, pad_token_id: int = PAD_TOKEN_ID) -> dict[str, int]:
    """Total, non-pad (total - padding), loss (loss_mask sum), visual (image_pad) and padding tokens of a batch
    (``vlmdata.audit.analysis.metrics.TOKEN_DEFINITIONS``).

    Padding is ``attention_mask == 0`` when the batch has an attention mask, else the trailing run of
    ``pad_token_id`` or 0 in each row (the collate pads with the tokenizer's pad id, then Bridge's padding
    to a multiple or to seq_length with 0); a packed row's padding is what follows its last sample.
    """
    ids = torch.as_tensor(batch["input_ids"])
    B, S = ids.shape
    mask = _as_tensor(batch.get("loss_mask"))
    loss = int(mask.sum().item()) if mask is not None else int((torch.as_tensor(batch["labels"]) != -100).sum())
    am = _as_tensor(batch.get("attention_mask"))
    cu = batch.get("cu_seqlens_q")
    if cu is not None:
        padding = int(S - int(torch.as_tensor(cu)[-1]))
    elif am is not None:
        padding = int((am == 0).sum().item())
    else:
        not_pad = ((ids != pad_token_id) & (ids != 0)).to(torch.int64)
        # index of the last non-pad token + 1 per row; everything after it is padding
        last = torch.where(not_pad.any(1), S - not_pad.flip(1).argmax(1), torch.zeros(B, dtype=torch.int64))
        padding = int((S - last).sum().item())
    return {
        "tokens_total": B * S,
        "tokens_nonpad": B * S - padding,
        "tokens_loss": loss,
        "tokens_visual": int((ids == image_token_id).sum().item()),
        "tokens_padding": padding,
    }


def _layer_params(c) -> int:
    h, nq, nkv = c.hidden_size, c.num_attention_heads, c.num_key_value_heads
    d = getattr(c, "head_dim", None) or h // nq
    attn = h * nq * d + 2 * h * nkv * d + nq * d * h
    experts = getattr(c, "num_experts", None)
    if experts:
        return attn + h * experts + c.num_experts_per_tok * 3 * h * c.moe_intermediate_size
    return attn + 3 * h * c.intermediate_size


def lm_parts(text_config, rows: list[int], causal: bool = False, head_tokens: int | None = None) -> tuple[int, int]:
    """Training FLOPs (decoder layers, lm_head) for sequences of the given lengths (a padded batch: B rows of
    S; a packed row: its samples' lengths)."""
    c = text_config
    nq = c.num_attention_heads
    d = getattr(c, "head_dim", None) or c.hidden_size // nq
    T = sum(rows)
    pairs = sum(s * (s + 1) // 2 if causal else s * s for s in rows)
    layers = 6 * c.num_hidden_layers * _layer_params(c) * T + 3 * c.num_hidden_layers * 4 * nq * d * pairs
    head = 6 * c.hidden_size * c.vocab_size * (T if head_tokens is None else head_tokens)
    return layers, head


def lm_flops(text_config, batch_size: int, seq_len: int, causal: bool = False, head_tokens: int | None = None) -> int:
    """Training FLOPs of the language model for ``batch_size`` sequences of ``seq_len`` tokens
    (``head_tokens``: tokens the lm_head runs on; default all)."""
    layers, head = lm_parts(text_config, [seq_len] * batch_size, causal, head_tokens)
    return layers + head


@lru_cache(maxsize=4096)
def _window_sq(t: int, gh: int, gw: int, merge: int, window: int, patch: int) -> int:
    """Sum of squared window lengths of one image in Qwen2.5-VL's windowed blocks."""
    from transformers.vision_utils import get_vision_window_index

    _, cu = get_vision_window_index(torch.tensor([[t, gh, gw]]), merge, window, patch)
    lens = (cu[1:] - cu[:-1]).tolist()
    return int(sum(n * n for n in lens))


def vision_flops(vision_config, text_hidden: int, image_grid_thw) -> tuple[int, int]:
    """Training FLOPs of (vision encoder, projector = merger + DeepStack mergers) for the grids."""
    if image_grid_thw is None or len(image_grid_thw) == 0:
        return 0, 0
    c = vision_config
    (hv, iv), D = vision_widths(c), c.depth
    P = c.in_channels * c.temporal_patch_size * c.patch_size**2
    merge = c.spatial_merge_size
    m2 = merge**2
    deepstack = getattr(c, "deepstack_visual_indexes", None) or []
    n_merge = 1 + len(deepstack)
    mlp_mats = 3 if hasattr(c, "fullatt_block_indexes") else 2  # Qwen2.5-VL: gated MLP
    full = set(getattr(c, "fullatt_block_indexes", None) or range(D))
    out = getattr(c, "out_hidden_size", None) or text_hidden
    enc = proj = 0
    for t, gh, gw in torch.as_tensor(image_grid_thw).tolist():
        n = t * gh * gw
        full_sq = t * (gh * gw) ** 2
        n_full = sum(1 for b in range(D) if b in full)
        attn_sq = n_full * full_sq
        if n_full < D:
            attn_sq += (D - n_full) * _window_sq(t, gh, gw, merge, c.window_size, c.patch_size)
        enc += n * (2 * P * hv + D * 2 * (4 * hv * hv + mlp_mats * hv * iv)) + 4 * hv * attn_sq
        proj += (n // m2) * n_merge * 2 * (m2 * m2 * hv * hv + m2 * hv * out)
    return 3 * enc, 3 * proj


def step_flops(
    config, batch: dict, causal: bool = False, pad_token_id: int = PAD_TOKEN_ID, logits: str = "all"
) -> dict[str, int]:
    """FLOPs of one training micro-batch (Bridge format) for a Qwen-VL config.

    Returns ``lm_layers_flops``, ``lm_head_flops``, ``lm_flops`` (their sum), ``vision_flops``,
    ``projector_flops``, ``total_flops``, the token counts of :func:`count_tokens`, ``images`` and
    ``patches``. ``config`` may also be a model (its ``.config`` is used). ``logits``: "all" or "loss".
    """
    config = getattr(config, "config", config)
    B, S = torch.as_tensor(batch["input_ids"]).shape
    _, grid = _visual(batch)
    counts = count_tokens(batch, config.image_token_id, pad_token_id)
    head = int((torch.as_tensor(batch["loss_mask"]) > 0).sum().item()) if logits == "loss" else None
    cu = batch.get("cu_seqlens_q")
    if cu is not None:
        b = torch.as_tensor(cu).tolist()
        rows = [e - s for s, e in zip(b[:-1], b[1:])]
        rows += [S - b[-1]] if S > b[-1] else []
    else:
        rows = [int(S)] * int(B)
    layers, head_f = lm_parts(config.text_config, rows, causal, head)
    vis, proj = vision_flops(config.vision_config, config.text_config.hidden_size, grid)
    out = {
        "lm_layers_flops": layers,
        "lm_head_flops": head_f,
        "lm_flops": layers + head_f,
        "vision_flops": vis,
        "projector_flops": proj,
        "total_flops": layers + head_f + vis + proj,
    }
    out.update(counts)
    out["images"] = 0 if grid is None else int(len(grid))
    out["patches"] = 0 if grid is None else int(torch.as_tensor(grid).prod(-1).sum().item())
    return out
