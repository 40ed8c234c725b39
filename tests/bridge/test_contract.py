"""Contract test: vlmdata's batches equal Megatron Bridge's own, run against Bridge's real code.

Runs only under the Bridge venv; elsewhere every test is skipped:

    bash scripts/bridge_env.sh && .bridge-venv/bin/python -m pytest -q tests/bridge

The same samples (sample_shards: single-image JPEGs incl. greyscale, multi-image, the PNG page, plus a
text-only multi-turn conversation) go through

(a) vlmdata (``process_samples`` and the whole ``make_loader`` pipeline, ``resize="bridge"``,
    ``exact_images=True``) and Bridge's ``qwen2_5_collate_fn`` with examples built as Bridge's HF path
    builds them (``{"type": "image", "image": PIL}`` parts), the same real offline processor
    (``vlmdata.qwen.spec.build_qwen_processor``, Qwen3-VL and Qwen2.5-VL), padded to a multiple of 128, to
    ``seq_length`` and packed in the batch: every tensor must be equal, pixel values bit for bit;
(b) Bridge's Energon path (``EnergonMultiModalDataModule`` -> ``megatron.energon.get_train_dataset`` +
    ``QwenVLTaskEncoder``, train *and* val split) on sample_shards and on datasets freshly built by
    ``vlmdata build`` with the default and the ``bridge`` Energon target: each batch equals vlmdata's
    batch for the same sample keys;
(c) ``VlmdataDatasetProvider`` through Bridge's ``get_dataset_provider`` (real ``DatasetBuildContext``),
    Bridge's ``build_pretraining_data_loader`` and the batch readers of ``training/vlm_step.py`` and
    ``models/qwen_vl/qwen3_vl_step.py`` (``.cuda()`` made a no-op: CPU host).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHARDS = os.path.join(REPO, "sample_shards")
MODELS = ("qwen3-vl", "qwen2.5-vl")
SEQ_KEYS = ("input_ids", "labels", "loss_mask", "position_ids", "attention_mask")
PACKED_KEYS = (
    "input_ids",
    "labels",
    "loss_mask",
    "position_ids",
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv_padded",
    "max_seqlen_q",
    "max_seqlen_kv",
)


TEXT_ONLY = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "text", "text": "Hi there, <b>what</b> is 2+2?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "4."}]},
    {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "6, of course."}]},
]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def stub():
    spec = importlib.util.spec_from_file_location("vlmdata_te_stub", os.path.join(HERE, "te_stub.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()  # before anything imports megatron.bridge (vlmdata.loaders.bridge included)
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("megatron.energon").setLevel(logging.ERROR)
    return module


@pytest.fixture(scope="module")
def all_samples(stub):
    from vlmdata.dataset.reader import parse_raw
    from vlmdata.dataset.tar import iter_shard

    out = {}
    for name in sorted(os.listdir(SHARDS)):
        if name.endswith(".tar"):
            for r in iter_shard(os.path.join(SHARDS, name)):
                try:
                    s = parse_raw(r.files, r.key)
                except Exception:  # the sample shards keep two deliberately bad samples out; none here
                    continue
                out[s.key] = s
    return out


@pytest.fixture(scope="module")
def samples(all_samples):
    """single JPEG (RGB and greyscale), multi-image, the PNG page, and a text-only conversation."""
    from PIL import Image

    from vlmdata.dataset.schema import Sample

    def mode(im):
        return Image.open(io.BytesIO(im)).mode

    vals = list(all_samples.values())
    single = [s for s in vals if len(s.images) == 1 and s.images[0][:2] == b"\xff\xd8" and mode(s.images[0]) == "RGB"]
    grey = [s for s in vals if len(s.images) == 1 and s.images[0][:2] == b"\xff\xd8" and mode(s.images[0]) == "L"]
    multi2 = [s for s in vals if len(s.images) == 2]
    multi3 = [s for s in vals if len(s.images) == 3]
    png = [s for s in vals if any(im[:4] == b"\x89PNG" for im in s.images)]
    assert single and grey and multi2 and multi3 and png
    chosen = single[:3] + grey[:1] + multi2[:1] + multi3[:1] + png[:1] + [Sample("textonly", TEXT_ONLY)]
    return chosen


@pytest.fixture(scope="module", params=MODELS)
def model_proc(request, stub):
    from vlmdata.qwen.spec import build_qwen_processor, get_spec

    proc = build_qwen_processor(request.param)
    assert type(proc).__name__ == get_spec(request.param).processor_class
    # the fix for Bridge's loss-mask renders: the tokenizer carries the processor's (Qwen-VL) template
    assert proc.tokenizer.chat_template == proc.chat_template and "<|image_pad|>" in proc.chat_template
    return request.param, proc


# --------------------------------------------------------------------------- helpers


def bridge_examples(samples):
    """vlmdata Samples -> the example dicts Bridge's HF path feeds qwen2_5_collate_fn: each image part
    carries its decoded PIL image inline, in order."""
    from PIL import Image

    out = []
    for s in samples:
        imgs = iter(s.images)
        conv = []
        for turn in s.conversation:
            content = turn["content"]
            if isinstance(content, list):
                content = [
                    {"type": "image", "image": Image.open(io.BytesIO(next(imgs)))}
                    if p.get("type") == "image"
                    else dict(p)
                    for p in content
                ]
            conv.append({"role": turn["role"], "content": content})
        out.append({"conversation": conv})
    return out


def bridge_collate(samples, proc, **kw):
    from megatron.bridge.models.qwen_vl.data.collate_fn import qwen2_5_collate_fn

    return qwen2_5_collate_fn(bridge_examples(samples), proc, **kw)


def vlmdata_collate(samples, model, proc, **kw):
    from vlmdata.loaders.api import process_samples

    return process_samples(samples, model, tokenizer=proc.tokenizer, resize="bridge", exact_images=True, **kw)


def _visual(v):
    return v if not isinstance(v, dict) else SimpleNamespace(**v)


def assert_same_batch(a, b, keys=SEQ_KEYS, where=""):
    """a: vlmdata's batch, b: Bridge's. Every key Bridge produced must be in a and equal (dtype too);
    vlmdata may carry mm_token_type_ids where Bridge drops it (mixed image/text-only batches)."""
    import torch

    extra = set(a) - set(b)
    assert extra <= {"mm_token_type_ids"}, (where, extra)
    missing = {k for k in b if not k.startswith("__")} - set(a)
    assert not missing, (where, missing)
    for k in keys:
        if k not in b:
            continue
        if b[k] is None:
            assert a[k] is None, (where, k)
            continue
        assert a[k].dtype == b[k].dtype, (where, k, a[k].dtype, b[k].dtype)
        assert a[k].shape == b[k].shape, (where, k, a[k].shape, b[k].shape)
        assert torch.equal(a[k], b[k]), (where, k)
    if "mm_token_type_ids" in a and "mm_token_type_ids" in b:
        assert torch.equal(a["mm_token_type_ids"], b["mm_token_type_ids"]), where
    if "total_tokens" in b:
        assert a["total_tokens"] == b["total_tokens"], where
    va, vb = _visual(a["visual_inputs"]), _visual(b["visual_inputs"])
    for f in ("image_grid_thw", "pixel_values"):
        x, y = getattr(va, f, None), getattr(vb, f, None)
        assert (x is None) == (y is None), (where, f)
        if y is not None:
            assert x.dtype == y.dtype and x.shape == y.shape, (where, f, x.shape, y.shape)
            assert torch.equal(x, y), (where, f, float((x.float() - y.float()).abs().max()))
    for f in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
        assert getattr(va, f, None) is None and getattr(vb, f, None) is None, (where, f)


# --------------------------------------------------------------------------- (a) HF collate path


def test_processor_chat_template_on_tokenizer(model_proc):
    """build_qwen_processor: Bridge's conversation-turn loss mask renders with the tokenizer's template;
    with the text-only template it raised jinja2 UndefinedError on image parts."""
    from vlmdata.qwen.spec import load_qwen_tokenizer

    model, proc = model_proc
    conv = [{"role": "user", "content": [{"type": "image", "image": "x"}, {"type": "text", "text": "Hi"}]}]
    assert "<|vision_start|><|image_pad|><|vision_end|>" in proc.tokenizer.apply_chat_template(conv, tokenize=False)
    tok = load_qwen_tokenizer()
    before = tok.chat_template
    from vlmdata.qwen.spec import build_qwen_processor

    p2 = build_qwen_processor(model, tokenizer=tok)
    assert tok.chat_template == before, "a tokenizer passed in must not be modified"
    assert p2.tokenizer.chat_template == p2.chat_template


@pytest.mark.parametrize(
    "group", [(0, 4), (4, 8), (7, 8)], ids=["single-jpeg-rgb-grey", "multi-png-textonly", "textonly"]
)
def test_padded_128_equals_bridge_collate(model_proc, samples, group):
    model, proc = model_proc
    grp = samples[group[0] : group[1]]
    b = bridge_collate(grp, proc, sequence_length=4096, require_assistant_matches=True)
    assert b["input_ids"].shape[1] % 128 == 0
    a = vlmdata_collate(grp, model, proc, seq_length=4096)
    assert_same_batch(a, b, where=f"{model} {[s.key for s in grp]}")
    assert (a["loss_mask"].sum(1) > 0).all()


def test_pad_to_max_length_equals_bridge_collate(model_proc, samples):
    model, proc = model_proc
    for grp in (samples[:3], samples[3:]):
        b = bridge_collate(grp, proc, sequence_length=3072, pad_to_max_length=True)
        a = vlmdata_collate(grp, model, proc, seq_length=3072, pad_to_max_length=True)
        assert a["input_ids"].shape == (len(grp), 3072)
        assert_same_batch(a, b, where=f"{model} pad_to_max_length")


@pytest.mark.parametrize("multiple", [1, 64])
def test_in_batch_packing_equals_bridge_collate(model_proc, samples, multiple):
    model, proc = model_proc
    for grp in (samples[:4], samples[4:]):
        b = bridge_collate(
            grp, proc, sequence_length=8192, enable_in_batch_packing=True, in_batch_packing_pad_to_multiple_of=multiple
        )
        a = vlmdata_collate(grp, model, proc, seq_length=8192, packing=True, packing_pad_to_multiple_of=multiple)
        assert a["input_ids"].shape[0] == 1 and len(a["cu_seqlens_q"]) == len(grp) + 1
        assert_same_batch(a, b, keys=PACKED_KEYS, where=f"{model} packed x{multiple}")


def test_make_loader_batches_equal_bridge_collate(model_proc, all_samples):
    """The whole loader (tar index + read, decode, tokens, collate), batch by batch."""
    from vlmdata.loaders import make_loader

    model, proc = model_proc
    loader = make_loader(
        SHARDS,
        model=model,
        tokenizer=proc.tokenizer,
        seq_length=4096,
        micro_batch_size=4,
        seed=7,
        resize="bridge",
        exact_images=True,
        num_epochs=1,
        bridge_visual_inputs=True,
    )
    from megatron.bridge.training.utils.visual_inputs import GenericVisualInputs

    n = 0
    for batch in loader:
        assert isinstance(batch["visual_inputs"], GenericVisualInputs)
        grp = [all_samples[k] for k in loader.last_keys]
        assert_same_batch(batch, bridge_collate(grp, proc, sequence_length=4096), where=f"{model} {loader.last_keys}")
        n += 1
        if n == 4:
            break
    assert n == 4


# --------------------------------------------------------------------------- (b) Energon path


def _write_source(root):
    """A small messages-JSONL source: RGB JPEG, greyscale JPEG, RGB PNG, two images, text-only."""
    import numpy as np
    from PIL import Image

    os.makedirs(os.path.join(root, "img"), exist_ok=True)

    def picture(h, w, seed, mode="RGB", fmt="JPEG", name=None):
        y, x = np.mgrid[0:h, 0:w]
        a = np.stack([(x * seed) % 256, (y * 3) % 256, (x + y) % 256], -1).astype(np.uint8)
        img = Image.fromarray(a).convert(mode)
        path = os.path.join("img", name)
        img.save(os.path.join(root, path), fmt)
        return path

    def rec(images, q, a):
        content = [{"type": "image", "image": p} for p in images] + [{"type": "text", "text": q}]
        return {
            "messages": [
                {"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": a}]},
            ]
        }

    recs = [
        rec([picture(480, 640, 1, name="a.jpg")], "Describe this image.", "Stripes and ramps."),
        rec([picture(300, 451, 2, "L", name="b.jpg")], "What is this?", "A grey gradient."),
        rec([picture(333, 250, 3, fmt="PNG", name="c.png")], "Read the page.", "Nothing to read."),
        rec([picture(375, 500, 4, name="d.jpg"), picture(200, 300, 5, name="e.jpg")], "Compare them.", "Two patterns."),
        {"messages": TEXT_ONLY},
        rec([picture(640, 427, 6, name="f.jpg")], "Caption it.", "A diagonal pattern."),
    ]
    with open(os.path.join(root, "data.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return os.path.join(root, "data.jsonl")


@pytest.fixture(scope="module")
def built(stub, tmp_path_factory):
    """Datasets freshly built by the ``vlmdata build`` CLI: default target and ``--energon-target bridge``."""
    root = str(tmp_path_factory.mktemp("built"))
    src = _write_source(os.path.join(root, "src"))
    out = {}
    for target in ("vlmdata", "bridge"):
        dst = os.path.join(root, target)
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "vlmdata",
                "build",
                src,
                "-o",
                dst,
                "--max-count",
                "4",
                "--workers",
                "1",
                "--energon-target",
                target,
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        with open(os.path.join(dst, ".nv-meta", "split.yaml")) as f:
            split = f.read()
        assert "val:" in split and "train:" in split, split
        out[target] = dst
    return out


def _encoder(model, proc):
    from megatron.bridge.models.qwen_vl.data.energon import QwenVLTaskEncoder

    from vlmdata.qwen.spec import get_spec

    return QwenVLTaskEncoder(
        tokenizer=proc.tokenizer, image_processor=proc, patch_size=get_spec(model).patch_size, max_padding_length=4096
    )


def _datamodule_batches(path, model, proc, split, n, mbs=3):
    """``n`` batches of Bridge's own Energon data module (as EnergonDatasetConfig builds it; shuffled,
    endless) for ``split`` ("train" or "val")."""
    from megatron.bridge.data.energon.base_energon_datamodule import EnergonMultiModalDataModule

    dm = EnergonMultiModalDataModule(
        path,
        tokenizer=proc.tokenizer,
        seq_length=4096,
        micro_batch_size=mbs,
        num_workers=0,
        task_encoder=_encoder(model, proc),
        shuffle_buffer_size=100,
        pin_memory=False,
    )
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    return [next(loader) for _ in range(n)]


def _epoch_batches(path, model, proc, split, mbs=3):
    """One unshuffled epoch of ``split`` through energon.get_train_dataset + Bridge's task encoder."""
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset

    ds = get_train_dataset(
        path,
        batch_size=mbs,
        task_encoder=_encoder(model, proc),
        split_part=split,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    return list(get_loader(ds))


def _check_energon(batches, model, proc, samples_by_key, where):
    seen = set()
    for batch in batches:
        keys = [k.rsplit("/", 1)[-1] for k in batch["__keys__"]]
        seen.update(keys)
        grp = [samples_by_key[k] for k in keys]
        a = vlmdata_collate(grp, model, proc, seq_length=4096)
        assert "mm_token_type_ids" not in batch  # Energon's batch type has no such field
        a.pop("mm_token_type_ids")
        assert all(batch[k] is None for k in PACKED_KEYS if k.startswith(("cu_", "max_")))  # unpacked
        b = {k: v for k, v in batch.items() if not k.startswith(("__", "cu_", "max_"))}
        assert_same_batch(a, b, where=f"{where} {keys}")
    return seen


def test_energon_sample_shards_equal_vlmdata(model_proc, all_samples):
    """sample_shards (built by scripts/make_sample_data.py with the default Energon target) through
    Bridge's EnergonMultiModalDataModule + QwenVLTaskEncoder, train and val splits."""
    model, proc = model_proc
    for split in ("train", "val"):
        seen = _check_energon(_datamodule_batches(SHARDS, model, proc, split, 2), model, proc, all_samples, split)
        assert len(seen) >= 2


@pytest.mark.parametrize("target", ["vlmdata", "bridge"])
def test_energon_fresh_build_equals_vlmdata(stub, built, target):
    """A dataset freshly written by `vlmdata build` (both Energon targets): every sample of an epoch,
    including the text-only one, the greyscale JPEG and the PNG, through Bridge's Energon path."""
    from vlmdata.dataset.reader import parse_raw
    from vlmdata.dataset.tar import iter_shard
    from vlmdata.loaders.api import resolve_shards
    from vlmdata.qwen.spec import build_qwen_processor

    path = built[target]
    with open(os.path.join(path, ".nv-meta", "dataset.yaml")) as f:
        yaml_text = f.read()
    assert (
        "megatron.bridge.data.energon.task_encoder_utils" if target == "bridge" else "vlmdata.energon_sample"
    ) in yaml_text
    by_key = {r.key: parse_raw(r.files, r.key) for p in resolve_shards(path) for r in iter_shard(p)}
    assert len(by_key) == 6
    model = "qwen3-vl"
    proc = build_qwen_processor(model)
    for split in ("train", "val"):
        seen = _check_energon(_epoch_batches(path, model, proc, split), model, proc, by_key, f"epoch {split}")
        assert seen == set(by_key), (split, seen)
    _check_energon(_datamodule_batches(path, model, proc, "val", 2), model, proc, by_key, "datamodule val")


# --------------------------------------------------------------------------- (c) DatasetProvider


@pytest.fixture
def on_cpu(monkeypatch):
    """Bridge's batch readers call ``.cuda(non_blocking=True)``; on this CPU host make it the identity."""
    import torch

    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)


