"""Procedural pixels that a JPEG codec treats like a photograph.

Natural photographs have a power spectrum close to ``1/f^2`` (amplitude ``1/f``), colour that is
mostly luminance (the chroma channels are smooth and weak), hard occluding edges between objects,
and regions that differ in sharpness (in-focus texture next to a blurred background). Uniform
noise has none of these: it is flat in frequency, so as a JPEG it is several times larger and
slower to decode than a photograph of the same size; a flat colour is the opposite extreme.

How an image is made (in YCbCr, the space JPEG codes in, so the encoder skips a colour conversion):

* A process-wide :class:`FieldBank` holds one periodic ``1/f`` field of 2048x2048, built once by
  FFT and split into a low band and a high band (smooth cross-over at 1/32 cycles per pixel),
  plus two weaker, smoother chroma fields. Because ``1/f`` is scale invariant, a crop of any size
  has natural statistics.
* ``detail`` multiplies the high band: luma = ``128 + 26 * (low + detail * high)``. It moves the
  energy JPEG spends bytes on, so a target bytes-per-pixel is reached at a realistic encoder
  quality (see ``jpeg.py``). The bank keeps one ready uint8 luma plane per detail level on a
  geometric ladder (ratio ``2**(1/4)``, built on first use, 4 MB each); a requested ``detail`` is
  snapped to the nearest rung.
* An image is a background crop (one rung smoother, like an out-of-focus backdrop) with 2 to 6
  random ellipses/polygons filled from another crop (one rung sharper): hard occluding edges in
  luma and chroma, since two far-apart windows of a ``1/f`` field differ in mean.

Per image only memory copies and Pillow C loops run (no FFT, no float maths): about 1 ms for
640x480. Deterministic for ``(width, height, seed, detail)``: the bank comes from a fixed seed
and the per-image choices from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np
from PIL import Image, ImageDraw

from vlmdata.errors import OptionsError

BANK_SIZE = 2048
BANK_SEED = 0x5EED1F
SPECTRUM_ALPHA = 2.0  # power ~ 1/f^alpha
CUTOFF = 1.0 / 32  # low/high band cross-over, cycles per pixel
LUMA_SCALE = 26.0  # std of the high band at detail 1, grey levels (the low band's is similar)
CHROMA_SCALE = 7.0
SPARSITY = 1.5  # exponent that makes the high band heavy-tailed (1 = Gaussian)
RUNGS_PER_OCTAVE = 4  # detail ladder: 2**(k/4)
MIN_DETAIL, MAX_DETAIL = 1 / 16, 16.0


def _pink_noise(size: int, alpha: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Periodic ``1/f^alpha`` noise as (rfft2 spectrum, |f|), scaled so that the pixel variance
    per unit of frequency does not depend on ``size`` (a small bank has the same fine detail)."""
    fy = np.fft.fftfreq(size).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(size).astype(np.float32)[None, :]
    f = np.sqrt(fy * fy + fx * fx)
    f[0, 0] = 1.0
    amp = np.float32(size) * f ** np.float32(-alpha / 2)
    amp[0, 0] = 0.0
    spec = np.empty(amp.shape, np.complex64)  # single precision: half the time and memory
    spec.real = amp * rng.standard_normal(amp.shape, dtype=np.float32)
    spec.imag = amp * rng.standard_normal(amp.shape, dtype=np.float32)
    return spec, f


def _sparsify(z: np.ndarray, p: float) -> np.ndarray:
    """``sign(z) |z|^p`` rescaled to unit variance for unit-Gaussian ``z``: heavier tails, like the
    sparse wavelet/DCT coefficients of photographs (few strong edges, many near-zero values)."""
    if p == 1.0:
        return z
    norm = math.sqrt(2.0**p * math.gamma(p + 0.5) / math.sqrt(math.pi))  # sqrt(E|z|^(2p))
    return np.sign(z) * np.abs(z) ** p / norm


@functools.lru_cache(maxsize=None)
def _expected_std(alpha: float, cutoff: float, band: str) -> float:
    """Std that ``_pink_noise`` * band weight has in a BANK_SIZE field (the normaliser for every
    bank size: the default bank and the small calibration banks share absolute amplitudes)."""
    n = BANK_SIZE
    f2 = np.fft.fftfreq(n)[:, None] ** 2 + np.fft.fftfreq(n)[None, :] ** 2
    f2[0, 0] = 1.0
    w = 1.0 / (1.0 + (f2 / cutoff**2) ** 2)
    w = 1.0 - w if band == "high" else w
    p = f2 ** (-alpha / 2) * w * w
    p[0, 0] = 0.0
    return float(np.sqrt(2.0 * p.sum() / n**2))


