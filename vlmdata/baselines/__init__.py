"""Megatron Bridge's own data path, replicated without Bridge: the yardstick that tests compare
vlmdata's batches with and that benchmarks time (``bridge_hf``: qwen2_5_collate_fn with the HF processor)."""