def _provider(model, dataloader_type, **kw):
    from vlmdata.loaders.bridge import HAVE_BRIDGE, VlmdataDatasetProvider

    assert HAVE_BRIDGE, "vlmdata.loaders.bridge did not find Bridge's DatasetProvider"
    return VlmdataDatasetProvider(
        source=SHARDS,
        valid_source=SHARDS,
        model=model,
        seq_length=4096,
        dataloader_type=dataloader_type,
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        loader_options={"exact_images": True},
        **kw,
    )


def _build(provider, counts=(40, 8, 0)):
    from megatron.bridge.data.base import DatasetProvider
    from megatron.bridge.data.utils import get_dataset_provider

    assert isinstance(provider, DatasetProvider)
    provider.finalize()
    build = get_dataset_provider(provider)  # Bridge's protocol_adapter: a real DatasetBuildContext
    return build(list(counts), provider, tokenizer=None, pg_collection=None)


def _step_readers(batch, provider):
    """Feed one batch to the batch readers of vlm_step (generic) and qwen3_vl_step."""
    import torch
    from megatron.bridge.models.qwen_vl import qwen3_vl_step
    from megatron.bridge.training import vlm_step
    from megatron.bridge.training.utils.visual_inputs import GenericVisualInputs

    got = vlm_step.get_batch_from_iterator(
        iter([batch]),
        False,
        provider.skip_getting_attention_mask_from_dataset,
        is_first_pp_stage=True,
        is_last_pp_stage=True,
    )
    for k in ("input_ids", "position_ids", "labels", "loss_mask"):
        assert isinstance(got[k], torch.Tensor) and got[k].shape == batch[k].shape, k
    assert got["attention_mask"] is None  # skip_getting_attention_mask_from_dataset=True
    vi = got["visual_inputs"]
    assert isinstance(vi, GenericVisualInputs)
    assert all(v is None or isinstance(v, torch.Tensor) for v in vi.__dict__.values())
    assert vi.image_grid_thw.dtype == torch.int64 and vi.pixel_values.dtype == torch.float32
    if "cu_seqlens_q" not in batch:
        cfg = SimpleNamespace(dataset=provider)
        tokens, labels, loss_mask, attn, pos, mm = qwen3_vl_step.get_batch(
            iter([batch]), cfg, is_first_pp_stage=True, is_last_pp_stage=True
        )
        assert torch.equal(tokens, batch["input_ids"]) and torch.equal(labels, batch["labels"])
        assert set(mm) == {"pixel_values", "image_grid_thw"}
    return got


