"""Synthetic image payloads: determinism, byte targets, encoder settings, photo-like content."""

import io

import numpy as np
import pytest
from PIL import Image

from vlmdata.synthetic import (
    ImagePool,
    SyntheticImage,
    encode,
    encode_to_target,
    jpeg_info,
    make_image,
    render,
    render_rgb,
)


def test_render_is_deterministic_for_a_seed():
    a = render_rgb(320, 240, seed=7, detail=1.0)
    assert a.shape == (240, 320, 3) and a.dtype == np.uint8
    assert np.array_equal(a, render_rgb(320, 240, seed=7, detail=1.0))
    assert not np.array_equal(a, render_rgb(320, 240, seed=8, detail=1.0))
    assert make_image(256, 192, 20000, seed=3) == make_image(256, 192, 20000, seed=3)
    assert make_image(256, 192, 20000, seed=3) != make_image(256, 192, 20000, seed=4)


def test_larger_than_the_bank_wraps():
    im = render(2300, 40, seed=1)
    assert im.size == (2300, 40) and im.mode == "YCbCr"


GRID = [(640, 480, bpp) for bpp in (0.3, 0.5, 0.7)] + [(480, 640, 0.45), (1920, 1080, 0.4), (256, 256, 0.6)]


@pytest.mark.parametrize("subsampling", ["4:2:0", "4:2:2", "4:4:4"])
@pytest.mark.parametrize("w,h,bpp", GRID)
def test_size_within_tolerance_and_subsampling_kept(w, h, bpp, subsampling):
    target = int(bpp * w * h)
    data = make_image(w, h, target, subsampling, seed=w + h)
    assert abs(len(data) / target - 1) <= 0.10
    info = jpeg_info(data)
    assert info["subsampling"] == subsampling and info["progressive"] is False
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (w, h) and im.format == "JPEG"


def test_progressive_and_quality_hint():
    data = make_image(400, 300, 40000, "4:2:0", progressive=True, seed=1, quality=85)
    info = jpeg_info(data)
    assert info["progressive"] is True and abs(len(data) / 40000 - 1) <= 0.10
    assert abs(info["quality_estimate"] - 85) <= 8  # the quality search stays near the hint


@pytest.mark.parametrize("quality", [10, 30, 50, 75, 85, 90, 95, 98])
@pytest.mark.parametrize("subsampling", ["4:2:0", "4:2:2", "4:4:4"])
def test_jpeg_info_recovers_pillow_settings(quality, subsampling):
    im = Image.fromarray(render_rgb(96, 64, seed=quality))
    info = jpeg_info(encode(im, "JPEG", quality, subsampling))
    assert abs(info["quality_estimate"] - quality) <= 3
    assert info["subsampling"] == subsampling


def test_jpeg_info_gray():
    buf = io.BytesIO()
    Image.new("L", (32, 32), 90).save(buf, "JPEG", quality=70)
    assert jpeg_info(buf.getvalue())["subsampling"] == "gray"


def _radial_slope(gray: np.ndarray) -> float:
    """Slope of log power against log frequency, 1/64 to 1/4 cycles per pixel (Hann window)."""
    g = gray.astype(np.float64)
    g -= g.mean()
    g *= np.outer(np.hanning(g.shape[0]), np.hanning(g.shape[1]))
    p = np.abs(np.fft.fft2(g)) ** 2
    fy, fx = np.meshgrid(np.fft.fftfreq(g.shape[0]), np.fft.fftfreq(g.shape[1]), indexing="ij")
    f = np.hypot(fy, fx)
    bins = np.geomspace(1 / 64, 1 / 4, 12)
    idx = np.digitize(f.ravel(), bins)
    lf, lp = [], []
    for i in range(1, len(bins)):
        sel = idx == i
        lf.append(np.log(f.ravel()[sel].mean()))
        lp.append(np.log(p.ravel()[sel].mean()))
    return float(np.polyfit(lf, lp, 1)[0])


def test_content_is_photo_like_not_flat_nor_noise():
    w, h = 512, 384
    rgb = render_rgb(w, h, seed=11, detail=1.0)
    gray = np.asarray(Image.fromarray(rgb).convert("L"))
    slope = _radial_slope(gray)
    assert -3.2 <= slope <= -1.5, slope  # natural images: about -2 (uniform noise: 0)
    noise = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    assert abs(_radial_slope(noise[..., 0])) < 0.3

    def q90(a):
        return len(encode(Image.fromarray(a), "JPEG", 90, "4:2:0"))

    flat = np.full((h, w, 3), 128, np.uint8)
    assert 3 * q90(flat) < q90(rgb) < 0.6 * q90(noise)
    # chroma is weaker than luma, as in photographs
    ycc = np.asarray(render(w, h, seed=11).convert("YCbCr")).astype(np.float64)
    assert ycc[..., 1].std() < ycc[..., 0].std() and ycc[..., 2].std() < ycc[..., 0].std()


def test_detail_moves_bytes():
    sizes = [len(encode(render(320, 240, seed=2, detail=d), "JPEG", 90)) for d in (0.25, 1.0, 4.0)]
    assert sizes[0] < sizes[1] < sizes[2]


def test_encode_to_target_on_given_pixels():
    rgb = render_rgb(320, 240, seed=5)
    data, q = encode_to_target(rgb, 12000, subsampling="4:4:4")
    assert abs(len(data) / 12000 - 1) <= 0.10 and 5 <= q <= 98
    assert jpeg_info(data)["subsampling"] == "4:4:4"


def test_png_is_best_effort_through_detail():
    e = SyntheticImage(200, 150, int(1.5 * 200 * 150), fmt="PNG").encode(seed=1)
    assert e.data[:8] == b"\x89PNG\r\n\x1a\n" and e.quality is None
    assert 0.75 <= e.ratio <= 1.25


def test_pool_reuses_slots_deterministically():
    spec = SyntheticImage(160, 120, 6000)
    with ImagePool(slots=4, threads=2) as pool:
        a = pool.get(spec, 1)
        assert pool.get(spec, 5) == a  # same slot
        seq = [pool.get(spec, s) for s in range(8)]
        assert list(pool.map([(spec, s) for s in range(8)])) == seq
        assert pool.stats()["entries"] == 4
    with ImagePool(slots=4) as other:
        assert other.get(spec, 1) == a  # independent of order and threads
