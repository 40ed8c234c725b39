"""The settings table (``vlmdata.audit.settings.fields``) is the one place a setting is named: the CLI, the Bridge
YAML reader, ``resolve``, ``audit compare`` and the report derive from it, and it covers what each of them uses."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import glob
import os

import pytest
import yaml

from vlmdata.audit.logs.settings import MEANING, SETTING_KEYS
from vlmdata.audit.planning.resolve import BRIDGE_RUN_FIELDS
from vlmdata.audit.report.run_tables import RUN_ROWS
from vlmdata.audit.settings import fields
from vlmdata.audit.settings.bridge_config import BridgeRun, read_bridge_config
from vlmdata.audit.settings.bridge_run import BRIDGE_NAMES
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.fields import COMPARED, FIELDS, SECTIONS, SETTINGS, Setting, help_text
from vlmdata.cli.args import PARAM_FLAGS
from vlmdata.cli.audit_help import HELP
from vlmdata.cli.commands.audit import GIVEN, add_parser, config_from

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
CONFIG_FIELDS = {f.name for f in dataclasses.fields(AuditConfig)}
# BridgeRun fields that are not settings: the file, what was read from where, and Bridge's own detail tables
BRIDGE_DETAIL = {"path", "sources", "recompute_detail", "packing", "packing_detail", "model_target", "model_fields"}


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="vlmdata")
    return add_parser(top.add_subparsers(dest="command"))


def _actions() -> dict[str, argparse.Action]:
    return {o: a for a in _parser()._actions for o in a.option_strings}


def test_table_is_well_formed():
    assert len(FIELDS) == len(SETTINGS)  # names are unique
    for s in SETTINGS:
        assert s.section in SECTIONS
        assert (s.name in CONFIG_FIELDS) == s.config, s.name
        assert bool(s.bridge) == (s.bridge_attr is not None) == (s.bridge_kind is not None), s.name
        assert (s.flag is None) == (s.help == ""), s.name
        assert s.flag is None or s.flag.startswith("--"), s.name
        assert (s.dump is None) == (s.meaning is None), s.name
    with pytest.raises(ValueError, match="section"):
        Setting("x", "elsewhere")


def test_every_config_field_the_cli_sets_is_in_the_table():
    flags = [
        *("--real", "r", "--preset", "tiny", "--tp", "2", "--dp", "3", "--freeze-vision-model", "--seq-policy", "max"),
        *("--steps", "4", "--loader-arg", "shuffle=false", "--benchmark-set", "tp=1", "--sources", "real,synthetic"),
        *("--manual-gc-interval", "7", "--threshold", "0.2", "--budget-s", "30", "--warmup", "1"),
    ]
    args = _parser().parse_args(flags)
    given, default = config_from(args).to_dict(), AuditConfig().to_dict()
    set_by_cli = {k for k, v in given.items() if v != default[k]}
    assert {"real", "tp", "seq_policy", "min_steps", "loader_options", "benchmark", "sources"} <= set_by_cli
    set_by_cli |= set(GIVEN)
    for name in set_by_cli | {a.dest for a in _parser()._actions if a.dest in CONFIG_FIELDS}:
        assert name in FIELDS and FIELDS[name].config, name
    assert set(GIVEN) <= {s.name for s in SETTINGS if s.config and s.flag}


def test_every_table_flag_is_in_the_parser_with_the_tables_help():
    actions = _actions()
    for s in SETTINGS:
        if s.flag is None:
            continue
        assert s.flag in actions, s.flag
        action = actions[s.flag]
        assert action.dest == s.dest
        assert s.dest is not None
        if s.name != "sources":  # its {other} is filled in from the source registry
            assert action.help == HELP[s.dest]
    quoted = help_text(FIELDS["sources"], sources="a,b")
    assert quoted.endswith("(default a,b; also: {other}); real is required")


def test_every_bridge_field_the_reader_reads_is_in_the_table():
    attrs = {s.bridge_attr for s in SETTINGS if s.bridge_attr and "." not in s.bridge_attr}
    setting_fields = {f.name for f in dataclasses.fields(BridgeRun)} - BRIDGE_DETAIL - {"execution"}
    assert setting_fields == attrs
    paths = {s.bridge_attr: s.bridge for s in SETTINGS if s.bridge_attr}
    files = glob.glob(os.path.join(FIXTURES, "bridge_*.yaml"))
    assert files
    seen = set()
    for path in files:
        run = read_bridge_config(path)
        for key, where in run.sources.items():
            if key.split(".", 1)[0] in BRIDGE_DETAIL:
                continue
            if key.startswith("execution.") and key not in paths:
                continue  # Bridge's execution policy the audit does not name as a setting
            assert key in paths, key
            assert set(where.split(" | ")) <= set(paths[key]), (key, where)
            seen.add(key)
    assert {"micro_batch_size", "tensor_parallel", "recompute", "dataset_target"} <= seen


def test_the_transformer_layout_and_every_path_of_a_setting_are_read(tmp_path):
    """Every YAML path the table gives a setting is one the reader reads it from."""
    for s in SETTINGS:
        for where in s.bridge:
            if s.name in ("dp", "use_distributed_optimizer", "dataset"):
                continue  # covered by the fixtures and bridge_config's own tests
            *parents, key = where.split(".")
            value = {"bool": True, "recompute": "full", "str": "x"}.get(str(s.bridge_kind), 2)
            doc: dict = {key: value}
            for p in reversed(parents):
                doc = {p: doc}
            doc.setdefault("train", {})
            f = tmp_path / f"{s.name}.yaml"
            f.write_text(yaml.safe_dump(doc))
            run = read_bridge_config(str(f))
            assert run.sources.get(str(s.bridge_attr)) == where, (s.name, where)


def test_readers_derive_from_the_table():
    assert list(SETTING_KEYS) == list(COMPARED)
    for name, (dump, attr) in SETTING_KEYS.items():
        s = FIELDS[name]
        assert dump == s.dump
        assert (".".join(attr) if isinstance(attr, tuple) else attr) == s.bridge_attr
        assert MEANING[name] == s.meaning
    assert set(COMPARED) == {s.name for s in SETTINGS if s.dump}
    assert BRIDGE_RUN_FIELDS == tuple(s.name for s in SETTINGS if s.from_bridge)
    assert BRIDGE_NAMES == {n: FIELDS[n].bridge_attr for n in BRIDGE_RUN_FIELDS if FIELDS[n].bridge_attr != n}
    assert PARAM_FLAGS == {"loader_options": "--loader-arg", "benchmark": "--benchmark-set"}
    labels = dict(RUN_ROWS)
    assert labels["tp"] == "tensor parallel" and labels["freeze_vision_model"] == "freeze_vision_model"
    assert all(labels[k] == (FIELDS[k].label or k) for k in labels if k in FIELDS)


def test_the_table_imports_nothing_of_the_package():
    """Pure data: every layer of the audit may read it, it reads none (no import cycles through it)."""
    tree = ast.parse(open(fields.__file__, encoding="utf-8").read())
    nodes = list(ast.walk(tree))
    imported = [n.module for n in nodes if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in nodes if isinstance(n, ast.Import) for a in n.names]
    assert not any(str(m).startswith("vlmdata") for m in imported), imported


def test_the_benchmark_set_help_lists_exactly_the_benchmark_keys():
    """`--benchmark-set`'s help names its keys by hand (settings/fields.py is pure data): it lists exactly
    ``benchmark.BENCHMARK_KEYS``, each once, so a key added to one and not the other fails here."""
    from vlmdata.audit.settings.benchmark import BENCHMARK_KEYS

    listed = [k.strip().rstrip(".") for k in HELP["benchmark_set"].split("Keys: ", 1)[1].split(", ")]
    assert len(listed) == len(set(listed)) and set(listed) == set(BENCHMARK_KEYS)
