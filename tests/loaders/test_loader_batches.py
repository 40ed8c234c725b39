"""vlmdata batches == Megatron Bridge's qwen2_5_collate_fn output built with the real HF processor.

The reference (vlmdata.baselines.bridge_hf.BridgeReference) runs the HF processor (apply_chat_template +
processor(text, images) with Bridge's min/max pixels, after qwen-vl-utils' pre-resize) and Bridge's
boundary-scan loss mask re-implemented from its source on plain lists. vlmdata's own path never calls
the processor. Token ids, labels, loss masks, position ids, attention masks and grids must be equal;
pixel values bit-equal with exact_images=True and within draft_tolerance on the fast path.
"""

import os

import numpy as np
import pytest
import torch

from vlmdata.dataset.reader import parse_raw
from vlmdata.dataset.schema import Sample
from vlmdata.dataset.tar import iter_shard
from vlmdata.errors import OptionsError
from vlmdata.loaders.api import process_samples
from vlmdata.qwen.image import draft_tolerance
from vlmdata.qwen.tokenize import ChatTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDS = os.path.join(REPO, "sample_shards")
SEQ_KEYS = ("input_ids", "labels", "loss_mask", "position_ids", "attention_mask", "mm_token_type_ids")


@pytest.fixture(scope="module")
def samples():
    out = [parse_raw(r.files, r.key) for i in range(6) for r in iter_shard(os.path.join(SHARDS, f"shard-{i:06d}.tar"))]
    single = [s for s in out if len(s.images) == 1 and s.images[0][:2] == b"\xff\xd8"][:5]
    multi = [s for s in out if len(s.images) > 1][:2]
    png = [s for s in out if any(im[:4] == b"\x89PNG" for im in s.images)][:1]
    return single + multi + png


@pytest.fixture(scope="module")
def tok():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    return load_qwen_tokenizer()


@pytest.fixture(scope="module", params=["qwen3-vl", "qwen2.5-vl"])
def setup(request, tok):
    from vlmdata.baselines.bridge_hf import BridgeReference
    from vlmdata.qwen.spec import build_qwen_processor

    model = request.param
    proc = build_qwen_processor(model, tokenizer=tok)
    return model, BridgeReference(proc), ChatTokenizer(tok, model)


def check(a, b, model, exact):
    for k in SEQ_KEYS:
        assert a[k].dtype == b[k].dtype, k
        assert torch.equal(a[k], b[k]), k
    assert a["loss_mask"].dtype == torch.float32 and a["labels"].dtype == torch.int64
    va, vb = a["visual_inputs"], b["visual_inputs"]
    assert torch.equal(va.image_grid_thw, vb["image_grid_thw"]) and va.image_grid_thw.dtype == torch.int64
    assert va.pixel_values.shape == vb["pixel_values"].shape and va.pixel_values.dtype == torch.float32
    d = (va.pixel_values - vb["pixel_values"]).abs()
    if exact:
        assert d.max() == 0
    else:
        mean_tol, p99_tol = draft_tolerance(model)
        assert float(d.mean()) <= mean_tol
        assert float(np.quantile(d.numpy().ravel()[::7], 0.99)) <= p99_tol
    for f in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "image_sizes"):
        assert getattr(va, f) is None


def test_padded_batches_equal_bridge_collate(setup, samples):
    model, ref, chat = setup
    for i in range(0, len(samples), 4):
        grp = samples[i : i + 4]
        b = ref.collate(grp, sequence_length=4096)
        assert b["input_ids"].shape[1] % 128 == 0
        check(process_samples(grp, model, chat=chat, exact_images=True, seq_length=4096), b, model, True)
        check(process_samples(grp, model, chat=chat, seq_length=4096), b, model, False)
        assert (b["loss_mask"].sum(1) > 0).all()


