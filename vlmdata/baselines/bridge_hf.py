"""The baseline: Megatron Bridge 0.6.2's ``qwen2_5_collate_fn`` path, replicated with the real HF processor.

Used by tests (the reference vlmdata's batches must equal) and by ``vlmdata bench loader`` (the
baseline's cost). It follows Bridge's source step by step and runs without Bridge:

* ``process_vision_info`` (qwen-vl-utils 0.0.14, not installable here without torchvision): each image
  part's PIL image -> ``to_rgb`` -> Pillow resize to qwen-vl-utils' ``smart_resize(.., factor 28)``
  (``vlmdata.qwen.vision.qvu_fetch_image``, a line-by-line copy)
* ``processor.apply_chat_template(conversation, tokenize=False)``, then
  ``processor(text=texts, images=per_example_images, padding=True, return_tensors="pt", min_pixels, max_pixels)``
  under right padding (texts without images in a separate processor call, merged as Bridge does)
* ``build_assistant_loss_mask`` with the ChatML ``AssistantMaskBoundaryConfig``: the HF-generation and
  conversation-turn paths do not apply to these templates/processors (no ``{% generation %}``; the
  turn renders do not align with image-expanded ids), so the boundary scan
  ``_assistant_mask_from_boundary_config`` decides; re-implemented here independently of
  ``vlmdata.qwen.tokenize`` on plain Python lists, with Bridge's ``find_token_span`` semantics
* skipped tokens (``QWEN_TOKENS``), label shift, -100, ``prepare_sequence_batch`` padding/truncation or
  the THD packing of ``build_mcore_thd_sequence_batch_from_rows``.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image

from vlmdata.qwen.vision import qvu_fetch_image

# Bridge's own constants, restated on purpose (data/token_utils.py QWEN_TOKENS, the label ignore index): the
# yardstick imports nothing of the path it measures (vlmdata.qwen.tokenize.QWEN_SKIPPED_TOKENS, IGNORE_INDEX), so a
# wrong entry there cannot hide here. tests/baselines/test_bridge_hf.py checks that the two statements agree.
IGNORE_INDEX = -100
QWEN_TOKENS = [
    "<|im_start|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
]
VISUAL_KEYS = ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "second_per_grid_ts")


def find_token_span(ids, pat, start=0):
    """(start, end) of the first occurrence of ``pat`` in ``ids`` at or after ``start``, or (-1, -1): Bridge's
    ``find_token_span``."""
    if not pat or start >= len(ids):
        return -1, -1
    for idx in range(start, max(len(ids) - len(pat) + 1, start)):
        if ids[idx : idx + len(pat)] == pat:
            return idx, idx + len(pat)
    return -1, -1


class BridgeReference:
    """Bridge's collate, step by step (module docstring): ``collate(samples, ...)`` -> the batch Bridge's step gets."""

    def __init__(self, processor, min_pixels=200704, max_pixels=1003520, fetch_image=qvu_fetch_image):
        """``fetch_image``: PIL image -> pre-resized PIL image (default the line-by-line copy of qwen-vl-utils';
        ``vlmdata bench loader`` passes the real ``qwen_vl_utils`` one when it is installed)."""
        self.processor = processor
        self.fetch_image = fetch_image
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        tok = processor.tokenizer
        enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
        self.start = {"assistant": enc("<|im_start|>assistant\n")}
        for r in ("system", "developer", "user", "tool"):
            self.start[r] = enc(f"<|im_start|>{r}\n")
        self.end = enc("<|im_end|>\n")
        self.end_variants = [enc("<|im_end|>")]
        self.skipped = {k for k, v in tok.added_tokens_decoder.items() if str(v) in QWEN_TOKENS}

    # --- Bridge _assistant_mask_from_boundary_config (include_end for assistant, no trimming)
    def boundary_mask(self, ids, roles):
        markers = []
        for role, st in self.start.items():
            s = 0
            while s < len(ids):
                p, a = find_token_span(ids, st, s)
                if p < 0:
                    break
                markers.append((p, role, len(st)))
                s = a
        markers.sort(key=lambda m: (m[0], -m[2]))
        dedup = []
        for m in markers:
            if dedup and m[0] == dedup[-1][0]:
                continue
            dedup.append(m)
        expected = [r for r in roles if r == "assistant"]
        observed = [r for _, r, _ in dedup if r == "assistant"]
        if observed != expected:
            raise ValueError("assistant markers do not match the conversation")
        mask = [0.0] * len(ids)
        found = False
        for k, (p, role, L) in enumerate(dedup):
            cs = p + L
            nxt = dedup[k + 1][0] if k + 1 < len(dedup) else len(ids)
            if role != "assistant":
                continue
            cands = []
            for prio, pat in enumerate([self.end, *self.end_variants]):
                s = cs
                while s < nxt:
                    es, ae = find_token_span(ids, pat, s)
                    if es < 0 or ae > nxt:
                        break
                    cands.append((es, prio, ae))
                    s = es + 1
            if not cands:
                continue
            if len({c[0] for c in cands}) != 1:
                raise ValueError("ambiguous assistant end")
            es, _, ae = min(cands)
            found = True
            for i in range(cs, ae):
                mask[i] = 1.0
        if not found:
            raise ValueError("no assistant span")
        for i, t in enumerate(ids):
            if t in self.skipped:
                mask[i] = 0.0
        return mask

    def _examples(self, samples):
        """vlmdata Samples -> Bridge HF examples: image parts carry the decoded PIL image inline."""
        out = []
        for s in samples:
            imgs = iter(s.images)
            conv = []
            for turn in s.conversation:
                parts = []
                for part in turn["content"]:
                    if part.get("type") == "image":
                        im = next(imgs)
                        im = Image.open(io.BytesIO(im)) if isinstance(im, (bytes, bytearray)) else im
                        parts.append({"type": "image", "image": im})
                    else:
                        parts.append(dict(part))
                conv.append({"role": turn["role"], "content": parts})
            out.append({"conversation": conv})
        return out

    def _process(self, texts, images=None, padding=True):
        p = self.processor
        kw = {"text": texts, "padding": padding, "return_tensors": "pt"}
        if images is not None:
            kw.update(images=images, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        prev = p.tokenizer.padding_side
        p.tokenizer.padding_side = "right"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                return {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in p(**kw).items()}
        finally:
            p.tokenizer.padding_side = prev

    def collate(
        self,
        samples,
        sequence_length=4096,
        pad_to_max_length=False,
        pad_to_multiple_of=128,
        packing=False,
        packing_pad_to_multiple_of=1,
    ):
        examples = self._examples(samples)
        texts = [self.processor.apply_chat_template(e["conversation"], tokenize=False) for e in examples]
        per_images = [
            [
                self.fetch_image(part["image"])
                for turn in e["conversation"]
                for part in turn["content"]
                if part.get("type") == "image"
            ]
            for e in examples
        ]
        roles = [[t["role"] for t in e["conversation"]] for e in examples]
        if packing:
            return self._packed(texts, per_images, roles, sequence_length, packing_pad_to_multiple_of)
        with_idx = [i for i, im in enumerate(per_images) if im]
        without_idx = [i for i, im in enumerate(per_images) if not im]
        bw = self._process([texts[i] for i in with_idx], [per_images[i] for i in with_idx]) if with_idx else None
        bo = self._process([texts[i] for i in without_idx]) if without_idx else None
        batch: dict[str, Any] | None
        if bw is not None and bo is None:
            batch = bw
        elif bw is None:
            batch = bo
        else:
            assert bo is not None  # both halves present here
            pad_id = self.processor.tokenizer.pad_token_id or 0
            L = max(bw["input_ids"].shape[1], bo["input_ids"].shape[1])
            pad = lambda x, v: F.pad(x, (0, L - x.shape[1]), value=v)  # noqa: E731
            ids = torch.full((len(samples), L), pad_id, dtype=torch.long)
            am = torch.zeros((len(samples), L), dtype=torch.long)
            for r, i in enumerate(with_idx):
                ids[i], am[i] = pad(bw["input_ids"], pad_id)[r], pad(bw["attention_mask"], 0)[r]
            for r, i in enumerate(without_idx):
                ids[i], am[i] = pad(bo["input_ids"], pad_id)[r], pad(bo["attention_mask"], 0)[r]
            batch = {"input_ids": ids, "attention_mask": am}
            for k in VISUAL_KEYS:
                if k in bw:
                    batch[k] = bw[k]
        assert batch is not None  # both halves are None only for an empty ``samples``
        B, S = batch["input_ids"].shape
        batch["position_ids"] = torch.arange(S).unsqueeze(0).expand(B, -1).clone()
        mask = torch.tensor(
            [self.boundary_mask(batch["input_ids"][b].tolist(), roles[b]) for b in range(B)], dtype=torch.float32
        )
        labels = torch.cat([batch["input_ids"][:, 1:], torch.full((B, 1), IGNORE_INDEX)], dim=1)
        skipped = torch.tensor(sorted(self.skipped))
        labels = labels.masked_fill(torch.isin(labels, skipped), IGNORE_INDEX)
        mask = torch.cat([mask[:, 1:], torch.zeros(B, 1)], dim=1)
        batch["labels"] = labels.masked_fill(mask == 0, IGNORE_INDEX)
        batch["loss_mask"] = mask
        visual = {k: batch.pop(k, None) for k in VISUAL_KEYS}
        # prepare_sequence_batch -> pad_or_truncate_sequence_batch (pad id 0)
        target = (
            sequence_length
            if pad_to_max_length
            else min(sequence_length, -(-S // pad_to_multiple_of) * pad_to_multiple_of)
        )

        def fit(x, v):
            return F.pad(x, (0, target - x.shape[1]), value=v) if x.shape[1] < target else x[:, :target].contiguous()

        batch["input_ids"] = fit(batch["input_ids"], 0)
        batch["labels"] = fit(batch["labels"], IGNORE_INDEX)
        batch["loss_mask"] = fit(batch["loss_mask"], 0)
        batch["attention_mask"] = fit(batch["attention_mask"], 0)
        if "mm_token_type_ids" in batch:
            batch["mm_token_type_ids"] = fit(batch["mm_token_type_ids"], 0)
        pos = batch["position_ids"]
        batch["position_ids"] = (
            torch.cat([pos, torch.arange(S, target).unsqueeze(0).expand(B, -1)], 1)
            if S < target
            else pos[:, :target].contiguous()
        )
        batch["visual_inputs"] = visual
        return batch

    def _packed(self, texts, per_images, roles, sequence_length, multiple):
        rows, vis = [], {k: [] for k in VISUAL_KEYS}
        for text, imgs, rl in zip(texts, per_images, roles):
            sb = self._process([text], [imgs] if imgs else None, padding=False)
            ids = sb["input_ids"][0]
            mask = torch.tensor(self.boundary_mask(ids.tolist(), rl), dtype=torch.float32)
            labels = torch.cat([ids[1:], ids.new_full((1,), IGNORE_INDEX)])
            labels = labels.masked_fill(torch.isin(labels, torch.tensor(sorted(self.skipped))), IGNORE_INDEX)
            sm = torch.cat([mask[1:], mask.new_zeros(1)])
            rows.append({"input_ids": ids, "labels": labels.masked_fill(sm == 0, IGNORE_INDEX), "loss_mask": sm})
            for k in VISUAL_KEYS:
                if isinstance(sb.get(k), torch.Tensor):
                    vis[k].append(sb[k])
        lengths = [len(r["input_ids"]) for r in rows]
        if sequence_length is not None and max(lengths) > sequence_length:
            raise ValueError("row longer than sequence_length")
        padded = [-(-n // multiple) * multiple for n in lengths]
        T = sum(padded)
        out = {
            "input_ids": torch.zeros(1, T, dtype=torch.long),
            "position_ids": torch.zeros(1, T, dtype=torch.long),
            "labels": torch.full((1, T), IGNORE_INDEX, dtype=torch.long),
            "loss_mask": torch.zeros(1, T),
            "attention_mask": None,
        }
        off = 0
        cu, cup = [0], [0]
        for r, n, p in zip(rows, lengths, padded):
            for k in ("input_ids", "labels", "loss_mask"):
                out[k][0, off : off + n] = r[k]
            out["position_ids"][0, off : off + p] = torch.arange(p)
            off += p
            cu.append(cu[-1] + n)
            cup.append(cup[-1] + p)
        out["cu_seqlens_q"] = out["cu_seqlens_kv"] = torch.tensor(cu, dtype=torch.int32)
        if multiple > 1:
            out["cu_seqlens_q_padded"] = out["cu_seqlens_kv_padded"] = torch.tensor(cup, dtype=torch.int32)
        out["max_seqlen_q"] = out["max_seqlen_kv"] = torch.tensor(max(padded), dtype=torch.int32)
        out["total_tokens"] = T
        out["visual_inputs"] = {k: torch.cat(v) for k, v in vis.items() if v}
        return out
