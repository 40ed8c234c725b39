"""``wrap_epochs``: an endless loader whose epoch is not a multiple of ``micro_batch_size`` completes an epoch's
last batch with the next epoch's first samples (as Megatron's datasets wrap): every batch whole, the order the
epochs' own orders concatenated, the same for every view of a source, exact resume across the wrap, and no
endless spin when a worker holds samples while later epochs yield none."""

import itertools
import json
from collections import Counter

import pytest
from small_dataset import sample, write_small_dataset

from vlmdata.dataset.reader import BadSampleError
from vlmdata.loaders.api import make_loader
from vlmdata.loaders.pipeline import EmptyEpochError

N = 7  # samples: not a multiple of the batch sizes below


@pytest.fixture(scope="module")
def tok():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    return load_qwen_tokenizer()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("wrap") / "ds"
    keys = [s.key for s in write_small_dataset(str(out), n=N, per_shard=3)]
    return str(out), keys


def batches(tok, path, n, *, inline=True, **kw):
    """(keys, epochs) of the first ``n`` batches."""
    kw = {"micro_batch_size": 3, "seq_length": 1024, "seed": 5, "images": "shapes", **kw}
    ld = make_loader(path, tokenizer=tok, **kw)
    out = []
    for _ in itertools.islice(ld.iter_inline() if inline else iter(ld), n):
        out.append((list(ld.last_keys), list(ld.last_epochs)))
    return out


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_every_batch_is_whole_and_each_epoch_is_every_sample_once(tok, data, workers):
    path, keys = data
    got = batches(tok, path, 20, num_epochs=None, wrap_epochs=True, num_workers=workers)
    assert all(len(k) == 3 and len(e) == 3 for k, e in got)  # 60 samples, never a short batch
    by_epoch: dict[int, list] = {}
    for ks, es in got:
        for k, e in zip(ks, es):
            by_epoch.setdefault(e, []).append(k)
    for e in range(60 // N - 2):  # every complete epoch (workers drift within an epoch): each sample once
        assert Counter(by_epoch[e]) == Counter(keys), e
    assert any(len(set(es)) > 1 for _, es in got)  # some batches wrap into the next epoch


def test_without_wrapping_the_epochs_end_short(tok, data):
    got = batches(tok, data[0], 6, num_epochs=None)
    assert [len(k) for k, _ in got] == [3, 3, 1, 3, 3, 1]


def test_the_wrap_order_is_the_epochs_orders_concatenated(tok, data):
    """Wrapping regroups the very sample sequence of the epochs, so it is as deterministic as the plan."""
    plain = [k for ks, _ in batches(tok, data[0], 9, num_epochs=3) for k in ks]  # 3+3+1 per epoch
    wrapped = [ks for ks, _ in batches(tok, data[0], 7, num_epochs=3, wrap_epochs=True)]  # 21 samples, 7 batches
    assert [k for ks in wrapped for k in ks] == plain
    again = [ks for ks, _ in batches(tok, data[0], 7, num_epochs=3, wrap_epochs=True)]
    assert again == wrapped


def test_views_of_one_source_wrap_alike(tok, data):
    """Decoded, shapes-only and image-free views: the same samples in the same batches (the audit's pairing)."""
    views = [
        batches(tok, data[0], 12, num_epochs=None, wrap_epochs=True, num_workers=2, images=mode)
        for mode in ("decode", "shapes", "drop")
    ]
    assert views[0] == views[1] == views[2]


def test_workers_yield_the_inline_batches(tok, data):
    a = batches(tok, data[0], 12, num_epochs=None, wrap_epochs=True, num_workers=2, inline=False)
    b = batches(tok, data[0], 12, num_epochs=None, wrap_epochs=True, num_workers=2)
    assert a == b


def test_a_finite_run_ends_with_one_short_batch_or_none(tok, data):
    sizes = [len(k) for k, _ in batches(tok, data[0], 99, num_epochs=2, wrap_epochs=True)]
    assert sizes == [3, 3, 3, 3, 2]  # 14 samples
    sizes = [len(k) for k, _ in batches(tok, data[0], 99, num_epochs=2, wrap_epochs=True, drop_last=True)]
    assert sizes == [3, 3, 3, 3]


@pytest.mark.parametrize("stop", [1, 2, 3, 4, 5])  # around the batches that wrap
def test_resume_across_the_wrap_is_exact(tok, data, stop):
    path, keys = data
    kw = {"micro_batch_size": 3, "seq_length": 1024, "seed": 5, "images": "shapes", "num_epochs": 3}
    kw["wrap_epochs"] = True
    ld = make_loader(path, tokenizer=tok, num_workers=2, **kw)
    first = []
    for _ in itertools.islice(iter(ld), stop):
        first += ld.last_keys
    state = json.loads(json.dumps(ld.state_dict()))
    kw["num_epochs"] = 3 - state["epoch"]  # epochs from the one resumed: the same three in all
    ld2 = make_loader(path, tokenizer=tok, num_workers=3, **kw)
    ld2.load_state_dict(state)
    rest = []
    for _ in ld2:
        rest += ld2.last_keys
    assert Counter(first + rest) == Counter(keys * 3)


def test_a_data_set_smaller_than_a_batch_repeats(tok, data):
    got = batches(tok, data[0], 4, num_epochs=None, wrap_epochs=True, micro_batch_size=10)
    assert all(len(k) == 10 for k, _ in got)
    assert Counter(got[0][1]) == {0: 7, 1: 3}  # every sample of epoch 0, then epoch 1's first three


class _GoodThenBad:
    """A source whose first ``good`` samples are fine and every later one is bad (``get(i)`` raises)."""

    def __init__(self, good: int):
        self.good = good

    def get(self, i: int):
        if i >= self.good:
            raise BadSampleError("broken on purpose", key=f"k{i}", reason="bad_json")
        return sample(i)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_held_samples_and_an_epoch_without_any_raise_instead_of_spinning(tok, workers):
    """Epoch 0 gives 3 good samples, a batch takes 4: the worker holds them, waiting for epoch 1, which has
    none. The loader says so instead of reading bad epochs forever."""
    ld = make_loader(
        _GoodThenBad(3),
        tokenizer=tok,
        epoch_samples=4,
        micro_batch_size=4,
        num_epochs=None,
        wrap_epochs=True,
        num_workers=workers,
        images="shapes",
        seq_length=1024,
        shuffle=False,
    )
    with pytest.raises(EmptyEpochError, match=r"epoch 1: every sample was skipped"):
        next(iter(ld))


def test_bridge_external_iterator_wraps(data):
    """Bridge's ``external`` path takes the provider's endless iterator as is: every micro-batch whole."""
    from types import SimpleNamespace

    from vlmdata.loaders.bridge import VlmdataDatasetProvider

    provider = VlmdataDatasetProvider(
        source=data[0], dataloader_type="external", micro_batch_size=3, seq_length=1024, num_workers=0
    )
    train, valid, _ = provider.build_datasets(SimpleNamespace(pg_collection=None, valid_samples=0))
    rows = [next(train)["input_ids"].shape[0] for _ in range(5)]  # 15 samples: past two epoch ends of 7
    assert rows == [3] * 5 and valid is None
