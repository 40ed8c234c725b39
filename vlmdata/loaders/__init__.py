"""Loaders: turn stored samples into model-ready tensors (Qwen-VL image path in ``image``)."""
