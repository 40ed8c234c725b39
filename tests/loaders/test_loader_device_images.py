"""Images decoded and preprocessed in the training process (``image_device``): the same batches as the
CPU path (grids, token ids) and pixel values within the fast path's tolerance of Bridge's exact ones.
CUDA's nvJPEG is replaced by a Pillow decoder with the same interface, so this runs on CPU."""

import os

import pytest
import torch

from vlmdata.loaders import device_images
from vlmdata.loaders.api import make_loader
from vlmdata.qwen.image import draft_tolerance

SHARDS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sample_shards")


@pytest.fixture
def cpu_decoder(monkeypatch):
    monkeypatch.setattr(device_images, "nvjpeg_decoder", device_images.pil_decoder)


def test_device_images_match_bridge_within_tolerance(cpu_decoder):
    exact = make_loader(SHARDS, seq_length=4096, micro_batch_size=2, seed=1, exact_images=True, num_workers=2)
    dev = make_loader(SHARDS, seq_length=4096, micro_batch_size=2, seed=1, image_device="cpu", num_workers=2)
    mean_tol, p99_tol = draft_tolerance("qwen3-vl")
    n = 0
    for x, y in zip(exact, dev):
        assert "deferred_images" not in y
        assert torch.equal(x["input_ids"], y["input_ids"]) and torch.equal(x["loss_mask"], y["loss_mask"])
        gx, gy = x["visual_inputs"].image_grid_thw, y["visual_inputs"].image_grid_thw
        assert torch.equal(gx, gy)
        d = (x["visual_inputs"].pixel_values - y["visual_inputs"].pixel_values).abs().flatten()
        assert d.mean() <= mean_tol and d.kthvalue(int(0.99 * d.numel())).values <= p99_tol
        n += 1
    assert n == 45


def test_device_images_need_the_decode_mode():
    with pytest.raises(ValueError, match="`image_device` works with `images`='decode' only"):
        make_loader(SHARDS, image_device="cpu", images="shapes")


def test_patchify_torch_is_the_numpy_layout():
    import numpy as np

    from vlmdata.qwen.image import patchify
    from vlmdata.qwen.spec import get_spec

    spec = get_spec("qwen3-vl")
    img = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    ref = patchify(img, spec)
    got = device_images.patchify_torch(torch.from_numpy(img).permute(2, 0, 1).float(), spec)
    assert got.shape == ref.shape and torch.allclose(got, torch.from_numpy(ref), atol=1e-6)


def test_host_decoded_images_match_bridge_within_tolerance():
    """image_decoder="pillow": the workers decode (drafting where the target allows), the device
    resizes, normalises and patchifies; same batches, pixels within the fast path's tolerance."""
    exact = make_loader(SHARDS, seq_length=4096, micro_batch_size=2, seed=1, exact_images=True, num_workers=2)
    host = make_loader(
        SHARDS, seq_length=4096, micro_batch_size=2, seed=1, image_device="cpu", image_decoder="pillow", num_workers=2
    )
    mean_tol, p99_tol = draft_tolerance("qwen3-vl")
    n = 0
    for x, y in zip(exact, host):
        assert "deferred_images" not in y
        assert torch.equal(x["input_ids"], y["input_ids"]) and torch.equal(x["loss_mask"], y["loss_mask"])
        assert torch.equal(x["visual_inputs"].image_grid_thw, y["visual_inputs"].image_grid_thw)
        d = (x["visual_inputs"].pixel_values - y["visual_inputs"].pixel_values).abs().flatten()
        assert d.mean() <= mean_tol and d.kthvalue(int(0.99 * d.numel())).values <= p99_tol
        n += 1
    assert n == 45


def test_host_decode_hands_over_uint8_and_drafts_large_jpegs():
    import io

    import numpy as np
    from PIL import Image

    from vlmdata.qwen.spec import BRIDGE_MAX_PIXELS, BRIDGE_MIN_PIXELS, get_spec

    spec = get_spec("qwen3-vl")
    rng = np.random.default_rng(3)
    # 2403 x 3205, smooth; not a multiple of the DCT scale, so the reduced image covers a little more than
    # the source and the exact mapping (scale) is needed
    big = rng.integers(0, 256, (31, 41, 3), dtype=np.uint8).repeat(80, 0).repeat(80, 1)[:2403, :3205]
    buf = io.BytesIO()
    Image.fromarray(big).save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    pv_n, grid_n, item_n = device_images.defer_image(data, spec, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS)
    pv_p, grid_p, item_p = device_images.defer_image(data, spec, BRIDGE_MIN_PIXELS, BRIDGE_MAX_PIXELS, decoder="pillow")
    assert grid_n == grid_p and pv_n.shape == pv_p.shape
    assert item_n[0] == "jpeg" and item_n[1] == data and item_n[3] is None
    kind, payload, size, scale = item_p
    assert kind == "rgb" and payload.dtype == torch.uint8 and payload.shape[2] == 3
    assert payload.shape[0] < 2403 and scale is not None  # decoded at reduced DCT scale, mapped exactly
    assert size == (grid_p[1] * spec.patch_size, grid_p[2] * spec.patch_size)
    # finished on the device, the drafted image lands within tolerance of the device-decoded one
    rows = []
    for item, pv in ((item_n, pv_n), (item_p, pv_p)):
        vis = type("V", (), {"pixel_values": torch.from_numpy(np.array(pv))})()
        b = device_images.finish_batch(
            {"visual_inputs": vis, "deferred_images": [item]}, spec, "cpu", device_images.pil_decoder("cpu")
        )
        rows.append(b["visual_inputs"].pixel_values)
    mean_tol, p99_tol = draft_tolerance(spec)
    d = (rows[0] - rows[1]).abs().flatten()
    assert d.mean() <= mean_tol and d.kthvalue(int(0.99 * d.numel())).values <= p99_tol


def test_image_decoder_is_checked():
    from vlmdata.errors import OptionsError

    with pytest.raises(OptionsError, match="`image_decoder`='pillow' needs an `image_device`"):
        make_loader(SHARDS, image_decoder="pillow")
    with pytest.raises(OptionsError, match="`image_decoder` must be one of"):
        make_loader(SHARDS, image_device="cpu", image_decoder="turbo")
