"""Synthetic image payloads that cost what real photographs cost.

Uniform-noise mock images are several times larger and slower to decode than photographs of the
same size, and flat images are the opposite; neither exercises a data pipeline like real data.
This package makes procedural, photo-like pixels (``pixels``: ``1/f`` spectrum, occluding shapes,
a ``detail`` knob), encodes them to a target byte size with the requested chroma subsampling and
progressive mode (``jpeg``), and serves them through a reusable pool (``images``).
"""

from typing import TYPE_CHECKING

from vlmdata.registry import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names resolve lazily below
    from vlmdata.dataset.images import jpeg_info, quality_from_table
    from vlmdata.synthetic.images import ImagePool, SyntheticImage, detail_for, make_image
    from vlmdata.synthetic.jpeg import Encoded, encode, encode_to_target, search_to_target
    from vlmdata.synthetic.pixels import FieldBank, render, render_rgb, snap_detail

# public name -> defining module; resolved on first use (PEP 562) so that the light ``synthetic.mocks``
# does not pull numpy and Pillow into the CLI's start-up
_EXPORTS = {
    "Encoded": "vlmdata.synthetic.jpeg",
    "encode": "vlmdata.synthetic.jpeg",
    "encode_to_target": "vlmdata.synthetic.jpeg",
    "search_to_target": "vlmdata.synthetic.jpeg",
    "jpeg_info": "vlmdata.dataset.images",
    "quality_from_table": "vlmdata.dataset.images",
    "FieldBank": "vlmdata.synthetic.pixels",
    "render": "vlmdata.synthetic.pixels",
    "render_rgb": "vlmdata.synthetic.pixels",
    "snap_detail": "vlmdata.synthetic.pixels",
    "ImagePool": "vlmdata.synthetic.images",
    "SyntheticImage": "vlmdata.synthetic.images",
    "detail_for": "vlmdata.synthetic.images",
    "make_image": "vlmdata.synthetic.images",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)

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
