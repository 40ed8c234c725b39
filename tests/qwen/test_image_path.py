"""The fast Qwen-VL image path against the real Hugging Face image processor on real photos.

Exact mode (draft=False) must be bit-identical to ``Qwen2VLImageProcessorPil``; the default fast
mode must give the same grids and shapes and stay within ``draft_tolerance`` (grey levels).
"""

from __future__ import annotations

import importlib.util
import io
import os

import numpy as np
import pytest
from PIL import Image

from vlmdata.qwen.image import (
    DRAFT_MEAN_TOL_LEVELS,
    DRAFT_P99_TOL_LEVELS,
    decode_jpeg_gpu,
    draft_tolerance,
    normalize,
    preprocess_image,
    preprocess_images,
    preprocess_pil,
)
from vlmdata.qwen.spec import build_image_processor, get_spec, grid_thw

MODELS = ["qwen3-vl", "qwen2.5-vl"]
MAX_TOL_LEVELS = 96  # a bound on single-pixel outliers at sharp edges (measured up to 64)

PHOTOS = {
    "astronaut": ("skimage", "data/astronaut.png"),
    "coffee": ("skimage", "data/coffee.png"),
    "chelsea": ("skimage", "data/chelsea.png"),
    "rocket": ("skimage", "data/rocket.jpg"),
    "grace_hopper": ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    "china": ("sklearn", "datasets/images/china.jpg"),
}


def _photo(name: str) -> Image.Image:
    pkg, rel = PHOTOS[name]
    spec = importlib.util.find_spec(pkg)
    if spec is None:
        pytest.skip(f"{pkg} not installed (test extra)")
    return Image.open(os.path.join(list(spec.submodule_search_locations)[0], rel)).convert("RGB")


