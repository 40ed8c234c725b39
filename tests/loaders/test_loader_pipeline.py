"""Pipeline guarantees: epoch coverage across ranks x workers, determinism, exact resume, bad samples."""

import json
import os
from collections import Counter

import pytest

from vlmdata.dataset.reader import BadSampleError, scan_shard
from vlmdata.dataset.tar import TarWriter, iter_shard
from vlmdata.loaders.api import make_loader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDS = os.path.join(REPO, "sample_shards")
ALL_KEYS = [r.key for i in range(6) for r in iter_shard(os.path.join(SHARDS, f"shard-{i:06d}.tar"))]


@pytest.fixture(scope="module")
def tok():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    return load_qwen_tokenizer()


def run(loader, limit=None):
    keys = []
    for n, _ in enumerate(loader):
        keys += loader.last_keys
        if limit is not None and n + 1 >= limit:
            break
    return keys


def small(tok, source=SHARDS, **kw):
    # tiny images keep the test fast; the image path is not what is tested here
    kw.setdefault("min_pixels", 32 * 32)
    kw.setdefault("max_pixels", 64 * 64)
    return make_loader(source, tokenizer=tok, micro_batch_size=3, seq_length=None, **kw)


def test_scan_matches_tar_reader():
    refs = scan_shard(os.path.join(SHARDS, "shard-000000.tar"))
    assert [r.key for r in refs] == [r.key for r in iter_shard(os.path.join(SHARDS, "shard-000000.tar"))]
    assert all(r.error is None and "json" in r.members for r in refs)


@pytest.mark.parametrize("world", [2, 3])
def test_epoch_covers_every_sample_once_across_ranks_and_workers(tok, world):
    seen = []
    for rank in range(world):
        seen += run(small(tok, rank=rank, world_size=world, num_workers=2, seed=3))
    assert len(seen) == len(ALL_KEYS) == 89
    assert Counter(seen) == Counter(ALL_KEYS)


def test_deterministic_for_a_seed_and_shuffled(tok):
    a = run(small(tok, seed=7, num_workers=2))
    b = run(small(tok, seed=7, num_workers=2))
    c = run(small(tok, seed=8, num_workers=2))
    assert a == b
    assert a != c and sorted(a) == sorted(c) == sorted(ALL_KEYS)
    assert a != sorted(a)


@pytest.mark.parametrize("workers", [0, 2])
def test_second_epoch_is_a_new_order(tok, workers):
    ld = small(tok, seed=1, num_epochs=3, num_workers=workers)
    keys = run(ld)
    epochs = [keys[i * 89 : (i + 1) * 89] for i in range(3)]
    assert len(keys) == 3 * 89 and epochs[0] != epochs[1] != epochs[2]
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(epochs[2]) == sorted(ALL_KEYS)
    # with workers, the next epoch's workers are started early: same epochs as without them
    assert keys == run(small(tok, seed=1, num_epochs=3, num_workers=workers))


@pytest.mark.parametrize("workers,workers2", [(0, 0), (2, 2), (2, 1), (2, 3)])
def test_resume_mid_epoch_yields_exactly_the_rest(tok, workers, workers2):
    """Resume with the same or another number of DataLoader workers: nothing lost, nothing twice."""
    full = run(small(tok, seed=5, num_workers=workers, rank=1, world_size=2))
    ld = small(tok, seed=5, num_workers=workers, rank=1, world_size=2)
    first = run(ld, limit=5)
    state = json.loads(json.dumps(ld.state_dict()))  # serialisable
    assert "num_workers" not in state and len(state["consumed"]["extra"]) <= 3 * max(1, workers)
    ld2 = small(tok, seed=5, num_workers=workers2, rank=1, world_size=2)
    ld2.load_state_dict(state)
    rest = run(ld2)
    assert sorted(first + rest) == sorted(full)
    assert len(first) + len(rest) == len(full)
    if workers <= 1 and workers2 <= 1:
        assert first + rest == full  # one stream: exactly the same order
    with pytest.raises(ValueError):
        small(tok, seed=6, num_workers=workers, rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError):
        small(tok, seed=5, num_workers=workers, rank=0, world_size=2).load_state_dict(state)


