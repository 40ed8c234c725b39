"""The Energon dataset class that ``dataset.yaml`` of a vlmdata dataset names (through ``vlmdata.energon_sample``).

Where Megatron Bridge is installed this *is* Bridge's ``ChatMLWebdataset`` (so its Qwen-VL task
encoder gets its own ``ChatMLSample``); elsewhere an equivalent with the same sample fields, so
``megatron.energon.get_train_dataset`` works without Bridge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

try:  # pragma: no cover - exercised only where Megatron Bridge is installed
    from megatron.bridge.data.energon.task_encoder_utils import ChatMLSample, ChatMLWebdataset  # noqa: F401  # pyright: ignore[reportMissingImports]
except Exception:  # Bridge absent (or not importable on this machine)
    import torch
    from megatron.energon import DefaultDecoderWebdatasetFactory, Sample

    @dataclass
    class ChatMLSample(Sample):
        """Same fields as Megatron Bridge's ChatMLSample."""

        conversation: str  # JSON string of the conversation (role/content messages)
        imgs: Optional[List[torch.Tensor]] = None
        videos: Optional[List[List[torch.Tensor]]] = None
        audio: Optional[torch.Tensor] = None
        tools: Optional[List[Dict[str, Any]]] = None

    class ChatMLWebdataset(DefaultDecoderWebdatasetFactory[ChatMLSample]):
        __sample_type__ = ChatMLSample
