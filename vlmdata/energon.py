"""Energon metadata for a vlmdata dataset: ``.nv-meta/`` through megatron-energon's own API."""

from __future__ import annotations

import contextlib
import io
import os
import shutil

DATASET_YAML = """\
# Written by vlmdata. Samples are Megatron Bridge ChatML samples (conversation + imgs), no pickle.
__module__: {module}
__class__: ChatMLWebdataset
sample_loader: vlmdata_loader.py:sample_loader
part_filter: vlmdata_loader.py:part_filter
"""
TARGETS = {"vlmdata": "vlmdata.energon_sample", "bridge": "megatron.bridge.data.energon.task_encoder_utils"}


# split.yaml parts, as Energon regex patterns over the shard names. Every shard is in ``train`` *and* in
# ``val``: a built dataset is one training set, and holding shards out of it behind the user's back would
# silently drop data (and is impossible for a one-shard dataset); but Megatron Bridge's Energon data
# module asks for ``split_part="val"`` whenever validation runs (``do_validation=True`` and
# ``eval_iters > 0``, its defaults) and Energon fails with "Invalid split part: 'val'" if the part is
# missing. So validation works out of the box and measures loss on (a sample of) the training data.
# For a held-out validation set build a second dataset and point Bridge at an Energon metadataset, or
# edit split.yaml (docs/FORMAT.md, docs/bridge-contract.md section 4).
SPLIT_PARTS_PATTERNS = [("train", ".*"), ("val", ".*")]


def prepare_energon(root: str, shard_names: list[str], workers: int = 1, target: str = "vlmdata") -> None:
    """Index the shards with Energon, write split.yaml (every shard in ``train`` and in ``val``, see
    ``SPLIT_PARTS_PATTERNS``) and dataset.yaml."""
    from megatron.energon.flavors import BaseWebdatasetFactory

    meta = os.path.join(root, ".nv-meta")
    if os.path.isdir(meta):
        shutil.rmtree(meta)
    with contextlib.redirect_stdout(io.StringIO()):  # energon prints its progress
        BaseWebdatasetFactory.prepare_dataset(root, list(shard_names), split_parts_patterns=SPLIT_PARTS_PATTERNS,
                                              workers=max(1, workers), shuffle_seed=None)
    shutil.copyfile(os.path.join(os.path.dirname(__file__), "energon_loader.py"), os.path.join(meta, "vlmdata_loader.py"))
    with open(os.path.join(meta, "dataset.yaml"), "w") as f:
        f.write(DATASET_YAML.format(module=TARGETS[target]))
