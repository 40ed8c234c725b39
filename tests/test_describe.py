"""The one ``describe`` protocol (vlmdata.describe): every ``describe`` a class of the package defines takes ``self``
only, and real instances' descriptions are what the protocol says (a dict that round-trips through JSON)."""

from __future__ import annotations

import ast
import json
import os
from types import SimpleNamespace

import pytest

import vlmdata
from vlmdata.audit.analysis.compose import Composition
from vlmdata.audit.phases.warmup import Warmup
from vlmdata.audit.planning.resolve import resolve
from vlmdata.audit.settings.config import AuditConfig
from vlmdata.audit.settings.model_config import read_model_config
from vlmdata.audit.settings.run_spec import RunSpec
from vlmdata.audit.workload.collector import Collector
from vlmdata.describe import Describable

PKG = os.path.dirname(vlmdata.__file__)
FIX = "tests/audit/fixtures"


def _describe_methods() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(module:Class, node) of every ``describe`` defined in a class body of the package."""
    found = []
    for root, _dirs, files in os.walk(PKG):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(root, f)
            tree = ast.parse(open(path, encoding="utf-8").read())
            for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
                for node in cls.body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "describe":
                        found.append((f"{os.path.relpath(path, PKG)}:{cls.name}", node))
    return found


def test_every_describe_takes_self_only():
    methods = _describe_methods()
    assert len(methods) >= 15, [m for m, _ in methods]  # the walk found the package's classes
    bad = []
    for where, node in methods:
        a = node.args
        if [x.arg for x in a.posonlyargs + a.args] != ["self"] or a.vararg or a.kwarg or a.kwonlyargs:
            bad.append(f"{where} line {node.lineno}: {ast.unparse(a)}")
    assert bad == [], "describe() must take self only (vlmdata.describe):\n" + "\n".join(bad)


def _fake_run(warmup: int = 3) -> SimpleNamespace:
    return SimpleNamespace(plan=SimpleNamespace(warmup=warmup))


def _instances() -> list:
    warm = Warmup(_fake_run(), {})
    warm.loader_seconds = 1.5
    return [
        RunSpec(ep=8, global_batch_size=32, sources={"ep": "flag"}),
        read_model_config(f"{FIX}/hf_qwen3_vl_30b_a3b.json"),
        resolve(AuditConfig(model_config=f"{FIX}/hf_qwen3_vl_30b_a3b.json")),  # run, model, estimate nested
        Composition(4, 2, 0.5),
        Collector(manual=True, interval=10),
        warm,
    ]


@pytest.mark.parametrize("obj", _instances(), ids=lambda o: type(o).__name__)
def test_real_descriptions_round_trip_through_json(obj):
    assert isinstance(obj, Describable)
    d = obj.describe()
    assert isinstance(d, dict) and all(isinstance(k, str) for k in d)
    assert json.loads(json.dumps(d, allow_nan=False)) == d  # JSON types only: no tuples, no numpy scalars
    assert obj.describe() == d  # describing changes nothing


def test_the_warmup_describes_its_loaders_seconds_without_arguments():
    warm = Warmup(_fake_run(warmup=2), {})
    assert warm.describe()["loader_seconds"] == 0.0 and warm.describe()["loader_steps_per_source"] == 2
    warm.loader_seconds = 0.25
    assert warm.describe()["loader_seconds"] == 0.25


def test_an_object_without_describe_is_not_describable():
    assert not isinstance(object(), Describable)
