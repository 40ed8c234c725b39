"""LoaderOptions: one validated options object for make_loader, the Bridge provider and the audit."""

import dataclasses

import pytest
import torch
from conftest import SAMPLE_SHARDS

from vlmdata import LoaderOptions, VlmdataError, make_loader
from vlmdata.errors import OptionsError
from vlmdata.loaders.bridge import VlmdataDatasetProvider

SMALL = dict(min_pixels=32 * 32, max_pixels=64 * 64)


def test_defaults_and_frozen():
    o = LoaderOptions()
    assert (o.model, o.seq_length, o.micro_batch_size, o.on_error, o.images) == ("qwen3-vl", 4096, 1, "skip", "decode")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"model": "qwen9"}, "`model` must be one of"),
        ({"micro_batch_size": 0}, "`micro_batch_size` must be an integer >= 1, got 0"),
        ({"seq_length": True}, "`seq_length` must be an integer >= 1"),
        ({"images": "shapes", "image_device": "cuda"}, "`image_device` works with `images`='decode' only"),
        ({"min_pixels": 100, "max_pixels": 10}, "`max_pixels` (10) is below `min_pixels` (100)"),
        ({"rank": 2, "world_size": 2}, "`rank` 2 is outside a world of 2"),
    ],
)
def test_bad_values_name_the_parameter(kw, needle):
    with pytest.raises(OptionsError) as e:
        LoaderOptions(**kw)
    assert needle in str(e.value) and isinstance(e.value, VlmdataError)


def test_replace_refuses_unknown_names_with_a_suggestion():
    with pytest.raises(
        OptionsError, match="unknown loader option 'micro_batch' \\(did you mean 'micro_batch_size'\\?\\)"
    ):
        LoaderOptions().replace(micro_batch=2)
    with pytest.raises(OptionsError):
        make_loader(SAMPLE_SHARDS, micro_batch=2)


def test_options_object_and_keywords_give_the_same_batches():
    opts = LoaderOptions(micro_batch_size=2, seq_length=None, shuffle=False, **SMALL)
    a = next(iter(make_loader(SAMPLE_SHARDS, opts)))
    b = next(iter(make_loader(SAMPLE_SHARDS, micro_batch_size=2, seq_length=None, shuffle=False, **SMALL)))
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert torch.equal(a["visual_inputs"].pixel_values, b["visual_inputs"].pixel_values)
    assert make_loader(SAMPLE_SHARDS, opts).options == opts


def test_bridge_provider_threads_one_options_object():
    p = VlmdataDatasetProvider(
        source=SAMPLE_SHARDS,
        seq_length=2048,
        pack_sequences_in_batch=True,
        seed=5,
        loader_options=LoaderOptions(exact_images=True, shuffle_buffer=8),
    )
    o = p.options()
    assert isinstance(o, LoaderOptions)
    assert (o.seq_length, o.packing, o.seed, o.exact_images, o.shuffle_buffer) == (2048, True, 5, True, 8)
    assert VlmdataDatasetProvider(loader_options={"exact_images": True}).options().exact_images
    with pytest.raises(OptionsError):
        VlmdataDatasetProvider(loader_options={"exact_image": True}).options()
