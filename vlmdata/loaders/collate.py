"""Rows -> the batch dict a Megatron Bridge Qwen-VL step consumes (padded, or packed THD).

Padded (Bridge ``qwen2_5_collate_fn`` + ``prepare_sequence_batch``): rows are right-padded to the longest
row with the tokenizer's pad id (what ``processor(..., padding=True)`` does), then to a multiple of 128
(capped at ``seq_length``) or to ``seq_length`` with ``pad_to_max_length``, with pad id **0** (Bridge's
``pad_or_truncate_sequence_batch``); longer rows are truncated to ``seq_length`` (an error if that removes
every supervised token of a row, as Bridge: ``OptionsError``, a ``ValueError``; a packed row longer than
``seq_length`` too). Keys: input_ids, attention_mask, mm_token_type_ids,
position_ids, labels, loss_mask, visual_inputs.

Packed (``enable_in_batch_packing``, Bridge ``build_mcore_thd_sequence_batch_from_rows``): one row
[1, T] with per-sequence position ids, ``cu_seqlens_q/kv`` int32, optional ``cu_seqlens_*_padded`` when
``packing_pad_to_multiple_of > 1``, ``max_seqlen_q/kv`` int32 scalars, ``total_tokens`` int,
``attention_mask`` None.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import torch

from vlmdata.errors import OptionsError
from vlmdata.loaders.pixel_rows import batch_pixels
from vlmdata.qwen.tokenize import IGNORE_INDEX, TokenizedRow

DEFERRED_KEY = "deferred_images"  # images left for the training device: see vlmdata.loaders.device_images


@dataclass
class VisualInputs:
    """Mirror of Bridge's ``GenericVisualInputs`` (training/utils/visual_inputs.py): every attribute a
    tensor or None. ``to_bridge()`` returns Bridge's own class when Bridge is importable."""

    pixel_values: torch.Tensor | None = None
    pixel_values_videos: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    video_grid_thw: torch.Tensor | None = None
    second_per_grid_ts: torch.Tensor | None = None
    image_sizes: torch.Tensor | None = None
    image_position_ids: torch.Tensor | None = None
    mm_token_type_ids: torch.Tensor | None = None

    def as_model_kwargs(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def pin_memory(self) -> "VisualInputs":
        """A copy with every tensor in pinned memory (DataLoader's ``pin_memory=True`` calls this)."""

        def pin(t):  # a placeholder view (zero strides, filled on the device later) has nothing to pin
            return t if t is None or 0 in t.stride() else t.pin_memory()

        return VisualInputs(**{f.name: pin(getattr(self, f.name)) for f in fields(self)})

    def normalized_for_model(self) -> dict[str, torch.Tensor]:
        return self.as_model_kwargs()  # vlmdata's tensors are already flat ([N, D] and [n, 3])

    def to_bridge(self):
        """Bridge's ``GenericVisualInputs`` with the same tensors (ImportError without Bridge)."""
        from megatron.bridge.training.utils.visual_inputs import GenericVisualInputs  # pyright: ignore[reportMissingImports]  # optional: Bridge

        names = {f.name for f in fields(GenericVisualInputs)}
        return GenericVisualInputs(**{k: v for k, v in self.as_model_kwargs().items() if k in names})


def _ceil(v: int, m: int) -> int:
    return v if m <= 1 else -(-v // m) * m


def visual_inputs_of(pixel_values: list, grids: list[tuple[int, int, int]], patch_dim: int) -> VisualInputs:
    """The batch's VisualInputs from its images' pixel rows (float32 arrays or ``PixelRows``, written
    straight into one batch buffer: ``pixel_rows.batch_pixels``) and grids."""
    if not grids:
        return VisualInputs()
    if all(isinstance(a, np.ndarray) and a.strides == (0, 0) for a in pixel_values):
        # shapes-only rows: keep the batch free of pixel memory
        rows = sum(a.shape[0] for a in pixel_values)
        return VisualInputs(
            pixel_values=torch.zeros((1, 1), dtype=torch.float32).expand(rows, patch_dim),
            image_grid_thw=torch.tensor(grids, dtype=torch.int64).reshape(-1, 3),
        )
    return VisualInputs(
        pixel_values=torch.from_numpy(batch_pixels(pixel_values, patch_dim)),
        image_grid_thw=torch.tensor(grids, dtype=torch.int64).reshape(-1, 3),
    )


def collate_padded(
    rows: list[TokenizedRow],
    visual: VisualInputs,
    *,
    pad_token_id: int,
    seq_length: int | None,
    pad_to_max_length: bool = False,
    pad_to_multiple_of: int = 128,
    strict: bool = True,
) -> dict:
    lengths = [len(r) for r in rows]
    longest = max(lengths)
    if seq_length is None:
        target = longest
    else:
        target = seq_length if pad_to_max_length else min(seq_length, _ceil(longest, pad_to_multiple_of))
    B = len(rows)
    width = max(target, longest)
    ids = np.zeros((B, width), dtype=np.int64)
    labels = np.full((B, width), IGNORE_INDEX, dtype=np.int64)
    mask = np.zeros((B, width), dtype=np.float32)
    attn = np.zeros((B, width), dtype=np.int64)
    mm = np.zeros((B, width), dtype=np.int64)
    for b, r in enumerate(rows):
        n = lengths[b]
        ids[b, :n] = r.input_ids
        ids[b, n:longest] = pad_token_id  # processor padding=True pads with the tokenizer's pad id
        labels[b, :n] = r.labels
        mask[b, :n] = r.loss_mask
        attn[b, :n] = 1
        mm[b, :n] = r.mm_token_type_ids
    if width > target:  # truncation to seq_length
        had = mask.any(axis=1)
        has = mask[:, :target].any(axis=1)
        emptied = np.flatnonzero(had & ~has).tolist()
        if emptied and strict:
            raise OptionsError(
                f"a row of {width} tokens does not fit seq_length={target}: truncating it removed every "
                f"supervised token from rows {emptied} (Bridge raises here too); raise seq_length or "
                "filter overlength samples"
            )
        ids, labels, mask, attn, mm = (a[:, :target] for a in (ids, labels, mask, attn, mm))
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return {
        "input_ids": t(ids),
        "attention_mask": t(attn),
        "mm_token_type_ids": t(mm),
        "position_ids": torch.arange(target, dtype=torch.int64).unsqueeze(0).expand(B, -1).clone(),
        "labels": t(labels),
        "loss_mask": t(mask),
        "visual_inputs": visual,
    }


def collate_packed(
    rows: list[TokenizedRow],
    visual: VisualInputs,
    *,
    seq_length: int | None,
    pad_to_multiple_of: int = 1,
    pad_token_id: int = 0,
) -> dict:
    lengths = [len(r) for r in rows]
    if seq_length is not None:
        for n in lengths:
            if n > seq_length:
                # Bridge's words; an OptionsError (a ValueError, as Bridge raises) in the package's error base
                raise OptionsError(f"Packed sequence row length {n} exceeds configured sequence_length {seq_length}.")
    padded = [_ceil(n, pad_to_multiple_of) for n in lengths]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    cu_p = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
    total = int(cu_p[-1])
    ids = np.full(total, pad_token_id, dtype=np.int64)
    pos = np.zeros(total, dtype=np.int64)
    labels = np.full(total, IGNORE_INDEX, dtype=np.int64)
    mask = np.zeros(total, dtype=np.float32)
    off = 0
    for r, n, p in zip(rows, lengths, padded):
        ids[off : off + n] = r.input_ids
        labels[off : off + n] = r.labels
        mask[off : off + n] = r.loss_mask
        pos[off : off + p] = np.arange(p)  # alignment padding continues the positions, as Bridge
        off += p
    out = {
        "input_ids": torch.from_numpy(ids[None]),
        "position_ids": torch.from_numpy(pos[None]),
        "attention_mask": None,
        "labels": torch.from_numpy(labels[None]),
        "loss_mask": torch.from_numpy(mask[None]),
        "cu_seqlens_q": torch.from_numpy(cu),
        "cu_seqlens_kv": torch.from_numpy(cu.copy()),
    }
    if pad_to_multiple_of > 1:
        out["cu_seqlens_q_padded"] = torch.from_numpy(cu_p)
        out["cu_seqlens_kv_padded"] = torch.from_numpy(cu_p.copy())
    out["max_seqlen_q"] = torch.tensor(max(padded), dtype=torch.int32)
    out["max_seqlen_kv"] = torch.tensor(max(padded), dtype=torch.int32)
    out["total_tokens"] = total
    out["visual_inputs"] = visual
    return out


@dataclass
class Processed:
    """One sample ready for collation: tokens plus its images' pixel rows and grids."""

    key: str
    row: TokenizedRow
    pixel_values: list  # float32 [rows, patch_dim] arrays, or PixelRows (patchified into the batch buffer)
    grids: list[tuple[int, int, int]]
    deferred: list = field(default_factory=list)  # images left for the training device (device_images)
    truncated: int = 0  # tokens the collate will cut (a row longer than seq_length; SampleProcessor.fit)


class Collator:
    """Callable ``list[Processed] -> batch``; picklable (DataLoader workers, Bridge's ``collate_fn``)."""

    def __init__(
        self,
        *,
        pad_token_id: int,
        patch_dim: int,
        seq_length: int | None = 4096,
        pad_to_max_length: bool = False,
        pad_to_multiple_of: int = 128,
        packing: bool = False,
        packing_pad_to_multiple_of: int = 1,
        bridge_visual_inputs: bool = False,
        strict: bool = True,
    ):
        self.pad_token_id = pad_token_id
        self.strict = strict  # False: truncate without raising (planning batches; the planner checks lengths)
        self.patch_dim = patch_dim
        self.seq_length = seq_length
        self.pad_to_max_length = pad_to_max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.packing = packing
        self.packing_pad_to_multiple_of = packing_pad_to_multiple_of
        self.bridge_visual_inputs = bridge_visual_inputs

    def __call__(self, items: list[Processed]) -> dict:
        items = [i for i in items if i is not None]
        if not items:
            raise ValueError("empty batch")
        visual = visual_inputs_of(
            [p for i in items for p in i.pixel_values], [g for i in items for g in i.grids], self.patch_dim
        )
        if self.bridge_visual_inputs:
            visual = visual.to_bridge()
        rows = [i.row for i in items]
        if self.packing:
            batch = collate_packed(
                rows, visual, seq_length=self.seq_length, pad_to_multiple_of=self.packing_pad_to_multiple_of
            )
        else:
            batch = collate_padded(
                rows,
                visual,
                pad_token_id=self.pad_token_id,
                seq_length=self.seq_length,
                pad_to_max_length=self.pad_to_max_length,
                pad_to_multiple_of=self.pad_to_multiple_of,
                strict=self.strict,
            )
        deferred = [d for i in items for d in i.deferred]
        if deferred:
            batch[DEFERRED_KEY] = deferred
        return batch
