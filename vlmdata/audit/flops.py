"""Model FLOPs of one training step, from the batch's actual shapes.

Conventions: a multiply-add is 2 FLOPs; training = forward + backward = 3 x forward (backward
computes gradients for activations and weights); norms, activations, softmax, RoPE, routing
softmax/top-k, embedding lookups and the loss are not counted.  Every token the model
processes counts, padding included (it is computed); non-pad and loss tokens are reported apart.

Language model, B sequences padded to S, T = B*S tokens, hidden h, L layers, nq query heads,
nkv key/value heads of size d, E experts of which k are active, expert width f, vocab V::

    N_layer = h*nq*d + 2*h*nkv*d + nq*d*h      # q, k, v, o projections
            + h*E                              # router
            + k * 3*h*f                        # k active experts (gate, up, down)
    N_lm    = L*N_layer + h*V                  # + lm_head (the embedding lookup is no matmul)
    lm      = 6 * N_lm * T  +  3 * L * B * 4*nq*d*S^2

(with ``logits="loss"`` the h*V part of N_lm counts only the loss tokens).

The attention term counts QK^T and AV over the full S x S square (the PaLM MFU convention;
a causal kernel does about half).  ``causal=True`` counts S*(S+1)/2 pairs instead.

Vision tower, per image i with grid (t, gh, gw): n_i = t*gh*gw patches, hidden hv, MLP width iv,
D blocks, P = 3*2*16*16 = 1536 input values per patch; attention is per frame
(cu_seqlens: t segments of gh*gw patches, bidirectional)::

    vision    = 3 * sum_i [ n_i * (2*P*hv + D * 2*(4*hv^2 + 2*hv*iv)) + D * t * 4*hv*(gh*gw)^2 ]
    projector = 3 * sum_i (n_i/4) * (1 + n_deepstack) * 2*(16*hv^2 + 4*hv*h)

(the merger and each DeepStack merger map 4 patches of width hv to one token of width h
through a 4hv x 4hv and a 4hv x h matmul).
"""

from __future__ import annotations

from typing import Any

import torch

from vlmdata.audit.model import PAD_TOKEN_ID


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
    (``vlmdata.audit.metrics.TOKEN_DEFINITIONS``).

    Padding is ``attention_mask == 0`` when the batch has an attention mask, else the trailing
    run of ``pad_token_id`` in each row (Bridge pads with the tokenizer's pad id and drops the
    attention mask by default).
    """
    ids = torch.as_tensor(batch["input_ids"])
    B, S = ids.shape
    mask = _as_tensor(batch.get("loss_mask"))
    loss = int(mask.sum().item()) if mask is not None else int((torch.as_tensor(batch["labels"]) != -100).sum())
    am = _as_tensor(batch.get("attention_mask"))
    if am is not None:
        padding = int((am == 0).sum().item())
    else:
        not_pad = (ids != pad_token_id).to(torch.int64)
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


def lm_flops(text_config, batch_size: int, seq_len: int, causal: bool = False, head_tokens: int | None = None) -> int:
    """Training FLOPs of the language model for ``batch_size`` sequences of ``seq_len`` tokens.

    ``head_tokens``: tokens the lm_head runs on (default all B*S; the step's ``logits="loss"``
    variant runs it on the loss tokens only)."""
    c = text_config
    h, L, nq, nkv, d = c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim
    n_layer = (
        h * nq * d
        + 2 * h * nkv * d
        + nq * d * h
        + h * c.num_experts
        + c.num_experts_per_tok * 3 * h * c.moe_intermediate_size
    )
    T = batch_size * seq_len
    head_tokens = T if head_tokens is None else head_tokens
    pairs = seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len
    return 6 * L * n_layer * T + 6 * h * c.vocab_size * head_tokens + 3 * L * batch_size * 4 * nq * d * pairs


def vision_flops(vision_config, text_hidden: int, image_grid_thw) -> tuple[int, int]:
    """Training FLOPs of (vision encoder, projector = merger + DeepStack mergers) for the grids."""
    if image_grid_thw is None or len(image_grid_thw) == 0:
        return 0, 0
    c = vision_config
    hv, iv, D = c.hidden_size, c.intermediate_size, c.depth
    P = c.in_channels * c.temporal_patch_size * c.patch_size**2
    m2 = c.spatial_merge_size**2
    n_merge = 1 + len(c.deepstack_visual_indexes)
    enc = proj = 0
    for t, gh, gw in torch.as_tensor(image_grid_thw).tolist():
        n = t * gh * gw
        enc += n * (2 * P * hv + D * 2 * (4 * hv * hv + 2 * hv * iv)) + D * t * 4 * hv * (gh * gw) ** 2
        proj += (n // m2) * n_merge * 2 * (m2 * m2 * hv * hv + m2 * hv * text_hidden)
    return 3 * enc, 3 * proj


def step_flops(
    config, batch: dict, causal: bool = False, pad_token_id: int = PAD_TOKEN_ID, logits: str = "all"
) -> dict[str, int]:
    """FLOPs of one training step on ``batch`` (Bridge format) for a ``Qwen3VLMoeConfig``.

    Returns ``lm_flops``, ``vision_flops``, ``projector_flops``, ``total_flops``, the token
    counts of :func:`count_tokens`, ``images`` and ``patches``.  ``config`` may also be a model
    (its ``.config`` is used).  ``logits`` as in ``TrainStep``: "all" or "loss" tokens.
    """
    config = getattr(config, "config", config)
    B, S = torch.as_tensor(batch["input_ids"]).shape
    _, grid = _visual(batch)
    counts = count_tokens(batch, config.image_token_id, pad_token_id)
    head = None
    if logits == "loss":
        head = int((torch.as_tensor(batch["loss_mask"]) > 0).sum().item())
    lm = lm_flops(config.text_config, B, S, causal, head)
    vis, proj = vision_flops(config.vision_config, config.text_config.hidden_size, grid)
    out = {"lm_flops": lm, "vision_flops": vis, "projector_flops": proj, "total_flops": lm + vis + proj}
    out.update(counts)
    out["images"] = 0 if grid is None else int(len(grid))
    out["patches"] = 0 if grid is None else int(torch.as_tensor(grid).prod(-1).sum().item())
    return out