def _u8(a: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def snap_detail(detail: float) -> float:
    """The ladder rung :func:`render` uses for ``detail``."""
    return 2.0 ** (_rung(detail) / RUNGS_PER_OCTAVE)


def _rung(detail: float) -> int:
    d = min(max(float(detail), MIN_DETAIL), MAX_DETAIL)
    return round(math.log2(d) * RUNGS_PER_OCTAVE)


class FieldBank:
    """Band-split ``1/f`` luma fields, chroma planes, and lazily built uint8 luma per detail rung."""

    def __init__(
        self, size: int = BANK_SIZE, seed: int = BANK_SEED, alpha: float = SPECTRUM_ALPHA, cutoff: float = CUTOFF
    ):
        rng = np.random.default_rng(seed)
        spec, f = _pink_noise(size, alpha, rng)
        w_low = 1.0 / (1.0 + (f / np.float32(cutoff)) ** 4)
        low = np.fft.irfft2(spec * w_low, s=(size, size))
        high = np.fft.irfft2(spec * (1.0 - w_low), s=(size, size))
        s = _expected_std(alpha, cutoff, "high")
        high = _sparsify(high / s, SPARSITY) * s
        self.size = size
        self.low = (low * (LUMA_SCALE / s)).astype(np.float32)  # grey levels around 0
        self.high = (high * (LUMA_SCALE / s)).astype(np.float32)  # std LUMA_SCALE
        # chroma: smoother (steeper spectrum, low band only), weak, independent of luma
        chroma = []
        for _ in range(2):
            cs, _f = _pink_noise(size, alpha + 0.5, rng)
            c = np.fft.irfft2(cs * w_low, s=(size, size))
            chroma.append(_u8(128 + c * (CHROMA_SCALE / _expected_std(alpha + 0.5, cutoff, "low"))))
        self.cb, self.cr = chroma
        self._luma: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def luma(self, rung: int) -> np.ndarray:
        """uint8 luma plane ``128 + low + 2**(rung/4) * high`` (cached)."""
        plane = self._luma.get(rung)
        if plane is None:
            with self._lock:
                plane = self._luma.get(rung)
                if plane is None:
                    d = np.float32(2.0 ** (rung / RUNGS_PER_OCTAVE))
                    plane = self._luma[rung] = _u8(128 + self.low + d * self.high)
        return plane

    def planes(self, rung: int, box: tuple[int, int, int, int]) -> list[np.ndarray]:
        """Y, Cb, Cr windows ``(x0, y0, x1, y1)`` of the bank (wrapping: the fields are periodic)."""
        return [_wrap_crop(p, box) for p in (self.luma(rung), self.cb, self.cr)]


def _wrap_crop(plane: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = box
    n = plane.shape[0]
    if x1 <= n and y1 <= n:
        return plane[y0:y1, x0:x1]  # a view
    return plane[np.ix_(np.arange(y0, y1) % n, np.arange(x0, x1) % n)]


_bank: FieldBank | None = None
_bank_lock = threading.Lock()


def default_bank() -> FieldBank:
    """The process-wide bank (built on first use: about 1 s, 40 MB plus 4 MB per rung used)."""
    global _bank
    if _bank is None:
        with _bank_lock:
            if _bank is None:
                _bank = FieldBank()
    return _bank


def _window(n: int, w: int, h: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    x = int(rng.integers(0, max(1, n - w + 1)))
    y = int(rng.integers(0, max(1, n - h + 1)))
    return x, y, x + w, y + h


def _shapes(w: int, h: int, rng: np.random.Generator) -> Image.Image:
    """Mask (mode L) of 2 to 6 random ellipses and polygons."""
    mask = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(mask)
    size = max(w, h)
    for _ in range(int(rng.integers(2, 7))):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.06, 0.4) * size
        if rng.random() < 0.4:
            e = rng.uniform(0.4, 1.6)
            draw.ellipse([cx - r, cy - r * e, cx + r, cy + r * e], fill=255)
        else:
            k = int(rng.integers(3, 9))
            ang = np.sort(rng.uniform(0, 2 * np.pi, k))
            rad = r * rng.uniform(0.5, 1.0, k)
            draw.polygon([(float(cx + a * np.cos(t)), float(cy + a * np.sin(t))) for a, t in zip(rad, ang)], fill=255)
    return mask


def render(width: int, height: int, seed: int, detail: float = 1.0, bank: FieldBank | None = None) -> Image.Image:
    """A ``YCbCr`` PIL image of ``width`` x ``height`` with photo-like statistics.

    ``detail`` scales the high-frequency band (1.0 = the natural ``1/f`` continuation; smaller =
    smoother, larger = busier texture and more JPEG bytes); it is snapped to the ladder
    (:func:`snap_detail`), clamped to [1/16, 16]. Deterministic for the arguments.
    """
    if width < 1 or height < 1:
        raise OptionsError(f"`width` and `height` must be >= 1, got {width}x{height}")
    if not detail > 0:
        raise OptionsError(f"`detail` must be > 0, got {detail}")
    bank = bank or default_bank()
    rng = np.random.default_rng(seed)
    w, h, k = int(width), int(height), _rung(detail)
    bg = bank.planes(k - 2, _window(bank.size, w, h, rng))
    fg = bank.planes(k + 1, _window(bank.size, w, h, rng))
    mask = np.asarray(_shapes(w, h, rng))  # 0 or 255
    out = []
    for b, f in zip(bg, fg):  # b where mask is 0, f where it is 255, in three uint8 SIMD passes
        x = np.bitwise_xor(b, f)
        x &= mask
        x ^= b
        out.append(Image.fromarray(x, "L"))
    return Image.merge("YCbCr", out)


def render_rgb(width: int, height: int, seed: int, detail: float = 1.0) -> np.ndarray:
    """:func:`render` as an ``(height, width, 3)`` uint8 RGB array."""
    return np.asarray(render(width, height, seed, detail).convert("RGB"))
