"""The module path that ``.nv-meta/dataset.yaml`` of every vlmdata dataset names (``__module__:
vlmdata.energon_sample``): kept so that datasets built before and after the layout change load alike.
The class lives in ``vlmdata.interop.energon``."""

from vlmdata.interop.energon import ChatMLSample, ChatMLWebdataset

__all__ = ["ChatMLSample", "ChatMLWebdataset"]