@pytest.mark.parametrize("model", MODELS)
def test_provider_single_batches_equal_bridge_collate(stub, on_cpu, model, all_samples):
    import torch
    from megatron.bridge.data.samplers import build_pretraining_data_loader
    from megatron.bridge.training.utils.visual_inputs import GenericVisualInputs

    from vlmdata.qwen.spec import build_qwen_processor

    provider = _provider(model, "single")
    train, valid, test = _build(provider)
    assert test is None and len(train) >= 89 and len(valid) >= 8 and hasattr(train, "collate_fn")
    mbs = 4
    dl = build_pretraining_data_loader(
        train,
        0,
        provider.dataloader_type,
        mbs,
        provider.num_workers,
        provider.data_sharding,
        collate_fn=train.collate_fn,
        pin_memory=False,
        persistent_workers=False,
        drop_last=provider.drop_last,
    )
    proc = build_qwen_processor(model)
    it = iter(dl)
    for step in range(2):
        batch = next(it)
        assert isinstance(batch["visual_inputs"], GenericVisualInputs)
        # MegatronPretrainingSampler: sequential indices from consumed_samples (0), mbs per step, DP size 1
        keys = [train[i].key for i in range(step * mbs, (step + 1) * mbs)]
        ref = bridge_collate([all_samples[k] for k in keys], proc, sequence_length=4096)
        assert_same_batch(batch, ref, where=f"provider {model} {keys}")
        _step_readers(batch, provider)
    vb = next(
        iter(
            build_pretraining_data_loader(valid, 0, "single", 2, 0, True, collate_fn=valid.collate_fn, pin_memory=False)
        )
    )
    assert vb["input_ids"].shape[0] == 2 and isinstance(vb["visual_inputs"], GenericVisualInputs)
    assert vb["loss_mask"].dtype == torch.float32


