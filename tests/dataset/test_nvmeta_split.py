"""``validate`` checks ``.nv-meta/split.yaml`` (vlmdata.dataset.nvmeta.check_split, issue 32): a split that
lists part of the shards, lists one twice or a stranger, excludes a shard or lacks the ``val`` part Bridge asks
for was accepted; Energon then read part of the data, or Bridge's validation failed."""

import os
import re
import shutil

import pytest
import yaml
from small_dataset import write_small_dataset

from vlmdata.dataset.nvmeta import check_split, prepare_energon
from vlmdata.dataset.validate import validate

NAMES = ["shard-000000.tar", "shard-000001.tar"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ds") / "ds")
    write_small_dataset(out, n=8, per_shard=4)
    prepare_energon(out, NAMES)
    return out


def _split(tmp_path, content) -> str:
    meta = tmp_path / ".nv-meta"
    meta.mkdir(exist_ok=True)
    (meta / "split.yaml").write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(meta)


def test_what_the_build_writes_is_sound(dataset):
    assert check_split(os.path.join(dataset, ".nv-meta"), NAMES) == []
    assert "shard-{000000..000001}.tar" in open(os.path.join(dataset, ".nv-meta", "split.yaml")).read()


@pytest.mark.parametrize(
    "split, match",
    [
        ({"split_parts": {"train": ["shard-000000.tar"], "val": NAMES}}, "lists 1 of 2 shards .missing shard-000001"),
        ({"split_parts": {"train": NAMES}}, "no 'val' part"),
        ({"split_parts": {"val": NAMES}}, "no 'train' part"),
        ({"split_parts": {"train": NAMES + ["shard-000000.tar"], "val": NAMES}}, "more than once"),
        ({"split_parts": {"train": NAMES, "val": NAMES + ["other.tar"]}}, "lists other.tar, not shards"),
        ({"split_parts": {"train": NAMES, "val": NAMES}, "exclude": ["shard-00000{0..1}.tar"]}, "exclude removes"),
        ({"split_parts": {"train": ["shard-{0..999999999999}.tar"], "val": NAMES}}, "far too many"),
        ({"split_parts": {"train": [[1]], "val": NAMES}}, "not a list of shard names"),
        ({"split_parts": [1]}, "no split_parts mapping"),
        ("split_parts: [", "unreadable"),
    ],
)
def test_unsound_splits_are_problems(tmp_path, split, match):
    problems = check_split(_split(tmp_path, split), NAMES)
    assert len(problems) >= 1 and any(re.search(match, p) for p in problems), problems


def test_a_fifo_split_does_not_block(tmp_path):
    meta = tmp_path / ".nv-meta"
    meta.mkdir()
    os.mkfifo(meta / "split.yaml")
    assert "unreadable" in check_split(str(meta), NAMES)[0]


def test_validate_reports_a_split_that_drops_a_shard(dataset, tmp_path):
    ds = str(tmp_path / "copy")
    shutil.copytree(dataset, ds)
    _split(tmp_path / "copy", {"split_parts": {"train": ["shard-000000.tar"], "val": NAMES}, "exclude": []})
    rep = validate(ds)
    assert not rep.ok and any("lists 1 of 2 shards" in p.problem for p in rep.problems), rep.problems
