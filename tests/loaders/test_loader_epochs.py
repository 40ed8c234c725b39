"""Loader behaviour the audit relies on: workers alive across epochs, inline = worker order, shapes and
image-free views, resume across an epoch boundary, and no endless spin on an epoch that yields nothing."""

import itertools
import json
import os
from collections import Counter

import pytest
import torch

from vlmdata.dataset.tar import TarWriter, iter_shard
from vlmdata.loaders import api
from vlmdata.loaders.api import make_loader
from vlmdata.loaders.pipeline import EmptyEpochError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDS = os.path.join(REPO, "sample_shards")
ALL_KEYS = [r.key for i in range(6) for r in iter_shard(os.path.join(SHARDS, f"shard-{i:06d}.tar"))]
IMAGE_PAD = 151655


@pytest.fixture(scope="module")
def tok():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    return load_qwen_tokenizer()


def loader(tok, **kw):
    kw.setdefault("seq_length", 4096)
    kw.setdefault("micro_batch_size", 2)
    return make_loader(SHARDS, tokenizer=tok, **kw)


def signature(batch):
    grid = batch["visual_inputs"].image_grid_thw
    return (
        tuple(batch["input_ids"].shape),
        None if grid is None else grid.tolist(),
        batch["input_ids"].tolist(),
        batch["loss_mask"].tolist(),
    )


def test_workers_are_started_once_for_many_epochs(tok, monkeypatch):
    made = []
    real = torch.utils.data.DataLoader

    def counting(*a, **k):
        made.append(k.get("num_workers"))
        return real(*a, **k)

    monkeypatch.setattr(api.torch.utils.data, "DataLoader", counting)
    ld = loader(tok, num_workers=2, num_epochs=3, seed=2, images="shapes")
    keys, epochs = [], []
    for _ in ld:
        keys += ld.last_keys
        epochs.append(ld.last_epoch)
    assert made == [2]  # one DataLoader (one set of worker processes) for all three epochs
    assert Counter(keys) == Counter(ALL_KEYS * 3) and ld.epoch == 3
    assert sorted(set(epochs)) == [0, 1, 2]
    assert all(b >= a - 1 for a, b in zip(epochs, epochs[1:]))  # workers stay within one epoch


@pytest.mark.parametrize("workers", [2, 3])
def test_inline_yields_the_worker_batches_in_order(tok, workers):
    a = loader(tok, num_workers=workers, num_epochs=None, seed=4, images="shapes")
    b = loader(tok, num_workers=workers, num_epochs=None, seed=4, images="shapes")
    got_a = [(signature(x), a.last_keys, a.last_epoch) for x in itertools.islice(iter(a), 100)]
    got_b = [(signature(x), b.last_keys, b.last_epoch) for x in itertools.islice(b.iter_inline(), 100)]
    assert got_a == got_b
    assert {e for _, _, e in got_a} == {0, 1, 2}  # crosses two epoch boundaries


def test_shapes_mode_equals_decoded_batches_without_pixels(tok):
    dec = loader(tok, seed=1, num_epochs=1)
    sha = loader(tok, seed=1, num_epochs=1, images="shapes")
    for x, y in zip(dec, sha):
        assert signature(x) == signature(y)
        pv = y["visual_inputs"].pixel_values
        assert pv.shape == x["visual_inputs"].pixel_values.shape and pv.stride() == (0, 0) and not pv.any()


def test_drop_mode_is_the_conversation_without_images(tok):
    dec = loader(tok, seed=1, num_epochs=1, seq_length=None)
    drop = loader(tok, seed=1, num_epochs=1, seq_length=None, images="drop")
    n = 0
    for x, y in zip(dec, drop):
        assert dec.last_keys == drop.last_keys
        assert y["visual_inputs"].pixel_values is None and not (y["input_ids"] == IMAGE_PAD).any()
        grid = x["visual_inputs"].image_grid_thw
        # the same text: loss tokens equal; real has each image's pad run + vision_start/end more
        assert y["loss_mask"].sum() == x["loss_mask"].sum()
        nonpad = lambda b: int((b["attention_mask"] != 0).sum())  # noqa: E731
        assert nonpad(x) - nonpad(y) == int(grid.prod(-1).sum()) // 4 + 2 * len(grid)
        n += 1
    assert n == 45


def test_resume_across_an_epoch_boundary_with_other_workers(tok):
    full = []
    ref = loader(tok, num_workers=2, num_epochs=2, seed=9, images="shapes")
    for _ in ref:
        full += ref.last_keys
    ld = loader(tok, num_workers=2, num_epochs=2, seed=9, images="shapes")
    first = []
    for _, _ in zip(range(44), ld):  # 89 samples = 45 + 44 per worker share: stop just past the boundary
        first += ld.last_keys
    state = json.loads(json.dumps(ld.state_dict()))
    ld2 = loader(tok, num_workers=3, num_epochs=2, seed=9, images="shapes")
    ld2.load_state_dict(state)
    rest = []
    for _ in ld2:
        rest += ld2.last_keys
    assert Counter(first + rest) == Counter(full) == Counter(ALL_KEYS * 2)


def _bad_only(path):
    with open(path, "wb") as f:
        w = TarWriter(f)
        for i in range(3):
            w.add(f"k{i}.json", b"{not json")
        w.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_endless_loader_over_only_bad_samples_raises_instead_of_spinning(tok, tmp_path, workers):
    _bad_only(tmp_path / "bad-000000.tar")
    ld = make_loader(str(tmp_path), tokenizer=tok, num_epochs=None, num_workers=workers)
    with pytest.raises(EmptyEpochError, match=r"every sample was skipped \(3"):
        next(iter(ld))


def test_endless_loader_with_an_empty_rank_raises(tok):
    ld = make_loader(os.path.join(SHARDS, "shard-000005.tar"), tokenizer=tok, num_epochs=None, rank=0, world_size=20)
    with pytest.raises(EmptyEpochError, match="no samples for this rank"):
        next(iter(ld))
