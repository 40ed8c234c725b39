"""Synthetic image payloads that cost what real photographs cost.

Uniform-noise mock images are several times larger and slower to decode than photographs of the
same size, and flat images are the opposite; neither exercises a data pipeline like real data.
This package makes procedural, photo-like pixels (``pixels``: ``1/f`` spectrum, occluding shapes,
a ``detail`` knob), encodes them to a target byte size with the requested chroma subsampling and
progressive mode (``jpeg``), and serves them through a reusable pool (``images``).
"""

from vlmdata.dataset.images import jpeg_info, quality_from_table
from vlmdata.synthetic.images import ImagePool, SyntheticImage, detail_for, make_image
from vlmdata.synthetic.jpeg import Encoded, encode, encode_to_target, search_to_target
from vlmdata.synthetic.pixels import FieldBank, render, render_rgb, snap_detail

__all__ = [
    "Encoded",
    "FieldBank",
    "ImagePool",
    "SyntheticImage",
    "detail_for",
    "encode",
    "encode_to_target",
    "jpeg_info",
    "make_image",
    "quality_from_table",
    "render",
    "render_rgb",
    "search_to_target",
    "snap_detail",
]
