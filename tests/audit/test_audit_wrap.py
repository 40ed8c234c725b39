"""Every timed step is a whole global batch, also at a data set's epoch boundary: the loaders wrap across epochs
(the next epoch's first samples complete the step, as Megatron's datasets wrap) in every source, the pairing
stays sample for sample, and a data set smaller than one step is repeated and said so. Fake workloads on a fake
clock (CPU, no model)."""

import itertools

import pytest
from audit_fakes import SMALL_PIXELS, FakeClock, ShapeCostWorkload
from small_dataset import write_small_dataset

from vlmdata.audit.phases.census import Census, _epoch_steps
from vlmdata.audit.phases.runner import run_audit
from vlmdata.audit.phases.sweep import run_sweep
from vlmdata.audit.report import build_report, write_report
from vlmdata.audit.settings.config import AuditConfig, AuditConfigError
from vlmdata.audit.sources.registry import AuditError
from vlmdata.loaders.api import make_loader

SOURCES = ("imagefree", "bridge-noise", "synthetic", "real")
N = 7  # real samples: not a multiple of a step's 4


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    out = tmp_path_factory.mktemp("wrap-real") / "ds"
    write_small_dataset(str(out), n=N, per_shard=3)
    return str(out)


def fake_audit(real, tmp, sources=SOURCES, steps=6, **kw):
    """``steps`` measured global steps of GBS 4 in micro-batches of 2 (one rank): 4 samples a step."""
    clock = FakeClock()
    kw.setdefault("global_batch_size", 4)
    kw.setdefault("loader_options", {**SMALL_PIXELS, "epoch_samples": 5})  # bridge-noise: 5 samples an epoch
    cfg = AuditConfig(
        real=real, sources=tuple(sources), micro_batch_size=2, min_steps=steps, max_steps=steps, block=3, **kw
    )
    return run_audit(cfg, clock=clock, workload=ShapeCostWorkload(clock), out_dir=str(tmp))


@pytest.fixture(scope="module")
def result(real, tmp_path_factory):
    return fake_audit(real, tmp_path_factory.mktemp("wrap-out"))


def test_every_timed_step_holds_a_whole_global_batch(result):
    for name, src in result["sources"].items():
        recs = src["records"]
        assert len(recs) == 6, name
        for r in recs:  # 24 samples over 3.4 epochs of real, 4.8 of bridge-noise: never a short step
            assert (r["samples"], r["micro_batches"], len(r["keys"]), len(r["micro"])) == (4, 2, 4, 2), name
        assert any(r["wait_kind"] == "epoch_boundary" for r in recs), name  # the boundaries stay visible
    m = result["measurement"]
    assert m["samples_per_step"] == 4 and m["epoch_wrap"] == []
    assert m["real_epoch_micro_batches"] == 4  # 7 samples: micro-batches 0-3, the fourth wraps into epoch 1
    assert m["real_epoch_steps"] is None  # an epoch is not a whole number of steps: the window is every step
    assert result["sources"]["real"]["census"]["rank_epoch_samples"] == N


def test_the_wrap_order_is_the_loaders_and_the_same_in_every_paired_source(result, real):
    srcs = result["sources"]
    keys = [r["keys"] for r in srcs["real"]["records"]]
    for name in ("synthetic", "imagefree"):
        assert [r["keys"] for r in srcs[name]["records"]] == keys
        assert srcs[name]["pairing"]["paired_fraction"] == 1.0
    # the sequence is the loader's: the epochs' orders one after the other, cut into steps of 4
    warm = result["measurement"]["warmup"]["loader_steps_per_source"]
    ld = make_loader(real, micro_batch_size=2, seed=0, images="shapes", seq_length=None, num_epochs=None,
                     wrap_epochs=True, rank=0, world_size=1, **SMALL_PIXELS)  # fmt: skip
    seq = [k for _ in itertools.islice(ld.iter_inline(), 2 * (warm + 6)) for k in ld.last_keys]
    assert [k for ks in keys for k in ks] == seq[4 * warm :]
    assert any(len(set(ks)) < 4 for ks in keys)  # a step that wraps can hold a sample of both epochs


