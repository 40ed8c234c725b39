"""The loader's speed levers keep its batches and its contract (issue 12; bench/loader_levers.py times them).

* tokenizer: loaded once per process and tokenizer dir, so a second ``make_loader`` loads nothing;
* pixel rows: patchified straight into one batch buffer (``pixel_rows``), bit-identical to patchifying
  each image and joining them (the previous path, kept here as the reference);
* reduced-scale decode: never taken by the exact path (a DCT-scaled decode is not Bridge's pixels), and the
  fast path's pixels stay within ``draft_tolerance`` of the exact ones on large (>= 2 MP) photos.
No timing asserts.
"""

import os
import pickle

import numpy as np
import pytest
import torch
from conftest import jpeg_bytes

from vlmdata.loaders import api
from vlmdata.loaders.collate import Processed
from vlmdata.loaders.pixel_rows import PixelRows, batch_pixels, preprocess_rows
from vlmdata.qwen import spec, tokenize
from vlmdata.qwen.image import draft_tolerance
from vlmdata.qwen.spec import get_spec
from vlmdata.qwen.vision import preprocess_any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDS = os.path.join(REPO, "sample_shards")


# ----------------------------------------------------------------------------- tokenizer once per process


def test_second_make_loader_loads_no_tokenizer(monkeypatch):
    calls = []
    real = tokenize.load_qwen_tokenizer

    def counting(path=None):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(tokenize, "load_qwen_tokenizer", counting)
    monkeypatch.setattr(tokenize, "_SHARED", {})  # a fresh process as far as the cache goes
    a = api.make_loader(SHARDS)
    b = api.make_loader(SHARDS, seq_length=2048, micro_batch_size=2)
    assert len(calls) == 1
    ca, cb = a.stream.processor.chat, b.stream.processor.chat
    assert ca.tokenizer is cb.tokenizer
    assert ca._backend is not None and ca._backend is cb._backend  # the private Rust copy too
    # the same dir spelled differently is the same key
    tokenize.shared_tokenizer(spec.shipped_tokenizer_dir() + os.sep)
    assert len(calls) == 1


def test_shared_tokenizer_batches_equal_own_tokenizer():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    own = next(iter(api.make_loader(SHARDS, tokenizer=load_qwen_tokenizer(), shuffle=False)))
    shared = next(iter(api.make_loader(SHARDS, shuffle=False)))
    for k in ("input_ids", "labels", "loss_mask"):
        assert torch.equal(own[k], shared[k])


# ----------------------------------------------------------------------------- one batch buffer


def _eager(proc: api.SampleProcessor):
    """The previous sample processor: each image patchified into its own array (joined by the collator)."""

    def run(sample):
        pvs, grids = [], []
        for img in sample.images:
            pv, g = preprocess_any(
                img,
                proc.spec,
                proc.min_pixels,
                proc.max_pixels,
                proc.resize,
                proc.exact_images,
            )
            pvs.append(pv)
            grids.append(g)
        row = proc.chat.tokenize(sample.conversation, [proc.chat.image_tokens(g) for g in grids])
        return Processed(sample.key, row, pvs, grids)

    return run


@pytest.mark.parametrize("model", ["qwen3-vl", "qwen2.5-vl"])
@pytest.mark.parametrize("resize", ["bridge", "hf"])
@pytest.mark.parametrize("exact", [False, True])
def test_batch_buffer_bit_identical_to_joined_rows(model, resize, exact):
    loader = api.make_loader(
        SHARDS,
        model=model,
        micro_batch_size=3,
        shuffle=False,
        resize=resize,
        exact_images=exact,
    )
    st = loader.stream
    eager = _eager(st.processor)
    reader = api.ShardReader(st.payload)
    n = 0
    for epoch_item in st.plan.stream(0, 0, 1, 0, 1)[:9]:
        if st.plan.ref(epoch_item).error:
            continue
        sample = st._load(reader, epoch_item)
        new, old = st.processor(sample), eager(sample)
        assert all(isinstance(p, PixelRows) for p in new.pixel_values)
        for p, q in zip(new.pixel_values, old.pixel_values):
            assert p.shape == q.shape and np.array_equal(np.asarray(p), q)
        bn, bo = st.collator([new, new]), st.collator([old, old])
        assert torch.equal(bn["visual_inputs"].pixel_values, bo["visual_inputs"].pixel_values)
        assert torch.equal(bn["visual_inputs"].image_grid_thw, bo["visual_inputs"].image_grid_thw)
        n += 1
    reader.close()
    assert n >= 6


