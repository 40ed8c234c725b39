"""Round 3, a fresh corpus of attacks, one test per finding: torchrun variables that are not integers, `demo -o`
over an existing dataset, profiles whose rows lie, unbounded synth flags. docs/RELIABILITY.md section 17 names
the rule and the module behind each."""

import json
import shutil

import pytest

import vlmdata
from vlmdata.cli.main import main
from vlmdata.errors import VlmdataError


@pytest.fixture
def ds(tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(vlmdata.sample_data_path(), d)
    return d


# ----------------------------------------------------------------------------- tracebacks: the environment


@pytest.mark.parametrize("env", [{"RANK": "abc"}, {"WORLD_SIZE": "two"}, {"WORLD_SIZE": "0"}, {"RANK": "-1"}])
def test_torchrun_variables_that_are_not_integers_are_a_vlmdata_error(env, ds, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(VlmdataError, match=next(iter(env))):
        vlmdata.make_loader(str(ds), micro_batch_size=1)


@pytest.mark.parametrize("env", [{"WORLD_SIZE": "abc"}, {"WORLD_SIZE": "2", "LOCAL_RANK": "x"}, {"WORLD_SIZE": "2"}])
def test_audit_with_bad_torchrun_variables_is_one_line(env, monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["audit", "--sources", "imagefree,real", "--steps", "2", "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error:") and ("WORLD_SIZE" in err or "LOCAL_RANK" in err)


# ----------------------------------------------------------------------------- destructive


def test_demo_never_replaces_an_existing_dataset_unless_asked(ds, capsys):
    pytest.importorskip("skimage")
    before = (ds / "manifest.json").read_bytes()
    assert main(["demo", "-o", str(ds), "-q", "--workers", "1"]) == 2
    assert (ds / "manifest.json").read_bytes() == before and "not empty" in capsys.readouterr().err
