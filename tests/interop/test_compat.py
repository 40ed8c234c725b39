"""The shards read back with plain webdataset, Megatron-Energon and Hugging Face datasets."""

import glob
import json
import os

import torch
from conftest import SAMPLE_SHARDS

from vlmdata.dataset.manifest import load_manifest
from vlmdata.dataset.tar import iter_shard


def expected():
    m = load_manifest(SAMPLE_SHARDS)
    out = {}
    for e in m["shards"]:
        for s in iter_shard(os.path.join(SAMPLE_SHARDS, e["name"])):
            meta = json.loads(s.files["json"])
            out[s.key] = (meta, [s.files[i["file"]] for i in meta["images"]])
    assert len(out) == m["totals"]["samples"]
    return out


def test_webdataset_reads_all_samples():
    import webdataset as wds

    exp = expected()
    urls = sorted(glob.glob(os.path.join(SAMPLE_SHARDS, "*.tar")))
    seen = {}
    for s in wds.WebDataset(urls, shardshuffle=False):
        meta = json.loads(s["json"])
        imgs = [s[i["file"]] for i in meta["images"]]
        seen[s["__key__"]] = (meta, imgs)
    assert seen == exp
    # and webdataset's own decoder turns them into PIL images of the recorded size
    s = next(iter(wds.WebDataset(urls, shardshuffle=False).decode("pil")))
    info = s["json"]["images"][0]
    assert s[info["file"]].size == (info["width"], info["height"])


def test_energon_get_train_dataset_yields_chatml_samples():
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset

    exp = expected()
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_train_dataset(
        SAMPLE_SHARDS,
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        worker_config=wc,
        repeat=False,
    )
    got = {}
    for sample in get_loader(ds):
        key = sample.__key__.rsplit("/", 1)[-1]
        conv = json.loads(sample.conversation)
        got[key] = (conv, sample.imgs)
    assert set(got) == set(exp)
    for key, (conv, imgs) in got.items():
        meta, raw = exp[key]
        assert conv["conversation"] == meta["conversation"]
        assert len(imgs) == len(raw)
        for t, data, info in zip(imgs, raw, meta["images"]):
            assert isinstance(t, torch.Tensor) and tuple(t.shape) == (3, info["height"], info["width"])


def test_huggingface_datasets_webdataset_loader():
    import datasets

    exp = expected()
    urls = sorted(glob.glob(os.path.join(SAMPLE_SHARDS, "*.tar")))
    from vlmdata.interop.hf import hf_features

    ds = datasets.load_dataset(
        "webdataset", data_files={"train": urls}, split="train", features=hf_features(SAMPLE_SHARDS)
    )
    assert len(ds) == len(exp)
    for row in ds:
        meta, raw = exp[row["__key__"]]
        # arrow gives every content part the union of fields (image parts get text=None)
        conv = [
            {"role": t["role"], "content": [{k: v for k, v in p.items() if v is not None} for p in t["content"]]}
            for t in row["json"]["conversation"]
        ]
        assert conv == meta["conversation"]
        imgs = [row[i["file"]] for i in meta["images"]]
        assert [im.size for im in imgs] == [(i["width"], i["height"]) for i in meta["images"]]
        assert sum(v is not None for k, v in row.items() if k[0].isdigit()) == len(raw)
