"""The Qwen-VL data contract, pure (no dataset I/O): sizes, ``smart_resize``, grids, visual-token counts,
special token ids, processor/tokenizer loading (``spec``); the fast and the bit-exact image paths
(``image``, ``vision``, including Bridge's qwen-vl-utils pre-resize); chat rendering, tokenization and
the loss mask (``tokenize``).

Depends on nothing else in vlmdata but ``errors``; everything that reads or writes data sits above it.
"""
