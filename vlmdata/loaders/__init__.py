"""Loaders: turn stored samples into model-ready tensors (Qwen-VL image path in ``image``).

``make_loader`` (api) yields the batches Megatron Bridge's Qwen-VL steps consume; ``ChatTokenizer``
(tokenize) renders, tokenizes and masks conversations; ``Collator`` / ``VisualInputs`` (collate) pad or
pack; ``VlmdataDatasetProvider`` (bridge, imports Bridge lazily) plugs into ``ConfigContainer.dataset``.
"""


def __getattr__(name):  # lazy: importing vlmdata.loaders stays cheap (no torch/transformers)
    if name in ("make_loader", "VlmLoader", "process_samples"):
        from vlmdata.loaders import api

        return getattr(api, name)
    if name in ("ChatTokenizer",):
        from vlmdata.qwen.tokenize import ChatTokenizer

        return ChatTokenizer
    if name in ("VisualInputs", "Collator"):
        from vlmdata.loaders import collate

        return getattr(collate, name)
    if name in ("BadSampleError",):
        from vlmdata.dataset.reader import BadSampleError

        return BadSampleError
    raise AttributeError(name)
