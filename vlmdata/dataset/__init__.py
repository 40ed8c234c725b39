"""The on-disk format of a vlmdata dataset (no torch): ``schema`` (samples, members, constants),
``tar`` (the one tar writer and reader, offsets index), ``shards`` (planning and writing shards),
``manifest`` (accounting: seen == written + skipped), ``images`` (probe, re-encode, JPEG facts),
``nvmeta`` (the Energon ``.nv-meta`` index every dataset carries; ``nvmeta_loader`` is the file copied
into it), ``validate`` and ``inspect``; ``resolve`` decides once what a path names (``open_dataset``).

Depends on ``storage``, ``qwen`` and ``errors`` only.
"""
