"""A dataset or a shard that holds no sample fails validate: there is nothing for a reader to read."""

import tarfile

from vlmdata.cli.main import main
from vlmdata.dataset.validate import validate


def test_an_empty_shard_fails(tmp_path, capsys):
    shard = tmp_path / "empty-000000.tar"
    tarfile.open(shard, "w").close()  # only the end-of-archive blocks
    rep = validate(str(shard))
    assert not rep.ok and [p.problem for p in rep.problems] == [
        "the shard holds no sample: nothing for a reader to read"
    ]
    assert main(["validate", str(shard)]) == 1
    assert "holds no sample" in capsys.readouterr().err


def test_a_dataset_that_wrote_nothing_fails(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jpg").write_bytes(b"junk")
    (src / "a.txt").write_text("a caption")
    out = tmp_path / "out"
    main(["build", str(src), "-o", str(out), "--min-written-fraction", "0", "-q"])
    assert (out / "manifest.json").exists()
    capsys.readouterr()
    rep = validate(str(out))
    assert not rep.ok and rep.samples == 0
    assert [p.problem for p in rep.problems] == ["the dataset holds no sample: nothing for a reader to read"]
    assert main(["validate", str(out)]) == 1