def _encode(img: Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    b = io.BytesIO()
    img.save(b, fmt, **({"quality": 90} if fmt == "JPEG" else {}) | kw)
    return b.getvalue()


def _mosaic(w: int, h: int, tile=(200, 150)) -> Image.Image:
    """w x h tiled with native-resolution crops of all photos (real detail, no upscaling)."""
    photos = [_photo(n) for n in PHOTOS]
    m = Image.new("RGB", (w, h))
    k = 0
    for y in range(0, h, tile[1]):
        for x in range(0, w, tile[0]):
            p = photos[k % len(photos)]
            ox, oy = (k * 37) % (p.width - tile[0]), (k * 53) % (p.height - tile[1])
            m.paste(p.crop((ox, oy, ox + tile[0], oy + tile[1])), (x, y))
            k += 1
    return m


@pytest.fixture(scope="module")
def hf():
    return {m: build_image_processor(m, backend="pil") for m in MODELS}


def _hf_out(proc, data: bytes):
    out = proc(Image.open(io.BytesIO(data)), return_tensors="np")
    return out["pixel_values"], tuple(int(v) for v in out["image_grid_thw"][0])


def _levels(pv: np.ndarray, ref: np.ndarray, model: str) -> tuple[float, float, float]:
    """(max, mean, p99) |diff| in grey levels (normalised diff * 255 * std)."""
    d = np.abs(pv - ref) * (255 * min(get_spec(model).image_std))
    return float(d.max()), float(d.mean()), float(np.quantile(d, 0.99))


def _assert_close(pv, ref, model):
    mx, mean, p99 = _levels(pv, ref, model)
    assert mean <= DRAFT_MEAN_TOL_LEVELS and p99 <= DRAFT_P99_TOL_LEVELS and mx <= MAX_TOL_LEVELS, (mx, mean, p99)
    return mx, mean, p99


# --------------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize("model", MODELS)
def test_normalize_bit_exact_for_every_level(model):
    from transformers.image_transforms import normalize as hf_normalize
    from transformers.image_transforms import rescale as hf_rescale

    spec = get_spec(model)
    levels = np.tile(np.arange(256, dtype=np.uint8), (3, 1))[:, None, :]  # (3, 1, 256) channel-first
    cf = {"data_format": "channels_first", "input_data_format": "channels_first"}
    ref = hf_normalize(hf_rescale(levels, 1 / 255, **cf), spec.image_mean, spec.image_std, **cf)
    assert ref.dtype == np.float32
    np.testing.assert_array_equal(normalize(levels, spec, chw=True), ref)
    hwc = np.ascontiguousarray(levels.transpose(1, 2, 0))  # (1, 256, 3)
    np.testing.assert_array_equal(normalize(hwc, spec), ref.transpose(1, 2, 0))


def test_draft_tolerance_units():
    m3, p3 = draft_tolerance("qwen3-vl")
    assert m3 == pytest.approx(DRAFT_MEAN_TOL_LEVELS / 255 / 0.5) and p3 == pytest.approx(DRAFT_P99_TOL_LEVELS / 127.5)
    assert draft_tolerance("qwen2.5-vl")[0] > m3  # CLIP std < 0.5: one grey level is more


# --------------------------------------------------------------------------------- against HF


def _cases():
    """(id, bytes) on every photo: JPEG as is, downscaled by max_pixels, upscaled by min_pixels."""
    out = []
    for name in PHOTOS:
        out.append((f"{name}-native", lambda n=name: _encode(_photo(n))))
    out.append(("astronaut-1600x1200", lambda: _encode(_photo("astronaut").resize((1600, 1200), Image.BICUBIC))))
    out.append(("china-180x120-upscale", lambda: _encode(_photo("china").resize((180, 120), Image.BICUBIC))))
    out.append(("chelsea-png", lambda: _encode(_photo("chelsea"), "PNG")))
    out.append(("coffee-webp", lambda: _encode(_photo("coffee"), "WEBP", quality=90)))
    out.append(("rocket-grey-jpeg", lambda: _encode(_photo("rocket").convert("L"))))

    def rgba():
        im = _photo("grace_hopper").convert("RGBA")
        a = np.asarray(im).copy()
        a[..., 3] = np.linspace(0, 255, a.shape[1], dtype=np.uint8)[None, :]  # real partial transparency
        return _encode(Image.fromarray(a, "RGBA"), "PNG")

    out.append(("grace-rgba-png", rgba))
    out.append(("coffee-palette-gif", lambda: _encode(_photo("coffee").convert("P"), "GIF")))
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def case_bytes():
    return {cid: make() for cid, make in CASES}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_exact_mode_bit_identical_to_hf(model, cid, case_bytes, hf):
    data = case_bytes[cid]
    ref, ref_grid = _hf_out(hf[model], data)
    pv, grid = preprocess_image(data, model, draft=False)
    assert grid == ref_grid
    assert pv.dtype == np.float32 and pv.shape == ref.shape == (grid[1] * grid[2], get_spec(model).patch_dim)
    np.testing.assert_array_equal(pv, ref)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_fast_mode_close_to_hf(model, cid, case_bytes, hf):
    data = case_bytes[cid]
    ref, ref_grid = _hf_out(hf[model], data)
    pv, grid = preprocess_image(data, model)
    assert grid == ref_grid and pv.shape == ref.shape and pv.dtype == np.float32
    _assert_close(pv, ref, model)


@pytest.fixture(scope="module")
def big_jpeg():
    return _encode(_mosaic(2403, 1803))  # odd size: the draft box is fractional at every scale


# Target ~= source / scale is the worst case (a mild bicubic after the DCT downscale).
# Ignoring the fractional draft box (stretching by up to one reduced pixel) fails this test.
@pytest.mark.parametrize("scale,max_pixels", [(2, 1_003_520), (4, 100_352), (8, 50_176)])
def test_draft_decode_within_tolerance(scale, max_pixels, big_jpeg, hf):
    for model in MODELS:
        spec = get_spec(model)
        proc = build_image_processor(model, min_pixels=3136, max_pixels=max_pixels)
        th, tw = (g * spec.patch_size for g in grid_thw(1803, 2403, model, 3136, max_pixels)[1:])
        probe = Image.open(io.BytesIO(big_jpeg))
        probe.draft("RGB", (tw, th))
        assert probe.width == -(-2403 // scale)  # the DCT downscale really happens, at this scale
        ref, ref_grid = _hf_out(proc, big_jpeg)
        pv, grid = preprocess_image(big_jpeg, model, 3136, max_pixels, draft=True)
        assert grid == ref_grid and pv.shape == ref.shape
        _assert_close(pv, ref, model)
        exact, _ = preprocess_image(big_jpeg, model, 3136, max_pixels, draft=False)
        np.testing.assert_array_equal(exact, ref)


def test_tolerance_rejects_a_wrong_layout(case_bytes, hf):
    """The closeness check has teeth: a one-pixel shift or a swapped merge order fails it."""
    model = "qwen3-vl"
    ref, (_, gh, gw) = _hf_out(hf[model], case_bytes["china-native"])
    pv, _ = preprocess_image(case_bytes["china-native"], model)
    swapped = pv.reshape(gh // 2, gw // 2, 2, 2, -1).transpose(0, 1, 3, 2, 4).reshape(pv.shape)
    with pytest.raises(AssertionError):
        _assert_close(swapped, ref, model)
    im = Image.open(io.BytesIO(case_bytes["china-native"]))
    shifted, _ = preprocess_pil(im.crop((2, 2, im.width + 2, im.height + 2)), model)
    with pytest.raises(AssertionError):
        _assert_close(shifted, ref, model)


def test_preprocess_pil_in_memory_and_batch(hf):
    rng = np.random.default_rng(1)
    noise = Image.fromarray(rng.integers(0, 256, (300, 500, 3), dtype=np.uint8))  # a mock image: no bytes
    for model in MODELS:
        out = hf[model](noise, return_tensors="np")
        pv, grid = preprocess_pil(noise, model, draft=False)
        np.testing.assert_array_equal(pv, out["pixel_values"])
        assert [1, *grid[1:]] == out["image_grid_thw"][0].tolist()
        pv_fast, _ = preprocess_pil(noise, model)
        _assert_close(pv_fast, out["pixel_values"], model)
    imgs = [_encode(_photo("coffee")), _encode(_photo("rocket"), "PNG")]
    out = hf["qwen3-vl"]([Image.open(io.BytesIO(b)) for b in imgs], return_tensors="np")
    pv, grids = preprocess_images(imgs, "qwen3-vl", draft=False)
    np.testing.assert_array_equal(pv, out["pixel_values"])
    np.testing.assert_array_equal(grids, out["image_grid_thw"])
    assert grids.dtype == np.int64
    empty_pv, empty_g = preprocess_images([], "qwen3-vl")
    assert empty_pv.shape == (0, 1536) and empty_g.shape == (0, 3)


def test_bad_resampler():
    with pytest.raises(ValueError, match="resampler"):
        preprocess_image(_encode(_photo("coffee")), "qwen3-vl", resampler="lanczos")


def test_decode_jpeg_gpu():
    data = [_encode(_photo("chelsea")), _encode(_photo("china"))]
    try:
        import torch
        import torchvision  # noqa: F401

        ready = torch.cuda.is_available()
    except ImportError:
        ready = False
    if not ready:
        with pytest.raises(RuntimeError, match="torchvision|CUDA"):
            decode_jpeg_gpu(data, "cuda")
        return
    out = decode_jpeg_gpu(data, "cuda")
    for t, b in zip(out, data):
        ref = np.asarray(Image.open(io.BytesIO(b)).convert("RGB")).transpose(2, 0, 1)
        assert t.is_cuda and t.dtype == torch.uint8 and tuple(t.shape) == ref.shape
        assert np.abs(t.cpu().numpy().astype(int) - ref).mean() < 2  # nvJPEG vs libjpeg-turbo IDCT
    with pytest.raises(RuntimeError, match="CUDA"):
        decode_jpeg_gpu(data, "cpu")
