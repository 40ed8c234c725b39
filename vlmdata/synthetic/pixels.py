"""Procedural pixels that a JPEG codec treats like a photograph.

Natural photographs have a power spectrum close to ``1/f^2`` (amplitude ``1/f``), colour that is
mostly luminance (the chroma channels are smooth and weak), hard occluding edges between objects,
and regions that differ in sharpness (in-focus texture next to a blurred background). Uniform
noise has none of these: it is flat in frequency, so as a JPEG it is several times larger and
slower to decode than a photograph of the same size; a flat colour is the opposite extreme.

How an image is made (all in YCbCr, the space JPEG codes in, so the encoder skips a colour
conversion):

* A process-wide :class:`FieldBank` holds one periodic ``1/f`` field of 2048x2048, built once by
  FFT and split into a low band and a high band (smooth cross-over at 1/32 cycles per pixel).
  Because ``1/f`` is scale invariant, a crop of any size has natural statistics.
* Each image takes random crops (offsets, flips) of the bank: a background layer and a
  foreground layer, each ``mean + scale * (low + detail * k * high)`` with its own sharpness
  ``k``; 2 to 6 random ellipses/polygons choose the foreground (hard edges), and each shape gets
  its own brightness and colour shift. Chroma is a weak crop of the low band.
* ``detail`` multiplies the high band: it moves the energy JPEG has to spend bytes on, so a
  target bytes-per-pixel can be reached at a realistic encoder quality (see ``jpeg.py``).

Generation is deterministic for ``(width, height, seed, detail)``: the bank comes from a fixed
seed and the per-image choices from ``numpy.random.default_rng(seed)``. A 640x480 image takes
about 1 ms (numpy and Pillow C loops, no FFT per image).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageChops, ImageDraw

BANK_SIZE = 2048
BANK_SEED = 0x5EED_1F
SPECTRUM_ALPHA = 2.0  # power ~ 1/f^alpha
CUTOFF = 1.0 / 32  # low/high band cross-over, cycles per pixel
LUMA_SCALE = 26.0  # grey levels per unit of the low band's standard deviation
CHROMA_SCALE = 5.0


@dataclass(frozen=True)
class FieldBank:
    """Periodic ``1/f^alpha`` noise split into two bands (float32, unit std of the low band)."""

    low: np.ndarray
    high: np.ndarray

    @property
    def size(self) -> int:
        return self.low.shape[0]

    @classmethod
    def build(cls, size: int = BANK_SIZE, seed: int = BANK_SEED, alpha: float = SPECTRUM_ALPHA,
              cutoff: float = CUTOFF) -> "FieldBank":
        rng = np.random.default_rng(seed)
        fy = np.fft.fftfreq(size)[:, None]
        fx = np.fft.rfftfreq(size)[None, :]
        f = np.sqrt(fy * fy + fx * fx)
        f[0, 0] = 1.0
        amp = f ** (-alpha / 2)
        amp[0, 0] = 0.0
        spec = amp * (rng.standard_normal(amp.shape) + 1j * rng.standard_normal(amp.shape))
        w_low = 1.0 / (1.0 + (f / cutoff) ** 4)
        low = np.fft.irfft2(spec * w_low, s=(size, size))
        high = np.fft.irfft2(spec * (1.0 - w_low), s=(size, size))
        s = low.std()
        return cls(low=(low / s).astype(np.float32), high=(high / s).astype(np.float32))


_bank: FieldBank | None = None
_bank_lock = threading.Lock()


def default_bank() -> FieldBank:
    """The process-wide bank (built on first use, ~1 s and 32 MB)."""
    global _bank
    if _bank is None:
        with _bank_lock:
            if _bank is None:
                _bank = FieldBank.build()
    return _bank


def _crop(field: np.ndarray, w: int, h: int, rng: np.random.Generator) -> np.ndarray:
    """A random w x h window of a periodic field, randomly flipped (a view when it fits)."""
    n = field.shape[0]
    oy, ox = int(rng.integers(0, max(1, n - h + 1))), int(rng.integers(0, max(1, n - w + 1)))
    if h <= n and w <= n:
        c = field[oy:oy + h, ox:ox + w]
    else:  # larger than the bank: the field is periodic, so tiling is seamless
        c = field[np.ix_((oy + np.arange(h)) % n, (ox + np.arange(w)) % n)]
    flips = int(rng.integers(0, 4))
    if flips & 1:
        c = c[:, ::-1]
    if flips & 2:
        c = c[::-1]
    return c


def _layer(bank: FieldBank, w: int, h: int, mean: float, detail: float, rng: np.random.Generator) -> Image.Image:
    y = np.multiply(_crop(bank.high, w, h, rng), np.float32(LUMA_SCALE * detail), dtype=np.float32)
    y += _crop(bank.low, w, h, rng) * np.float32(LUMA_SCALE)
    y += np.float32(mean)
    np.clip(y, 0, 255, out=y)
    return Image.fromarray(y.astype(np.uint8), "L")


def _chroma(bank: FieldBank, w: int, h: int, rng: np.random.Generator) -> Image.Image:
    c = _crop(bank.low, w, h, rng) * np.float32(CHROMA_SCALE * rng.uniform(0.5, 1.5))
    c += np.float32(128 + rng.normal(0, 10))
    np.clip(c, 0, 255, out=c)
    return Image.fromarray(c.astype(np.uint8), "L")


def _labels(w: int, h: int, rng: np.random.Generator) -> tuple[Image.Image, int]:
    """A label image: 0 background, 1..n occluding shapes (later ones on top)."""
    lab = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(lab)
    n = int(rng.integers(2, 7))
    size = max(w, h)
    for i in range(1, n + 1):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.06, 0.4) * size
        if rng.random() < 0.4:
            e = rng.uniform(0.4, 1.6)
            draw.ellipse([cx - r, cy - r * e, cx + r, cy + r * e], fill=i)
        else:
            k = int(rng.integers(3, 9))
            ang = np.sort(rng.uniform(0, 2 * np.pi, k))
            rad = r * rng.uniform(0.5, 1.0, k)
            draw.polygon([(float(cx + a * np.cos(t)), float(cy + a * np.sin(t))) for a, t in zip(rad, ang)], fill=i)
    return lab, n


def render(width: int, height: int, seed: int, detail: float = 1.0, bank: FieldBank | None = None) -> Image.Image:
    """A ``YCbCr`` PIL image of ``width`` x ``height`` with photo-like statistics.

    ``detail`` scales the high-frequency band (1.0 = the natural ``1/f`` continuation; 0 = smooth;
    larger = busier texture, more JPEG bytes). Deterministic for the arguments.
    """
    if width < 1 or height < 1:
        raise ValueError(f"bad size {width}x{height}")
    if detail < 0:
        raise ValueError(f"detail must be >= 0, got {detail}")
    bank = bank or default_bank()
    rng = np.random.default_rng(seed)
    w, h = int(width), int(height)
    # background: often a blurred, darker or brighter region; foreground: sharper objects
    bg = _layer(bank, w, h, rng.uniform(70, 170), detail * rng.uniform(0.4, 1.0), rng)
    fg = _layer(bank, w, h, rng.uniform(70, 170), detail * rng.uniform(1.0, 1.6), rng)
    lab, n = _labels(w, h, rng)
    mask = lab.point([0] + [255] * n + [0] * (255 - n))
    y = Image.composite(fg, bg, mask)
    # per-shape brightness and colour shifts (hard edges in all three channels)
    shifts = [128 + rng.normal(0, s, n + 1) for s in (22, 9, 9)]
    for s in shifts:
        s[0] = 128
    lut = [np.clip(np.rint(np.concatenate([s, np.full(255 - n, 128)])), 0, 255).astype(int).tolist() for s in shifts]
    y = ImageChops.add(y, lab.point(lut[0]), 1.0, -128)
    cb = ImageChops.add(_chroma(bank, w, h, rng), lab.point(lut[1]), 1.0, -128)
    cr = ImageChops.add(_chroma(bank, w, h, rng), lab.point(lut[2]), 1.0, -128)
    return Image.merge("YCbCr", (y, cb, cr))


def render_rgb(width: int, height: int, seed: int, detail: float = 1.0) -> np.ndarray:
    """:func:`render` as an ``(height, width, 3)`` uint8 RGB array."""
    return np.asarray(render(width, height, seed, detail).convert("RGB"))
