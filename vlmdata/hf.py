"""Kept for code written before the layout change (``from vlmdata.hf import load_hf``); the module is
``vlmdata.interop.hf`` and ``load_hf`` is also ``vlmdata.load_hf``."""

from vlmdata.interop.hf import hf_features, image_columns, load_hf

__all__ = ["hf_features", "image_columns", "load_hf"]