def test_batch_pixels_mixes_rows_and_arrays_in_order():
    s = get_spec("qwen3-vl")
    rng = np.random.default_rng(0)
    a = PixelRows(rng.integers(0, 256, (64, 96, 3), dtype=np.uint8), s, False)
    b = PixelRows(rng.integers(0, 256, (3, 32, 64), dtype=np.uint8), s, True)
    c = rng.random((5, s.patch_dim), dtype=np.float32)
    out = batch_pixels([a, c, b], s.patch_dim)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    assert np.array_equal(out, np.concatenate([np.asarray(a), c, np.asarray(b)]))
    assert batch_pixels([c], s.patch_dim) is c  # a lone array is not copied
    back = pickle.loads(pickle.dumps(a))  # DataLoader workers / map-style datasets pickle processed samples
    assert back.shape == a.shape and np.array_equal(np.asarray(back), np.asarray(a))


def test_patchify_out_must_fit():
    from vlmdata.qwen.image import patchify

    s = get_spec("qwen3-vl")
    a = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(ValueError, match="out must be"):
        patchify(a, s, out=np.empty((3, s.patch_dim), np.float32))


# ----------------------------------------------------------------------------- reduced-scale decode


@pytest.fixture(scope="module")
def large_jpegs(photos):
    # >= 2 MP: the sizes where the fast path may decode at 1/2 or 1/4 DCT scale
    return [
        jpeg_bytes(photos["astronaut"], (2400, 1800)),
        jpeg_bytes(photos["coffee"], (4000, 2600)),
        jpeg_bytes(photos["rocket"], (1700, 1300)),
    ]


def test_exact_path_never_decodes_at_reduced_scale(large_jpegs, monkeypatch):
    from PIL import JpegImagePlugin

    drafted = []
    real = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        res = real(self, mode, size)
        if res is not None:
            drafted.append(size)
        return res

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    for data in large_jpegs:
        preprocess_rows(data, "qwen3-vl", 200_704, 1_003_520, "bridge", exact=True)
    assert drafted == []
    for data in large_jpegs:
        preprocess_rows(data, "qwen3-vl", 200_704, 1_003_520, "bridge", exact=False)
    assert drafted  # the 4000x2600 one is reduced (target <= half the source)


@pytest.mark.parametrize("model", ["qwen3-vl", "qwen2.5-vl"])
def test_fast_path_within_documented_tolerance_on_large_photos(large_jpegs, model):
    mean_tol, p99_tol = draft_tolerance(model)
    for data in large_jpegs:
        fast, g1 = preprocess_rows(data, model, 200_704, 1_003_520, "bridge", exact=False)
        exact, g2 = preprocess_rows(data, model, 200_704, 1_003_520, "bridge", exact=True)
        assert g1 == g2
        d = np.abs(np.asarray(fast) - np.asarray(exact))
        assert float(d.mean()) <= mean_tol
        assert float(np.quantile(d.ravel()[::7], 0.99)) <= p99_tol


def test_batch_buffers_recycled_only_when_freed():
    from vlmdata.loaders.pixel_rows import BufferPool

    pool = BufferPool(keep=2)
    a = pool.empty((8, 16))
    a[:] = 1.0
    t = torch.from_numpy(a)
    del a
    b = pool.empty((8, 16))  # `a` still lives inside the tensor: a new block
    b[:] = 2.0
    assert bool((t == 1.0).all())
    del t
    c = pool.empty((7, 16))  # now a's block comes back (it fits)
    assert len(pool._idle) == 0 and c.shape == (7, 16) and c.flags.c_contiguous
    del b, c
    assert len(pool._idle) == 2
    for _ in range(3):
        pool._give_back(np.empty(4, np.float32))
    assert len(pool._idle) == 2  # at most ``keep`` idle blocks


def test_loader_batches_unchanged_by_buffer_reuse():
    kw = {"micro_batch_size": 2, "shuffle": False, "num_epochs": 1}
    kept = [b["visual_inputs"].pixel_values.clone() for b in api.make_loader(SHARDS, **kw)]
    live = list(api.make_loader(SHARDS, **kw))  # every batch held: no buffer may be reused under it
    assert len(kept) == len(live)
    for x, b in zip(kept, live):
        assert torch.equal(x, b["visual_inputs"].pixel_values)