def test_the_report_says_every_step_is_whole(result, tmp_path):
    md = open(write_report(build_report([result], threshold=0.10), str(tmp_path))["md"]).read()
    assert "Every step holds 4 samples per rank" in md


def test_a_data_set_smaller_than_a_step_is_repeated_and_said(tmp_path):
    small = tmp_path / "small"
    write_small_dataset(str(small), n=3, per_shard=3)
    res = fake_audit(str(small), tmp_path / "out", sources=("imagefree", "real"), steps=3, global_batch_size=8)
    for src in res["sources"].values():
        for r in src["records"]:
            assert (r["samples"], r["micro_batches"], len(r["keys"])) == (8, 4, 8)
            assert len(set(r["keys"])) == 3  # every sample, repeated within the step
    notes = res["measurement"]["epoch_wrap"]
    assert notes and notes[0].startswith("imagefree: 3 samples per epoch on this rank, fewer than the 8")
    assert any(n.startswith("real: 3 samples") and "repeated within each step" in n for n in notes)
    md = open(write_report(build_report([res], threshold=0.10), str(tmp_path / "rep"))["md"]).read()
    assert "real: 3 samples per epoch on this rank" in md


def test_a_loader_that_ends_an_epoch_short_is_refused_before_timing(real, tmp_path):
    def short_epochs(source, options):
        return make_loader(source, options.replace(wrap_epochs=False))

    clock = FakeClock()
    cfg = AuditConfig(
        real=real, sources=("imagefree", "real"), micro_batch_size=2, global_batch_size=4, max_steps=3, block=3,
        loader_options=SMALL_PIXELS,
    )  # fmt: skip
    work = ShapeCostWorkload(clock)
    with pytest.raises(AuditError, match=r"source real: micro-batch 3 holds 1 samples, not `micro_batch_size`=2"):
        run_audit(cfg, clock=clock, workload=work, loader_factory=short_epochs, out_dir=str(tmp_path))
    assert work.step_charges == []  # nothing was timed


def test_the_audit_owns_the_wrapping():
    with pytest.raises(AuditConfigError, match="wrap_epochs is set by the audit for every source"):
        AuditConfig(loader_options={"wrap_epochs": True})


def test_every_configuration_of_a_sweep_times_whole_steps(real, tmp_path):
    clock, seen = FakeClock(), []

    def build(res):
        seen.append(res)
        return build_report([res], threshold=0.10)

    cfg = AuditConfig(
        real=real, sources=("imagefree", "real"), global_batch_size=4, max_steps=3, block=3,
        loader_options=SMALL_PIXELS,
    )  # fmt: skip
    run_sweep(
        cfg,
        {"micro_batch_size": [1, 2]},
        build=build,
        workload_factory=lambda values: ShapeCostWorkload(clock),  # the path a `--step` function takes
        clock=clock,
        out_dir=str(tmp_path),
    )
    for res, (mbs, micro) in zip(seen, [(1, 4), (2, 2)]):
        for src in res["sources"].values():
            assert all((r["samples"], r["micro_batches"]) == (4, micro) for r in src["records"]), mbs


def _census(sample_epochs):
    c = Census()
    c.sample_epochs = [list(es) for es in sample_epochs]
    c.samples = [[[10 * e + i, []] for i, e in enumerate(es)] for es in sample_epochs]
    return c


def test_census_epoch_of_a_wrapped_and_of_a_whole_epoch():
    wrapped = _census([(0, 0), (0, 0), (0, 0), (0, 1), (1, 1)])
    assert wrapped.epoch_micro() == 4 and not wrapped.epoch_whole()
    assert len(wrapped.epoch_samples()) == 7  # exactly the first epoch's samples, the wrapped one included
    whole = _census([(0, 0), (0, 0), (1, 1), (1, 1)])
    assert whole.epoch_micro() == 2 and whole.epoch_whole() and len(whole.epoch_samples()) == 4
    assert _census([(0, 0), (0, 0)]).epoch_micro() is None  # no later epoch in the census
    workers = _census([(0, 0), (0, 1), (0, 0), (1, 1)])  # a worker wrapped before another finished epoch 0
    assert workers.epoch_micro() == 3 and not workers.epoch_whole()
    assert _epoch_steps(2, 0, 2) == 1 and _epoch_steps(3, 0, 2) is None
