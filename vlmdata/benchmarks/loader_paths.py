"""The other data paths ``vlmdata bench loader`` runs beside vlmdata's loader: Megatron Bridge's own collate and
Energon task encoder (``import_bridge``, ``energon_iter``, where Bridge imports) and the fastest HF path a user would
write (``wds_examples``: webdataset reading the shards; ``ExamplesReference``: the Bridge-style collate on its
examples). ``vlmdata.benchmarks.loader`` says what each contender measures."""

from __future__ import annotations

import importlib.util
import io
import json
import os

from PIL import Image

from vlmdata.qwen.spec import get_spec


def import_bridge() -> tuple[dict | None, str]:
    """({"collate", "encoder", "energon"}, note) with Megatron Bridge's Qwen-VL collate and Energon task
    encoder, or (None, why). On a CPU host without transformer-engine, Bridge cannot be imported; if this is
    a source checkout, tests/bridge/te_stub.py (the contract test's import-time stub) is installed first."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.bridge") is None:
        return None, "Megatron Bridge is not installed (scripts/bridge_env.sh builds a venv with it)"
    note = ""
    if importlib.util.find_spec("transformer_engine") is None:
        stub = os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            "tests",
            "bridge",
            "te_stub.py",
        )
        if not os.path.isfile(stub):
            return None, "Megatron Bridge needs transformer_engine, which is not installed"
        spec = importlib.util.spec_from_file_location("vlmdata_te_stub", stub)
        if spec is None or spec.loader is None:
            return None, f"cannot load {stub}"
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.install()
        note = "transformer_engine stubbed at import (tests/bridge/te_stub.py): CPU host, data path only"
    try:
        import logging
        import warnings

        warnings.filterwarnings("ignore", category=FutureWarning)
        logging.getLogger("megatron.energon").setLevel(logging.ERROR)
        # heavy and optional: only when Bridge is installed
        from megatron import energon
        from megatron.bridge.models.qwen_vl.data.collate_fn import qwen2_5_collate_fn  # pyright: ignore[reportMissingImports]  (optional: Megatron Bridge)
        from megatron.bridge.models.qwen_vl.data.energon import QwenVLTaskEncoder  # pyright: ignore[reportMissingImports]
    except (ImportError, RuntimeError, AttributeError, OSError) as e:
        return None, f"Megatron Bridge is not importable here ({type(e).__name__}: {e})"
    return {"collate": qwen2_5_collate_fn, "encoder": QwenVLTaskEncoder, "energon": energon}, note


def wds_examples(shards: list[str]):
    """Endless Bridge HF examples from the shards with webdataset: {"conversation"} with PIL images inline."""
    import webdataset as wds  # optional: the HF path's reader

    ds = wds.WebDataset(shards, shardshuffle=False, empty_check=False).repeat()  # pyright: ignore[reportAttributeAccessIssue]
    for s in ds:
        if "json" not in s:
            continue
        meta = json.loads(s["json"])
        conv = meta.get("conversation")
        if not conv:
            continue
        imgs = iter(Image.open(io.BytesIO(s[im["file"]])) for im in meta.get("images") or [])
        yield {
            "conversation": [
                {
                    "role": t["role"],
                    "content": [
                        {"type": "image", "image": next(imgs)} if p.get("type") == "image" else dict(p)
                        for p in t["content"]
                    ],
                }
                for t in conv
            ]
        }


class ExamplesReference:
    """``BridgeReference`` fed Bridge HF examples (already holding PIL images) instead of vlmdata Samples."""

    def __init__(self, ref):
        self.ref = ref
        ref._examples = lambda examples: examples  # the examples are already Bridge's shape

    def collate(self, examples, sequence_length):
        return self.ref.collate(examples, sequence_length=sequence_length)


def energon_iter(bridge: dict, dataset: str, proc, model: str, mbs: int, seq_length: int):
    """Bridge's Energon path: energon.get_train_dataset (no shuffle) + QwenVLTaskEncoder (its defaults:
    max_visual_tokens=16384, so every image is also run through the processor once to count tokens, then
    qwen2_5_collate_fn), one process, reading the dataset's own .nv-meta."""

    e = bridge["energon"]
    enc = bridge["encoder"](
        tokenizer=proc.tokenizer,
        image_processor=proc,
        patch_size=get_spec(model).patch_size,
        max_padding_length=seq_length,
    )
    ds = e.get_train_dataset(
        dataset,
        batch_size=mbs,
        task_encoder=enc,
        split_part="train",
        worker_config=e.WorkerConfig(rank=0, world_size=1, num_workers=0),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=True,
    )
    return iter(e.get_loader(ds))