@pytest.mark.parametrize("dataloader_type", ["cyclic", "batch"])
def test_provider_sampled_types(stub, on_cpu, dataloader_type):
    from megatron.bridge.data.samplers import build_pretraining_data_loader

    provider = _provider("qwen3-vl", dataloader_type)
    train, _, _ = _build(provider, (200, 0, 0))
    assert len(train) == 200  # repeats past the 89 samples up to the requested count
    dl = build_pretraining_data_loader(
        train,
        0,
        dataloader_type,
        2,
        0,
        True,
        collate_fn=train.collate_fn,
        pin_memory=False,
        global_batch_size=2,
        seed=1,
    )
    batch = next(iter(dl))
    assert batch["input_ids"].shape[0] == 2
    _step_readers(batch, provider)


def test_provider_packed_batch_through_vlm_step(stub, on_cpu):
    from megatron.bridge.data.samplers import build_pretraining_data_loader

    provider = _provider("qwen3-vl", "single", pack_sequences_in_batch=True)
    train, _, _ = _build(provider)
    batch = next(
        iter(
            build_pretraining_data_loader(train, 0, "single", 3, 0, True, collate_fn=train.collate_fn, pin_memory=False)
        )
    )
    got = _step_readers(batch, provider)
    assert got["cu_seqlens_q"] is not None and got["max_seqlen_q"] is not None


def test_provider_external_iterator(stub, on_cpu):
    from megatron.bridge.data.samplers import build_pretraining_data_loader
    from megatron.bridge.training.utils.visual_inputs import GenericVisualInputs

    provider = _provider("qwen3-vl", "external", micro_batch_size=2)
    train, valid, _ = _build(provider)
    it = build_pretraining_data_loader(train, 0, "external", 2, 0, True)  # "external": used as is
    assert it is train
    for _ in range(2):
        batch = next(it)
        assert batch["input_ids"].shape[0] == 2 and isinstance(batch["visual_inputs"], GenericVisualInputs)
        _step_readers(batch, provider)
    assert next(valid)["input_ids"].shape[0] == 2