def test_resume_twice_with_changing_workers(tok):
    full = run(small(tok, seed=4, num_workers=0))
    ld = small(tok, seed=4, num_workers=2)
    a = run(ld, limit=3)
    state = ld.state_dict()
    ld = small(tok, seed=4, num_workers=3)
    ld.load_state_dict(state)
    b = run(ld, limit=4)
    state = ld.state_dict()
    assert state["consumed"]["prefix"] + len(state["consumed"]["extra"]) == len(a) + len(b)
    ld = small(tok, seed=4, num_workers=1)
    ld.load_state_dict(state)
    c = run(ld)
    assert len(a) + len(b) + len(c) == len(full) and sorted(a + b + c) == sorted(full)


def test_consumed_positions_round_trip():
    from vlmdata.loaders.pipeline import Consumed, worker_positions

    c = Consumed()
    for W, counts in ((2, [4, 3]), (3, [1, 0, 2]), (1, [2])):
        rem = c.remaining(20)
        got = [p for w, k in enumerate(counts) for p in worker_positions(20, w, W, c)[:k]]
        assert set(got) <= set(rem) and len(set(got)) == sum(counts)
        before = 20 - len(rem)
        c = c.plus(20, W, counts)
        assert 20 - len(c.remaining(20)) == before + sum(counts)
        assert Consumed.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert sorted(p for w in range(3) for p in worker_positions(20, w, 3, c)) == c.remaining(20)


def _write(path, members):
    with open(path, "wb") as f:
        w = TarWriter(f)
        for name, data in members:
            w.add(name, data)
        w.close()


@pytest.fixture
def bad_dataset(tmp_path):
    """Shard 0 good; shard 1 with an undecodable image and a sample without JSON; shard 2 truncated."""
    good = list(iter_shard(os.path.join(SHARDS, "shard-000000.tar")))[:4]
    d = tmp_path / "bad"
    d.mkdir()
    members = [(f"{r.key}.{ext}", data) for r in good[:2] for ext, data in r.files.items()]
    _write(d / "a-000000.tar", members)
    r2, r3 = good[2], good[3]
    meta = json.loads(r2.files["json"])
    m = [
        ("x1.json", json.dumps({**meta, "key": "x1"}).encode()),
        ("x1.0.jpg", b"\xff\xd8 not a jpeg"),
        ("x2.0.jpg", r3.files["0.jpg"]),
    ]
    _write(d / "a-000001.tar", m)
    _write(d / "a-000002.tar", [(f"{r.key}.{ext}", data) for r in good[2:4] for ext, data in r.files.items()])
    raw = (d / "a-000002.tar").read_bytes()
    (d / "a-000002.tar").write_bytes(raw[: len(raw) - 1024 - 5000])  # cut inside the last image
    return str(d)


def test_bad_samples_are_skipped_and_counted_with_shard_and_key(tok, bad_dataset, caplog):
    ld = small(tok, bad_dataset, num_workers=0)
    keys = run(ld)
    st = ld.stats.to_json()
    assert sorted(keys) == sorted(["s000000000", "s000000001", "s000000002"])
    assert st["skipped_by_reason"] == {"missing_json": 1, "truncated_tar": 1, "undecodable_image": 1}
    by = {s["reason"]: s for s in st["skipped_samples"]}
    assert by["missing_json"]["key"] == "x2" and by["missing_json"]["shard"].endswith("a-000001.tar")
    assert by["undecodable_image"]["key"] == "x1"
    assert by["truncated_tar"]["key"] == "s000000003" and by["truncated_tar"]["shard"].endswith("a-000002.tar")
    assert st["samples"] + st["skipped"] == 6
    assert "x1" in caplog.text and "a-000001.tar" in caplog.text


def test_bad_samples_counted_once_across_ranks(tok, bad_dataset):
    total = Counter()
    for rank in range(2):
        ld = small(tok, bad_dataset, rank=rank, world_size=2, num_workers=2)
        run(ld)
        total.update(s["reason"] for s in ld.stats.skipped_samples)
    assert total == Counter({"missing_json": 1, "truncated_tar": 1, "undecodable_image": 1})


def test_on_error_raise(tok, bad_dataset):
    with pytest.raises(BadSampleError) as e:
        run(small(tok, bad_dataset, num_workers=0, on_error="raise", shuffle=False))
    assert e.value.key in ("x1", "x2", "s000000003") and e.value.shard


def test_mock_and_synthetic_sources_split_without_overlap(tok):
    pytest.importorskip("vlmdata.synthetic.source")
    seen = []
    for rank in range(2):
        seen += run(small(tok, "imagefree", rank=rank, world_size=2, epoch_samples=20, num_workers=0))
    assert len(seen) == 20 and len(set(seen)) == 20


