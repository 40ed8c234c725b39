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


# ----------------------------------------------------------------------------- profiles that lie, unbounded synth flags


@pytest.fixture(scope="module")
def profile_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("prof") / "p.json"
    assert main(["profile", vlmdata.sample_data_path(), "-o", str(out), "-q", "--decode-images", "2"]) == 0
    return json.loads(out.read_text())


def _set(col, value, every=False):
    def edit(doc):
        table, key = col.split(".")
        cells = doc["rows"][table][key]
        for i in range(len(cells) if every else 1):
            cells[i] = value

    return edit


@pytest.mark.parametrize(
    "edit, expect",
    [
        (_set("samples.first_image", 10**6), "first_image"),  # IndexError
        (_set("images.width", [1, 2]), "width"),  # TypeError
        (_set("images.bytes", float("nan")), "bytes"),  # "cannot convert float NaN to integer", no file named
        (_set("images.width", 2.5), "width"),
        (_set("images.quality", 1000), "quality"),
        (_set("samples.answer_tokens", 10**8, every=True), "answer_tokens"),  # ran out of memory
        (_set("images.width", 60000, every=True), "pixels"),  # a 3.6-gigapixel render: out of memory
        (_set("images.bytes", 10**12), "bytes"),
    ],
)
def test_synth_refuses_a_profile_whose_rows_lie(edit, expect, profile_doc, tmp_path, capsys):
    doc = json.loads(json.dumps(profile_doc))
    edit(doc)
    path = tmp_path / "lying.json"
    path.write_text(json.dumps(doc))
    assert main(["synth", "--profile", str(path), "-n", "2", "-o", str(tmp_path / "o"), "-q", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and expect in err and len(err.strip().splitlines()) == 1


def test_compare_refuses_a_profile_whose_rows_lie(profile_doc, tmp_path, capsys):
    doc = json.loads(json.dumps(profile_doc))
    _set("images.width", [1, 2])(doc)
    (tmp_path / "a.json").write_text(json.dumps(profile_doc))
    (tmp_path / "b.json").write_text(json.dumps(doc))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-q"]) == 2
    assert "b.json: rows.images.width[0]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [
        ["--mock", "imagefree", "--answer-tokens", "100000000"],
        ["--mock", "imagefree", "--prompt-tokens", "100000000"],
        ["--mock", "bridge-noise", "--num-images", "1000000"],
    ],
)
def test_synth_mock_sizes_are_bounded(flags, tmp_path, capsys):
    assert main(["synth", *flags, "-n", "2", "-o", str(tmp_path / "o"), "-q", "--workers", "1"]) == 2
    assert "must be at most" in capsys.readouterr().err


# ----------------------------------------------------------------------------- wrong verdicts: shards from another tool


def test_validate_fails_a_shard_of_links_and_fifos(tmp_path, capsys):
    import tarfile

    path = tmp_path / "links.tar"
    with tarfile.open(path, "w") as t:
        for name, typ, target in [
            ("s0.jpg", tarfile.SYMTYPE, "/dev/zero"),
            ("s0.json", tarfile.LNKTYPE, "/etc/passwd"),
            ("d0", tarfile.DIRTYPE, ""),
            ("f0", tarfile.FIFOTYPE, ""),
        ]:
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = typ, target
            t.addfile(ti)
    assert main(["validate", str(path), "-q"]) == 1  # was "OK: 1 shards, 0 samples", exit 0
    err = capsys.readouterr().err
    assert "s0.jpg" in err and "symbolic link" in err and "hard link" in err and "FIFO" in err and "d0" not in err


