"""The baseline (Bridge's qwen2_5_collate_fn path, replicated) on its own: its restated constants, its span search,
its boundary-scan loss mask and the batch it returns, checked against the rules Bridge's source states (not against
vlmdata's loader: tests/loaders/test_loader_batches.py compares the two)."""

import io

import pytest
import torch
from PIL import Image

from vlmdata.baselines.bridge_hf import IGNORE_INDEX, QWEN_TOKENS, BridgeReference, find_token_span
from vlmdata.dataset.schema import Sample
from vlmdata.qwen import tokenize


def test_restated_constants_agree_with_the_loaders():
    # restated on purpose (the yardstick imports nothing of the path it measures); they must still agree
    assert tuple(QWEN_TOKENS) == tokenize.QWEN_SKIPPED_TOKENS
    assert IGNORE_INDEX == tokenize.IGNORE_INDEX == -100


@pytest.mark.parametrize(
    "ids,pat,start,want",
    [
        ([1, 2, 3, 2, 3], [2, 3], 0, (1, 3)),
        ([1, 2, 3, 2, 3], [2, 3], 2, (3, 5)),
        ([1, 2, 3], [4], 0, (-1, -1)),
        ([1, 2, 3], [], 0, (-1, -1)),
        ([1, 2, 3], [3], 3, (-1, -1)),
        ([1, 2], [1, 2, 3], 0, (-1, -1)),
    ],
)
def test_find_token_span(ids, pat, start, want):
    assert find_token_span(ids, pat, start) == want


@pytest.fixture(scope="module")
def ref():
    from vlmdata.qwen.spec import build_qwen_processor, load_qwen_tokenizer

    return BridgeReference(build_qwen_processor("qwen3-vl", tokenizer=load_qwen_tokenizer()))


def _jpeg(w=64, h=48):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (120, 30, 200)).save(buf, "JPEG")
    return buf.getvalue()


def _sample(key="k", turns=1, image=True):
    conv = []
    for t in range(turns):
        user = ([{"type": "image"}] if image and t == 0 else []) + [{"type": "text", "text": f"question {t}"}]
        conv += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer number {t}"}]},
        ]
    return Sample(key=key, conversation=conv, images=[_jpeg()] if image else [])


def test_boundary_mask_covers_assistant_content_and_end(ref):
    tok = ref.processor.tokenizer
    text = ref.processor.apply_chat_template(_sample(image=False, turns=2).conversation, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    mask = ref.boundary_mask(ids, ["user", "assistant", "user", "assistant"])
    kept = tok.decode([i for i, m in zip(ids, mask) if m])
    assert kept == "answer number 0<|im_end|>\nanswer number 1<|im_end|>\n"
    assert not any(m for i, m in zip(ids, mask) if i in ref.skipped)
    with pytest.raises(ValueError, match="no assistant span"):
        ref.boundary_mask(tok("<|im_start|>user\nq<|im_end|>\n", add_special_tokens=False)["input_ids"], ["user"])
    with pytest.raises(ValueError, match="assistant markers"):
        ref.boundary_mask(ids, ["user", "assistant"])


def test_collate_shifts_labels_and_pads_like_bridge(ref):
    batch = ref.collate([_sample("a"), _sample("b", turns=2, image=False)], sequence_length=4096)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["loss_mask"]
    assert ids.shape[1] % 128 == 0 and ids.shape == labels.shape == mask.shape  # pad_to_multiple_of=128
    sup = mask[:, :-1] == 1
    assert torch.equal(labels[:, :-1][sup], ids[:, 1:][sup])  # labels are the next token where supervised
    assert bool((labels[mask == 0] == IGNORE_INDEX).all())
    assert torch.equal(batch["position_ids"][0], torch.arange(ids.shape[1]))
    grid = batch["visual_inputs"]["image_grid_thw"]
    assert grid.shape == (1, 3)  # one image: the text-only sample was processed in a separate call, as Bridge does
    pads = int((ids == ref.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())
    assert pads == int(grid.prod()) // 4  # merge 2x2
    short = ref.collate([_sample("a")], sequence_length=16, pad_to_max_length=True)
    assert short["input_ids"].shape == (1, 16)  # truncated to sequence_length


def test_packed_rows_and_their_limit(ref):
    out = ref.collate([_sample("a"), _sample("b", image=False)], sequence_length=4096, packing=True)
    cu = out["cu_seqlens_q"].tolist()
    assert cu[0] == 0 and len(cu) == 3 and cu[-1] == out["total_tokens"] == out["input_ids"].shape[1]
    assert out["position_ids"][0, cu[1]] == 0  # positions restart per packed row
    with pytest.raises(ValueError, match="longer than sequence_length"):
        ref.collate([_sample("a")], sequence_length=8, packing=True)