def test_shard_index_is_the_scan_compactly():
    """The loader keeps every shard's references as a ShardIndex: the same SampleRefs (keys with escapes,
    members, errors), a few dozen bytes a sample instead of an object each."""
    import glob
    import tracemalloc

    from vlmdata.dataset.reader import SampleRef, ShardIndex

    for i, path in enumerate(sorted(glob.glob(os.path.join(REPO, "sample_shards", "*.tar")))):
        refs = scan_shard(path, i)
        idx = ShardIndex(i, refs)
        assert len(idx) == len(refs) and list(idx) == refs and idx[-1] == refs[-1] and idx[1:3] == refs[1:3]
    odd = [
        SampleRef(0, "a/\udcff\u00e9", {"json": (512, 10), "0.jpg": (1536, 99)}),
        SampleRef(0, "b", {}, ("truncated_tar", "cut at 1024")),
    ]
    assert list(ShardIndex(0, odd)) == odd
    with pytest.raises(IndexError):
        ShardIndex(0, odd)[2]
    many = [
        SampleRef(0, f"s{j:09d}", {"json": (j * 4096, 300), "0.jpg": (j * 4096 + 1024, 90_000)}) for j in range(20_000)
    ]
    tracemalloc.start()
    compact = ShardIndex(0, many)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert size / len(many) < 120 and compact[12_345] == many[12_345]


def test_consumed_plus_equals_listing_the_remaining_positions():
    """``Consumed.plus`` (run for every batch) works in index space without listing ``remaining(n)``;
    it equals the definition, checked against that listing on 20,000 random states."""
    import random

    from vlmdata.loaders.pipeline import Consumed, worker_slice

    def by_listing(base: Consumed, n: int, num_workers: int, counts: list[int], epoch: int) -> Consumed:
        rem = base.remaining(n)
        new = [p for w, c in enumerate(counts) for p in rem[worker_slice(w, epoch, num_workers) :: num_workers][:c]]
        return base.plus_positions(new) if new else base

    rng = random.Random(0)
    for _ in range(20_000):
        n = rng.randint(0, 60)
        density = rng.choice([0, 0.2, 0.6])
        base = Consumed.of([p for p in range(n) if rng.random() < density])
        workers, epoch = rng.randint(1, 4), rng.randint(0, 5)
        counts = [rng.randint(0, len(base.remaining(n)) // workers + 2) for _ in range(workers)]
        assert base.plus(n, workers, counts, epoch) == by_listing(base, n, workers, counts, epoch)


def test_consumed_plus_does_not_list_a_large_epoch():
    """A million positions per rank: the per-batch bookkeeping stays independent of n."""
    from vlmdata.loaders.pipeline import Consumed

    class Huge(Consumed):
        def remaining(self, n: int) -> list[int]:
            raise AssertionError("plus() listed the remaining positions")

    c = Huge(prefix=400_000, extra=(400_003, 400_010)).plus(1_000_000, 3, [7, 5, 6], epoch=2)
    assert c.prefix > 400_000 and len(c.extra) < 10


def test_plan_sequences_are_compact_integer_arrays():
    """The plan's per-epoch sequences cost 8 bytes a sample (arrays, not lists of Python ints), keep every
    sample exactly once, and a worker's share of a fresh epoch is a range, not a list."""
    from array import array

    from vlmdata.loaders.pipeline import Plan, worker_positions

    plan = Plan("source", epoch_samples=1000, seed=1, shuffle=True, buffer=16)
    order = plan.epoch_order(2)
    seq = plan.rank_sequence(2, 1, 3)
    share = plan.stream(2, 1, 3, 0, 2)
    assert all(isinstance(x, array) and x.itemsize == 8 for x in (order, seq, share))
    assert sorted(order) == list(range(2000, 3000))
    assert sorted(seq) == list(range(2333, 2666)) and list(seq) != sorted(seq)  # the rank's slice, shuffled
    assert sorted(list(plan.stream(2, 1, 3, 0, 2)) + list(plan.stream(2, 1, 3, 1, 2))) == sorted(seq)
    assert isinstance(worker_positions(333, 1, 2), range)
    assert list(share) == [seq[p] for p in range((0 + 2) % 2, len(seq), 2)]