@pytest.mark.parametrize("key", ["k" * 150, "é" * 60])
def test_the_loader_reads_a_pax_named_sample_that_validate_passes(key, tmp_path, capsys):
    import io
    import tarfile

    src = tarfile.open(vlmdata.sample_data_path() + "/shard-000000.tar")
    meta = json.loads(src.extractfile("s000000000.json").read())
    meta["key"] = key
    parts = {"json": json.dumps(meta).encode(), "0.jpg": src.extractfile("s000000000.0.jpg").read()}
    path = tmp_path / "pax.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:  # another tool's long or non-ASCII names
        for ext, data in parts.items():
            ti = tarfile.TarInfo(f"{key}.{ext}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    assert main(["validate", str(path), "-q"]) == 0
    loader = vlmdata.make_loader(str(path), micro_batch_size=1, num_epochs=1)
    assert sum(1 for _ in loader) == 1  # was 0: skipped as corrupt_tar + duplicate_key (the scan ignored pax paths)


@pytest.mark.parametrize("where", ["foreign", "dataset", "source", "parent", "inside"])
def test_staging_never_deletes_a_folder_vlmdata_did_not_make(where, ds, tmp_path, capsys):
    from PIL import Image

    src = tmp_path / "parent" / "src"
    src.mkdir(parents=True)
    Image.new("RGB", (64, 48), (30, 60, 90)).save(src / "img0.jpg")
    (src / "img0.txt").write_text("a caption")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    staging = {"foreign": foreign, "dataset": ds, "source": src, "parent": src.parent, "inside": src / "stage"}[where]
    before = sorted(p.name for p in staging.iterdir()) if staging.exists() else None
    out = f"memory://round3/{where}"
    assert main(["build", str(src), "-o", out, "--staging", str(staging), "-q"]) == 2  # deleted the folder, exit 0
    assert "staging folder" in capsys.readouterr().err
    assert (sorted(p.name for p in staging.iterdir()) if staging.exists() else None) == before
    assert (src / "img0.txt").read_text() == "a caption"


# ----------------------------------------------------------------------------- tracebacks: seeds, repeats


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "DS", "-o", "OUT/p.json", "--seed", "-1"],
        ["profile", "DS", "-o", "OUT/p.json", "--decode-repeats", "100000000"],
        ["synth", "--mock", "bridge-noise", "-n", "2", "-o", "OUT/s", "--seed", "-1"],
    ],
)
def test_negative_seeds_and_endless_repeats_are_one_line(argv, ds, tmp_path, capsys):
    argv = [a.replace("DS", str(ds)).replace("OUT", str(tmp_path)) for a in argv]
    assert main([*argv, "-q"]) == 2  # profile --seed -1: numpy's ValueError traceback
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("--seed must be >= 0" in err or "--decode-repeats must be at most" in err)


def test_profile_options_refuse_a_negative_seed():
    from vlmdata.profile.options import ProfileOptions

    with pytest.raises(VlmdataError, match="seed"):
        ProfileOptions(seed=-1)


def test_load_hf_refuses_a_split_name_too_long_for_the_cache():
    pytest.importorskip("datasets")
    with pytest.raises(VlmdataError, match="split"):  # was datasets' DatasetGenerationError (file name too long)
        vlmdata.load_hf(vlmdata.sample_data_path(), split="x" * 300)


# ----------------------------------------------------------------------------- hangs: a manifest that lies about counts


@pytest.mark.parametrize("nbytes", [None, 10**15])
def test_a_manifest_claiming_billions_of_samples_is_one_line(nbytes, ds, capsys):
    m = json.loads((ds / "manifest.json").read_text())
    e = m["shards"][0]
    e["samples"], e["key_runs"] = 10**10, [["s000000000", 10**10]]  # validate and the loader expanded 10**10 keys
    if nbytes:
        e["bytes"] = nbytes
    m["totals"]["samples"] = sum(s["samples"] for s in m["shards"])
    (ds / "manifest.json").write_text(json.dumps(m))
    for cmd in ("validate", "inspect"):
        assert main([cmd, str(ds), "-q"]) == 2
        assert "samples" in capsys.readouterr().err
    with pytest.raises(VlmdataError, match="samples"):
        vlmdata.make_loader(str(ds))


def test_build_max_count_is_bounded_by_what_a_manifest_may_hold(tmp_path):
    from vlmdata import BuildOptions

    with pytest.raises(VlmdataError, match="max_count"):
        BuildOptions(max_count=10**9)


def test_an_output_name_too_long_fails_before_any_work(ds, tmp_path, capsys):
    out = tmp_path / ("a" * 300 + ".json")
    assert main(["profile", str(ds), "-o", str(out), "-q"]) == 2
    assert "cannot write there (File name too long)" in capsys.readouterr().err  # was after the whole profile


# ----------------------------------------------------------------------------- the API: Path objects


@pytest.mark.parametrize("field", ["image_root", "image_column", "text_column"])
def test_build_options_take_a_path_only_where_a_path_belongs(field, tmp_path):
    import pathlib

    from vlmdata import BuildOptions

    src = tmp_path / "src"
    src.mkdir()
    from PIL import Image

    Image.new("RGB", (48, 32)).save(src / "0.jpg")
    (src / "0.txt").write_text("c")
    try:  # was a TypeError ('PosixPath' is not iterable / not JSON serializable)
        vlmdata.build(str(src), str(tmp_path / "out"), BuildOptions(**{field: pathlib.Path("/nonexistent")}))
    except VlmdataError:
        pass


