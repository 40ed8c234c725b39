"""Other readers of the format: ``energon`` (the Energon dataset class that ``.nv-meta/dataset.yaml``
names, Megatron Bridge's ChatML sample), ``hf`` (Hugging Face ``datasets`` features and ``load_hf``)."""
