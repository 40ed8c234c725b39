"""Energon ``sample_loader`` for vlmdata shards (copied into ``.nv-meta/`` by ``vlmdata build``).

Standard library only: Energon imports this file from the dataset folder. It maps a raw sample
(``KEY.json`` + ``KEY.0.jpg``, ``KEY.1.png``, ...) to the fields of Megatron Bridge's ChatMLSample:
``conversation`` (JSON text of the messages) and ``imgs`` (the images, in order). No pickle.

Verified with megatron-energon 7.4.1 + megatron-bridge 0.6.2 (docs/bridge-contract.md section 4.3,
tests/bridge/test_bridge_imports.py::test_contract_energon_recipe): ``dataset.yaml`` names these as
``sample_loader: vlmdata_loader.py:sample_loader`` and ``part_filter: vlmdata_loader.py:part_filter``
(paths relative to ``.nv-meta/``). Parts are named after the first dot of the member name (``0.jpg``,
``json``); only parts accepted by ``part_filter`` are read. The dataset class decodes before calling
``sample_loader``: ``raw["json"]`` is already a dict and each image part a float tensor [3, H, W]
(or a PIL image with ``image_decode_spec: pil``). Energon adds ``__key__`` etc. itself.
"""

import json

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tiff")


def _image_part(name):
    idx, _, ext = name.partition(".")
    return idx.isdigit() and ext in IMAGE_EXTS


def part_filter(part):
    return part == "json" or _image_part(part)


def sample_loader(raw):
    meta = raw["json"]
    if isinstance(meta, (bytes, str)):
        meta = json.loads(meta)
    names = sorted((k for k in raw if _image_part(k)), key=lambda k: int(k.partition(".")[0]))
    return {
        "conversation": json.dumps({"conversation": meta["conversation"]}),
        "imgs": [raw[k] for k in names] or None,
    }