@pytest.mark.parametrize("field, value", [("head_dim", 0), ("num_key_value_heads", 0), ("num_key_value_heads", 5)])
def test_a_model_config_with_a_zero_head_dim_is_one_line(field, value, tmp_path):
    import os

    from vlmdata.audit.settings.model_config import ModelConfigError, read_model_config

    fixtures = os.path.join(os.path.dirname(os.path.dirname(__file__)), "audit", "fixtures")
    doc = json.loads(open(os.path.join(fixtures, "hf_qwen3_vl_8b.json")).read())
    doc["text_config"][field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelConfigError, match=field):  # head_dim 0: ZeroDivisionError when the model was made
        read_model_config(str(path))


# ----------------------------------------------------------------------------- a dataset's text on the terminal


def test_inspect_never_passes_a_manifests_escapes_or_markup_to_the_terminal(ds, capsys):
    m = json.loads((ds / "manifest.json").read_text())
    acc = m["accounting"]
    acc["skipped_samples"][0]["detail"] = "\x1b[2J\x1b]0;pwn\x07 cleared"  # clears the screen, sets the title
    acc["skipped_by_reason"]["[link=http://evil]x[/link]"] = 0
    (ds / "manifest.json").write_text(json.dumps(m))
    main(["inspect", str(ds), "-q"])
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "\x07" not in out and "\\x1b[2J" in out
    assert "[link=http://evil]x[/link]" in out  # shown as text, not made a link


# ----------------------------------------------------------------------------- silent loss: a lying loader state


@pytest.mark.parametrize(
    "consumed", [{"prefix": 10**18, "extra": []}, {"prefix": 1, "extra": [10**12]}, {"prefix": 1, "extra": [-5]}]
)
def test_a_loader_state_past_the_epoch_is_refused(consumed):
    from vlmdata.loaders.loader import LoaderStateError

    loader = vlmdata.make_loader(vlmdata.sample_data_path(), micro_batch_size=1)
    state = {**loader.state_dict(), "consumed": consumed}
    with pytest.raises(LoaderStateError, match="outside"):  # resumed as a finished epoch: nothing yielded, silently
        loader.load_state_dict(state)


# ----------------------------------------------------------------------------- options that do not apply


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--mock", "imagefree", "--image-size", "64x64"], "--image-size does not apply to --mock imagefree"),
        (["--mock", "bridge-noise", "--answer-tokens", "5"], "--answer-tokens does not apply to --mock bridge-noise"),
        (["--mock", "bridge-noise", "--variants", "3"], "--variants does not apply to --mock bridge-noise"),
        (["--mock", "bridge-noise", "--image-size", "13000x13000"], "would hold 472.2 GiB of pixels in memory"),
    ],
)
def test_synth_refuses_what_its_source_does_not_take(argv, said, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["synth", *argv, "-n", "2", "-o", str(out), "-q"]) == 2
    assert said in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_synth_profile_refuses_a_mock_flag(small_profile, tmp_path, capsys):
    assert (
        main(["synth", "--profile", small_profile, "--num-images", "3", "-n", "2", "-o", str(tmp_path / "o"), "-q"])
        == 2
    )
    assert "--num-images does not apply to a profile's twin" in capsys.readouterr().err


def test_bridge_noise_base_examples_are_bounded_in_the_api():
    from vlmdata.errors import OptionsError
    from vlmdata.synthetic.bridge_noise import BridgeNoise

    with pytest.raises(OptionsError, match="at most 16 GiB"):
        BridgeNoise(0, image_size=(13000, 13000))
    assert BridgeNoise(0, image_size=(64, 64), num_images=2).sample(0).images  # a small one is made


def test_build_staging_with_a_local_out_is_refused(tmp_path, capsys):
    from PIL import Image

    src = tmp_path / "src"
    src.mkdir()
    Image.new("RGB", (64, 48), (30, 60, 90)).save(src / "img0.jpg")
    (src / "img0.txt").write_text("a caption")
    staging = tmp_path / "stage"
    assert main(["build", str(src), "-o", str(tmp_path / "out"), "--staging", str(staging), "-q"]) == 2
    assert "--staging applies to a remote" in capsys.readouterr().err
    assert not staging.exists() and not (tmp_path / "out").exists()
