"""Loaders: turn stored samples into model-ready tensors (Qwen-VL image path in ``image``).

``make_loader`` (api) yields the batches Megatron Bridge's Qwen-VL steps consume; ``ChatTokenizer``
(tokenize) renders, tokenizes and masks conversations; ``Collator`` / ``VisualInputs`` (collate) pad or
pack; ``VlmdataDatasetProvider`` (bridge, imports Bridge lazily) plugs into ``ConfigContainer.dataset``.
"""


def __getattr__(name):  # lazy: importing vlmdata.loaders stays cheap (no torch/transformers)
    if name in ("make_loader", "VlmLoader", "process_samples"):
        # lazy re-export: importing vlmdata.loaders stays cheap (no torch/transformers)
        from vlmdata.loaders import api

        return getattr(api, name)
    if name in ("ChatTokenizer",):
        # lazy re-export: importing vlmdata.loaders stays cheap (no torch/transformers)
        from vlmdata.qwen.tokenize import ChatTokenizer

        return ChatTokenizer
    if name in ("VisualInputs", "Collator"):
        # lazy re-export: importing vlmdata.loaders stays cheap (no torch/transformers)
        from vlmdata.loaders import collate

        return getattr(collate, name)
    if name in ("BadSampleError",):
        # lazy re-export: importing vlmdata.loaders stays cheap (no torch/transformers)
        from vlmdata.dataset.reader import BadSampleError

        return BadSampleError
    raise AttributeError(name)
