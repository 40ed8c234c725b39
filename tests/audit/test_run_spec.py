"""The run's semantics (vlmdata.audit.settings.run_spec): Bridge's padding rule per TP/PP/EP/CP, micro-batches per
optimizer step, the data-parallel size, the step's extra padding. CPU, exact values."""

import pytest
import torch

from vlmdata.audit.settings.run_spec import RunSpec, RunSpecError


@pytest.mark.parametrize(
    "kw, longest, expect",
    [
        ({}, 300, 384),  # TP 1: the collate's multiple of 128; lcm(1, 16) = 16 divides it
        ({}, 4000, 4096),
        ({}, 4096, 4096),
        ({"seq_length": 1000}, 990, 1008),  # the collate caps at 1000, the step pads to a multiple of 16
        ({"tp": 2}, 300, 384),
        ({"tp": 3}, 300, 384),  # 384 is a multiple of lcm(3, 16) = 48
        ({"tp": 3}, 400, 528),  # collate 512 -> multiple of 48 -> 528
        ({"tp": 5}, 129, 320),  # collate 256 -> lcm(5, 16) = 80 -> 320
        ({"cp": 2, "tp": 3}, 129, 288),  # divisible by tp*cp*2 = 12 -> lcm(12, 16) = 48: 256 -> 288
        ({"ep": 8}, 300, 4096),  # EP > 1: every micro-batch padded to seq_length
        ({"pp": 2}, 10, 4096),  # PP > 1: the same
        ({"seq_policy": "pad128", "tp": 3}, 400, 512),
        ({"seq_policy": "max"}, 10, 4096),
        ({"seq_policy": "pack"}, 300, 300),
    ],
)
def test_bridge_padding_rule(kw, longest, expect):
    assert RunSpec(**kw).padded_length(longest) == expect


def test_micro_batches_per_optimizer_step():
    assert RunSpec().micro_batches == 16 and RunSpec().global_batch == 32  # default: 16 micro-batches of 2
    assert RunSpec(global_batch_size=32, micro_batch_size=2, ep=8).micro_batches == 2  # the 30B-A3B recipe: DP 8
    assert RunSpec(global_batch_size=32, micro_batch_size=2, ep=8).data_parallel == 8
    assert RunSpec(global_batch_size=64, micro_batch_size=1, dp=4).micro_batches == 16
    assert RunSpec(ep=4, tp=2).data_parallel == 4  # ETP defaults to TP: EP*ETP = 8 inside DP*TP
    assert RunSpec(ep=4, tp=2, etp=1).data_parallel == 2 and RunSpec(ep=4, tp=2, etp=1).expert_data_parallel == 1
    assert RunSpec(ep=2, dp=8).expert_data_parallel == 4
    assert RunSpec(default_micro_batches=4).global_batch == 8


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"global_batch_size": 31}, "multiple of `micro_batch_size`"),
        ({"ep": 8, "dp": 4}, "must divide"),
        ({"seq_policy": "pad64"}, "seq_policy"),
        ({"recompute": "partial"}, "recompute"),
        ({"tp": 0}, "`tp` must be"),
        ({"micro_batch_size": True}, "micro_batch_size"),
        ({"manual_gc": "yes"}, "`manual_gc` must be true or false"),
        ({"manual_gc_interval": -1}, "`manual_gc_interval` must be an integer >= 0"),
        ({"manual_gc_interval": True}, "`manual_gc_interval` must be an integer >= 0"),
    ],
)
def test_invalid_runs_are_refused(kw, match):
    with pytest.raises(RunSpecError, match=match):
        RunSpec(**kw)


def test_loader_changes_follow_the_policy():
    assert RunSpec(ep=8).loader_changes()["pad_to_max_length"] is True
    assert RunSpec().loader_changes()["pad_to_max_length"] is False
    assert RunSpec(seq_policy="pack").loader_changes()["packing"] is True
    assert RunSpec(seq_policy="max").loader_changes()["pad_to_max_length"] is True


def test_prepare_pads_as_bridges_step():
    B, S = 2, 384
    batch = {
        "input_ids": torch.ones(B, S, dtype=torch.int64),
        "labels": torch.ones(B, S, dtype=torch.int64),
        "loss_mask": torch.ones(B, S),
        "position_ids": torch.arange(S).expand(B, S).clone(),
    }
    out = RunSpec(tp=5).prepare(batch)  # 384 -> lcm(5, 16) = 80 -> 400
    assert out["input_ids"].shape == (2, 400) and int(out["input_ids"][:, 384:].sum()) == 0
    assert (out["labels"][:, 384:] == -100).all() and out["loss_mask"][:, 384:].sum() == 0
    assert out["position_ids"][0, 399] == 399
    assert RunSpec().prepare(batch) is batch  # nothing to add
    assert RunSpec(tp=5, seq_policy="pad128").prepare(batch) is batch


def test_describe_names_every_source_and_the_rule():
    d = RunSpec(ep=8, global_batch_size=32, sources={"ep": "flag"}).describe()
    assert d["sources"]["ep"] == "flag" and d["sources"]["tp"] == "default"
    assert d["micro_batches_per_step"] == 2 and "EP > 1" in d["padding_rule"]


@pytest.mark.parametrize(
    "kw, sp, multiple",
    [
        ({"cp": 3}, False, 6),
        ({"cp": 2, "tp": 3}, False, 4),
        ({"cp": 2, "tp": 3}, True, 12),  # lcm(2 * 2, 2 * 3)
        ({"tp": 4}, True, 4),
        ({"tp": 4}, False, 1),
        ({"cp": 1, "tp": 1}, True, 1),
    ],
)
def test_the_sequence_split_rule_is_bridges(kw, sp, multiple):
    RunSpec(seq_length=multiple * 100, **kw).check_sequence_split(sp)
    if multiple > 1:
        with pytest.raises(RunSpecError, match=f"must be a multiple of .* = {multiple} "):
            RunSpec(seq_length=multiple * 100 + 1, **kw).check_sequence_split(sp)
