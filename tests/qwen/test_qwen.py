"""Qwen-VL constants, smart_resize against transformers' own, the offline tokenizer and processor."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pytest
from PIL import Image

from vlmdata.qwen.spec import (
    BRIDGE_MAX_PIXELS,
    BRIDGE_MIN_PIXELS,
    QWEN2_VL_CHAT_TEMPLATE,
    SPECS,
    get_spec,
    grid_thw,
    load_qwen_tokenizer,
    smart_resize,
    visual_tokens,
)

hf_qwen2vl = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")


def _sizes(n: int, seed: int = 0):
    rng = random.Random(seed)
    out = [(1, 1), (1, 200), (200, 1), (1, 201), (3, 700), (28, 28), (27, 29), (14, 14), (480, 640), (1080, 1920)]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.4:
            out.append((rng.randint(1, 800), rng.randint(1, 800)))
        elif kind < 0.8:
            out.append((rng.randint(200, 5000), rng.randint(200, 5000)))
        elif kind < 0.9:  # long thin, around the aspect-ratio limit
            s = rng.randint(1, 60)
            out.append((s, s * rng.randint(150, 210)) if rng.random() < 0.5 else (s * rng.randint(150, 210), s))
        else:  # exact multiples and half-way points, where round() is banker's rounding
            f = rng.choice([28, 32])
            h, w = (f * rng.randint(1, 60) + rng.choice([0, f // 2]) for _ in range(2))
            out.append((h, w))
    return out


LIMITS = [(BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS), (56 * 56, 28 * 28 * 1280), (3136, 12_845_056), (65_536, 16_777_216)]


@pytest.mark.parametrize("factor", [28, 32])
@pytest.mark.parametrize("limits", LIMITS)
def test_smart_resize_equals_transformers(factor, limits):
    lo, hi = limits
    checked = 0
    for h, w in _sizes(1500, seed=factor + lo):
        try:
            ref = hf_qwen2vl.smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
        except ValueError as e:
            with pytest.raises(ValueError, match="aspect ratio"):
                smart_resize(h, w, factor, lo, hi)
            assert "aspect ratio" in str(e)
            continue
        got = smart_resize(h, w, factor, lo, hi)
        assert got == ref, (h, w, factor, lo, hi)
        assert type(got[0]) is int and type(got[1]) is int
        checked += 1
    assert checked > 1000


def test_aspect_ratio_limit():
    with pytest.raises(ValueError):
        smart_resize(10, 2001, 28)
    assert smart_resize(10, 2000, 28, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS)  # exactly 200 is allowed


@pytest.mark.parametrize(
    "model,h,w,tokens,grid",
    [
        ("qwen3-vl", 480, 640, 300, (1, 30, 40)),  # COCO at Bridge limits (REFERENCE table)
        ("qwen3-vl", 1080, 1920, 943, (1, 46, 82)),
        ("qwen3-vl", 256, 256, 196, (1, 28, 28)),  # upscaled to min_pixels
        ("qwen2.5-vl", 256, 256, 256, (1, 32, 32)),
        ("qwen2-vl", 256, 256, 256, (1, 32, 32)),
    ],
)
def test_reference_table(model, h, w, tokens, grid):
    assert visual_tokens(h, w, model) == tokens
    assert grid_thw(h, w, model) == grid


def test_specs():
    assert {s.patch_size for s in SPECS.values()} == {14, 16}
    assert get_spec("qwen3-vl").patch_dim == 1536 and get_spec("qwen2.5-vl").patch_dim == 1176
    assert get_spec("qwen3-vl").image_mean == (0.5, 0.5, 0.5)
    assert get_spec("qwen2-vl").image_std == get_spec("qwen2.5-vl").image_std
    assert get_spec("qwen2.5-vl").image_mean[0] == pytest.approx(0.48145466)
    with pytest.raises(ValueError, match="unknown"):
        get_spec("qwen4-vl")
    # the bridge limits are 256 and 1280 tokens of 28x28
    assert (BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS) == (256 * 28 * 28, 1280 * 28 * 28)


@pytest.fixture(scope="module")
def tokenizer():
    return load_qwen_tokenizer()


def test_tokenizer_has_vision_tokens(tokenizer):
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>")]
    assert ids == [151655, 151652, 151653]
    assert tokenizer("<|vision_start|><|image_pad|><|vision_end|>")["input_ids"] == ids[1:2] + ids[:1] + ids[2:]


def test_tokenizer_rejects_non_tokenizer_dir(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_qwen_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="missing-dir"):
        load_qwen_tokenizer(tmp_path / "missing-dir")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_qwen_tokenizer(tmp_path)


@pytest.mark.parametrize("model", list(SPECS))
def test_processor_matches_token_formula(model, tokenizer):
    from vlmdata.qwen.spec import build_qwen_processor

    proc = build_qwen_processor(model, tokenizer=tokenizer)
    spec = get_spec(model)
    assert type(proc).__name__ == spec.processor_class
    assert proc.image_processor.patch_size == spec.patch_size
    rng = np.random.default_rng(0)
    imgs = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(480, 640), (300, 200)]]
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Describe."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Noise."}]},
    ]
    text = proc.apply_chat_template(messages, tokenize=False)
    assert text.count("<|vision_start|><|image_pad|><|vision_end|>") == 2
    out = proc(text=[text], images=imgs, return_tensors="pt")
    want = [grid_thw(im.height, im.width, model) for im in imgs]
    assert out["image_grid_thw"].tolist() == [list(g) for g in want]
    assert tuple(out["pixel_values"].shape) == (sum(g[1] * g[2] for g in want), spec.patch_dim)
    n_pad = int((out["input_ids"] == tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())
    assert n_pad == sum(visual_tokens(im.height, im.width, model) for im in imgs)


def test_chat_template_choice(tokenizer):
    # the shipped tokenizer's template is text-only, so the Qwen2-VL one is used
    assert "<|image_pad|>" not in (tokenizer.chat_template or "")
    assert "<|vision_start|><|image_pad|><|vision_end|>" in QWEN2_VL_CHAT_TEMPLATE


def test_torchvision_backend():
    from vlmdata.qwen.spec import build_image_processor

    if importlib.util.find_spec("torchvision") is None:
        with pytest.raises(RuntimeError, match="torchvision"):
            build_image_processor("qwen3-vl", backend="torchvision")
    else:
        ip = build_image_processor("qwen3-vl", backend="torchvision")
        assert type(ip).__name__ == "Qwen2VLImageProcessor" and ip.patch_size == 16
    with pytest.raises(ValueError):
        build_image_processor("qwen3-vl", backend="cv2")
