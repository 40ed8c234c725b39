"""The module path that ``.nv-meta/dataset.yaml`` of every vlmdata dataset names (``__module__:
vlmdata.energon_sample``): kept so that datasets built before and after the layout change load alike.
The class lives in ``vlmdata.interop.energon``."""

# pyright resolves these names through the (unresolvable here) Megatron Bridge import of the try/except there
from vlmdata.interop.energon import ChatMLSample, ChatMLWebdataset  # pyright: ignore[reportAttributeAccessIssue]

__all__ = ["ChatMLSample", "ChatMLWebdataset"]
