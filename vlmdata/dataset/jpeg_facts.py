"""JPEG facts read from the header only: ``jpeg_info(data)`` (the IJG quality estimate from the quantisation
tables, chroma subsampling, progressive) and ``quality_from_table``; the profile and the synthetic twin read them
(``vlmdata.dataset.images`` re-exports both). Pillow's ``quantization`` tables, no pixel decode."""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image

# IJG (libjpeg) standard luminance table, natural (row-major) order, as Pillow reports it
_IJG_LUMA = (
    16,
    11,
    10,
    16,
    24,
    40,
    51,
    61,
    12,
    12,
    14,
    19,
    26,
    58,
    60,
    55,
    14,
    13,
    16,
    24,
    40,
    57,
    69,
    56,
    14,
    17,
    22,
    29,
    51,
    87,
    80,
    62,
    18,
    22,
    37,
    56,
    68,
    109,
    103,
    77,
    24,
    35,
    55,
    64,
    81,
    104,
    113,
    92,
    49,
    64,
    78,
    87,
    103,
    121,
    120,
    101,
    72,
    92,
    95,
    98,
    112,
    100,
    103,
    99,
)
_SAMPLING_NAMES = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0", (4, 1): "4:1:1"}


def quality_from_table(table) -> int:
    """The IJG quality (1..100) whose scaled standard luma table is nearest to ``table``."""

    t = np.asarray(list(table), dtype=np.float64)
    best_q, best_err = 90, math.inf  # libjpeg's default quality when nothing fits better
    for q in range(1, 101):
        scale = 5000 // q if q < 50 else 200 - 2 * q  # libjpeg jpeg_quality_scaling
        ref = np.clip(np.floor((np.asarray(_IJG_LUMA, dtype=np.float64) * scale + 50) / 100), 1, 255)
        err = float(np.abs(np.log(ref) - np.log(np.maximum(t, 1))).sum())
        if err < best_err:
            best_q, best_err = q, err
    return best_q


def jpeg_info(data: bytes) -> dict:
    """``{quality_estimate, subsampling, progressive}`` of JPEG bytes (header only, no decode).

    ``subsampling`` is "4:4:4", "4:2:2", "4:2:0" (also "4:4:0", "4:1:1", "gray", or "HxV" of
    the luma sampling factors for anything else); ``quality_estimate`` is None without tables.
    """
    with Image.open(io.BytesIO(data)) as im:
        if im.format != "JPEG":
            raise ValueError(f"not a JPEG: {im.format}")
        tables = getattr(im, "quantization", None) or {}
        layers = getattr(im, "layer", [])
        if len(layers) == 1:
            sub = "gray"
        elif layers and all(ly[1:3] == (1, 1) for ly in layers[1:]):
            hv = tuple(layers[0][1:3])
            sub = _SAMPLING_NAMES.get(hv, f"{hv[0]}x{hv[1]}")
        else:
            sub = "other"
        return {
            "quality_estimate": quality_from_table(tables[0]) if 0 in tables else None,
            "subsampling": sub,
            "progressive": bool(im.info.get("progressive") or im.info.get("progression")),
        }
