"""Loaders: turn stored samples into model-ready tensors (Qwen-VL image path in ``image``).

``make_loader`` (api) yields the batches Megatron Bridge's Qwen-VL steps consume; ``ChatTokenizer``
(tokenize) renders, tokenizes and masks conversations; ``Collator`` / ``VisualInputs`` (collate) pad or
pack; ``VlmdataDatasetProvider`` (bridge, imports Bridge lazily) plugs into ``ConfigContainer.dataset``.
The modules behind ``make_loader``: options (``LoaderOptions``), inputs (what a source names), pipeline (the
plan: split, shuffle, resume), process (one sample), stream (a rank's epochs per worker), loader
(``VlmLoader``: iteration, exact state).
"""

from vlmdata.registry import lazy_exports

# lazy: importing vlmdata.loaders stays cheap (no torch/transformers)
__getattr__ = lazy_exports(
    __name__,
    {
        "make_loader": "vlmdata.loaders.api",
        "VlmLoader": "vlmdata.loaders.api",
        "process_samples": "vlmdata.loaders.api",
        "ChatTokenizer": "vlmdata.qwen.tokenize",
        "VisualInputs": "vlmdata.loaders.collate",
        "Collator": "vlmdata.loaders.collate",
        "BadSampleError": "vlmdata.dataset.reader",
    },
)
