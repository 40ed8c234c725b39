"""A shard that is a FIFO or another special file never blocks (issue 32): validate, inspect, profile and the
loader refuse it without reading (the regular-file rule at every shard open: ``storage.open_input``, which
``storage.open`` applies to local reads)."""

import os
import shutil

import pytest

import vlmdata
from vlmdata import make_loader
from vlmdata.cli.main import main
from vlmdata.storage import NotRegularFile, open_input


@pytest.fixture()
def fifo_dataset(tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(vlmdata.sample_data_path(), ds)
    os.remove(ds / "shard-000001.tar")
    os.mkfifo(ds / "shard-000001.tar")
    return str(ds)


def test_open_input_refuses_special_files_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "f")
    for path in (str(tmp_path / "f"), "/dev/zero", str(tmp_path)):
        with pytest.raises(NotRegularFile):
            open_input(path)
    (tmp_path / "r").write_bytes(b"x")
    with open_input(str(tmp_path / "r")) as f:
        assert f.read() == b"x"


@pytest.mark.timeout(300)
def test_a_fifo_shard_does_not_block_validate_inspect_profile(fifo_dataset, tmp_path, capsys):
    assert main(["validate", fifo_dataset, "-q"]) == 1
    out = capsys.readouterr()
    assert "shard is not a regular file" in out.out + out.err
    assert main(["inspect", fifo_dataset]) in (0, 1)
    assert main(["profile", fifo_dataset, "-o", str(tmp_path / "p.json"), "-q", "--decode-images", "0"]) == 0
    assert main(["validate", os.path.join(fifo_dataset, "shard-000001.tar")]) == 2


@pytest.mark.timeout(300)
def test_a_fifo_shard_does_not_block_the_loader(fifo_dataset):
    ld = make_loader(fifo_dataset, seq_length=4096, micro_batch_size=1, num_workers=0)
    n = sum(1 for _ in ld)
    skipped = ld.stats.skipped_samples
    assert n == 89 - 16 and len(skipped) == 16 and all("FIFO" in s["detail"] for s in skipped)
