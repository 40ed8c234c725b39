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