def test_pad_to_max_length_and_truncation(setup, samples):
    model, ref, chat = setup
    grp = samples[:2]
    b = ref.collate(grp, sequence_length=2048, pad_to_max_length=True)
    a = process_samples(grp, model, chat=chat, exact_images=True, seq_length=2048, pad_to_max_length=True)
    assert a["input_ids"].shape == (2, 2048)
    check(a, b, model, True)
    # pad id: the tokenizer's pad up to the longest row (processor padding), 0 beyond (Bridge's collate)
    assert a["input_ids"][0, -1] == 0


def test_packing_cu_seqlens_equal_bridge(setup, samples):
    model, ref, chat = setup
    grp = samples[3:7]
    for mult in (1, 64):
        b = ref.collate(grp, sequence_length=8192, packing=True, packing_pad_to_multiple_of=mult)
        a = process_samples(
            grp, model, chat=chat, exact_images=True, seq_length=8192, packing=True, packing_pad_to_multiple_of=mult
        )
        for k in (
            "input_ids",
            "labels",
            "loss_mask",
            "position_ids",
            "cu_seqlens_q",
            "cu_seqlens_kv",
            "max_seqlen_q",
            "max_seqlen_kv",
        ):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        assert a["attention_mask"] is None and a["total_tokens"] == b["total_tokens"]
        assert ("cu_seqlens_q_padded" in a) == (mult > 1)
        if mult > 1:
            assert torch.equal(a["cu_seqlens_q_padded"], b["cu_seqlens_q_padded"])
            assert (a["cu_seqlens_q_padded"] % mult == 0).all()
        cu = a["cu_seqlens_q"].tolist()
        assert cu[0] == 0 and len(cu) == len(grp) + 1
        assert torch.equal(a["visual_inputs"].image_grid_thw, b["visual_inputs"]["image_grid_thw"])
    with pytest.raises(OptionsError, match="Packed sequence row length .* exceeds configured sequence_length 64"):
        process_samples(grp, model, chat=chat, seq_length=64, packing=True)
    assert issubclass(OptionsError, ValueError)  # what Bridge raises


def test_template_text_equals_hf_template(setup, samples):
    model, ref, chat = setup
    for s in samples + [
        Sample(
            "sys",
            [
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": " odd  spacing\n"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "\nok"}]},
                {"role": "user", "content": [{"type": "text", "text": "again?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "yes."}]},
            ],
        )
    ]:
        assert chat.render_text(s.conversation) == ref.processor.apply_chat_template(s.conversation, tokenize=False)


def test_text_only_multiturn_rows_equal(setup):
    model, ref, chat = setup
    conv = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi there, <b>what</b> is 2+2?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "4."}]},
        {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "6, of course."}]},
    ]
    grp = [Sample("t1", conv), Sample("t2", conv[1:3])]
    a = process_samples(grp, model, chat=chat, seq_length=4096)
    b = ref.collate(grp, sequence_length=4096)
    for k in ("input_ids", "labels", "loss_mask", "position_ids", "attention_mask"):
        assert torch.equal(a[k], b[k]), k
    assert a["visual_inputs"].pixel_values is None
    # two assistant turns, both supervised: answer tokens + <|im_end|> + "\n"
    assert (
        int(a["loss_mask"][0].sum())
        == len(chat.tokenizer.encode("4.")) + len(chat.tokenizer.encode("6, of course.")) + 4
    )


def test_visual_inputs_every_attribute_tensor_or_none(samples, tok):
    from dataclasses import fields

    a = process_samples(samples[:2], "qwen3-vl", tokenizer=tok)
    for f in fields(a["visual_inputs"]):
        v = getattr(a["visual_inputs"], f.name)
        assert v is None or isinstance(v, torch.Tensor)
    assert a["visual_inputs"].pixel_values.shape[1] == 1536
    try:
        import megatron.bridge  # noqa: F401
    except Exception:
        with pytest.raises(ImportError):
            a["visual_inputs"].to_bridge()
