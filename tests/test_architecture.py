"""The layout is the data flow: imports point down the layers of docs/architecture.md only, and the
package's modules import each other without cycles.

Layers, lowest first (a module may import its own component and any lower layer, nothing else):

    errors | describe -> registry | qwen -> storage | options_util -> dataset -> sources | interop -> ingest | profile
    -> synthetic -> loaders -> audit | baselines -> benchmarks -> cli

Components on one layer (``ingest`` and ``profile``, ...) do not import each other. Every import counts,
function-level ones included (they are still dependencies); the cycle check covers module-level imports
(the ones that run at import time).
"""

from __future__ import annotations

import ast
import functools
import os

import vlmdata

PKG = os.path.dirname(vlmdata.__file__)

LAYERS = [
    ("errors", "describe"),  # describe: the one describe() protocol (typing only)
    ("registry", "qwen"),
    ("storage", "options_util"),
    ("dataset",),
    ("sources", "interop"),
    ("ingest", "profile"),
    ("synthetic",),
    ("loaders",),
    ("audit", "baselines"),
    ("benchmarks",),
    ("cli",),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# compatibility modules at the top of the package (old import paths that keep working); they sit on the
# layer of what they re-export
SHIMS = {"energon_sample": "interop", "hf": "interop", "validate": "dataset", "build": "ingest"}


@functools.cache
def _modules() -> dict[str, str]:
    out = {}
    for root, _dirs, files in os.walk(PKG):
        if "sample_shards" in root:
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _component(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "vlmdata":
        return None
    top = parts[1]
    return SHIMS.get(top, top)


def _imports(module: str, path: str, top_level_only: bool) -> set[str]:
    modules = set(_modules())
    tree = ast.parse(open(path, encoding="utf-8").read())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("vlmdata")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not path.endswith("__init__.py"):
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("vlmdata"):
                subs = {f"{name}.{a.name}" for a in node.names}
                found |= subs if subs <= modules else subs | {name}  # `from pkg import submodule` -> the submodule
    return found


def test_every_module_is_in_a_layer():
    unplaced = sorted(m for m in _modules() if m != "vlmdata" and _component(m) not in RANK and m != "vlmdata.__main__")
    assert unplaced == [], f"modules outside every layer of docs/architecture.md: {unplaced}"


def test_imports_point_down_only():
    modules = _modules()
    bad = []
    for mod, path in sorted(modules.items()):
        src = _component(mod)
        if src is None or src not in RANK:
            continue
        for target in _imports(mod, path, top_level_only=False):
            if target not in modules:
                continue  # a name imported from a module (from vlmdata.x import name): the module counts
            dst = _component(target)
            if dst is None or dst == src or dst not in RANK:
                continue
            if RANK[dst] >= RANK[src]:
                bad.append(f"{mod} ({src}) imports {target} ({dst})")
    assert bad == [], "imports that point up or sideways:\n" + "\n".join(bad)


def test_no_import_cycles():
    modules = _modules()
    graph = {m: {t for t in _imports(m, p, top_level_only=True) if t in modules and t != m} for m, p in modules.items()}
    # a package's __init__ importing its own submodules is how a package re-exports: not a cycle edge back
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], [0]

    def strongconnect(v):  # Tarjan
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert cycles == [], f"import cycles: {cycles}"


def test_public_api_and_old_paths():
    import vlmdata.energon_sample  # noqa: F401  (the path every .nv-meta/dataset.yaml names)
    from vlmdata import BuildOptions, LoaderOptions, VlmdataError, build, load_hf, make_loader, profile_dataset
    from vlmdata.build import build as build_old_path
    from vlmdata.hf import load_hf as load_hf_old_path
    from vlmdata.profile import profile_dataset as profile_old_path
    from vlmdata.validate import validate as validate_old_path

    assert load_hf is load_hf_old_path and profile_dataset is profile_old_path
    # `vlmdata.build` / `vlmdata.validate` are also (sub)modules: importing them makes the module the
    # package attribute, so the modules are callable and forward to the functions
    assert callable(build) and callable(vlmdata.build) and build_old_path.__name__ == "build"
    assert callable(vlmdata.validate) and validate_old_path.__name__ == "validate"
    import vlmdata.build as build_module

    assert build_module.BuildOptions is BuildOptions
    assert set(vlmdata.__all__) >= {
        "build",
        "BuildOptions",
        "validate",
        "profile_dataset",
        "make_loader",
        "LoaderOptions",
        "load_hf",
        "VlmdataError",
        "sample_data_path",
    }
    assert callable(make_loader) and BuildOptions and LoaderOptions and issubclass(VlmdataError, Exception)


def test_every_user_facing_error_derives_from_vlmdata_error():
    from vlmdata.audit.logs import LogError
    from vlmdata.audit.sources.registry import AuditError
    from vlmdata.benchmarks.timing import BenchmarkError
    from vlmdata.cli.console import UserError
    from vlmdata.dataset.manifest import ManifestError
    from vlmdata.dataset.nvmeta_index import EnergonIndexError
    from vlmdata.dataset.reader import BadSampleError
    from vlmdata.errors import OptionsError, VlmdataError
    from vlmdata.ingest.engines import EngineError
    from vlmdata.ingest.options import BuildError
    from vlmdata.loaders.pipeline import EmptyEpochError
    from vlmdata.profile.measure import ProfileError
    from vlmdata.sources.base import SourceError
    from vlmdata.storage import StorageError

    for cls in (
        AuditError,
        LogError,
        BuildError,
        EngineError,
        UserError,
        ManifestError,
        OptionsError,
        BadSampleError,
        EmptyEpochError,
        ProfileError,
        SourceError,
        StorageError,
        BenchmarkError,
        EnergonIndexError,
    ):
        assert issubclass(cls, VlmdataError), cls


def test_function_level_imports_say_why():
    """A vlmdata import inside a function exists only to keep a heavy stack out of a light start-up (or an
    optional dependency out of the default path); its block carries a comment saying so, and there are at
    most 15 of them (docs/architecture.md lists them)."""
    unexplained, found = [], []
    for mod, path in sorted(_modules().items()):
        src = open(path, encoding="utf-8").read()
        lines = src.split("\n")
        tree = ast.parse(src)
        top = {id(n) for n in tree.body}
        for n in tree.body:  # `try: import x` / `if TYPE_CHECKING:` at module level are module level
            if isinstance(n, (ast.If, ast.Try)):
                top |= {id(m) for m in ast.walk(n)}
        for node in ast.walk(tree):
            if id(node) in top or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if not (getattr(node, "level", 0) or (name or "").startswith("vlmdata")):
                continue
            found.append(f"{mod}:{node.lineno}")
            i = node.lineno - 1
            block = [lines[i]]
            while i > 0 and lines[i - 1].strip().startswith(("from ", "import ")):
                i -= 1
                block.append(lines[i])
            block.append(lines[i - 1] if i > 0 else "")
            if not any("#" in line for line in block):
                unexplained.append(f"{mod}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert unexplained == [], "function-level imports without a reason:\n" + "\n".join(unexplained)
    assert 0 < len(found) <= 15, "function-level imports of vlmdata modules:\n" + "\n".join(found)


# the audit wing's own floors, lowest first (vlmdata/audit/__init__.py): a sub-package imports its own modules and
# lower floors only; the package's __init__ (the old-path finder) imports none of them
AUDIT_LAYERS = ["sources", "settings", "workload", "planning", "analysis", "logs", "report", "phases"]
AUDIT_RANK = {name: i for i, name in enumerate(AUDIT_LAYERS)}


def _audit_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["vlmdata", "audit"] else None


def test_the_audit_wing_is_sub_packages_in_floors():
    modules = _modules()
    flat = sorted(m for m in modules if m.startswith("vlmdata.audit.") and m.count(".") == 2)
    assert set(flat) <= {f"vlmdata.audit.{p}" for p in AUDIT_LAYERS}, f"modules outside the audit's floors: {flat}"
    bad = []
    for mod, path in sorted(modules.items()):
        src = _audit_part(mod)
        if src is None:
            continue
        for target in _imports(mod, path, top_level_only=False):
            dst = _audit_part(target) if target in modules else None
            if dst is None or dst == src:
                continue
            if AUDIT_RANK[dst] >= AUDIT_RANK[src]:
                bad.append(f"{mod} ({src}) imports {target} ({dst})")
    assert bad == [], "audit imports that point up or sideways:\n" + "\n".join(bad)


def test_the_audit_modules_old_paths_are_the_new_modules():
    import importlib

    from vlmdata.audit import MOVED

    for old, new in MOVED.items():
        assert importlib.import_module(f"vlmdata.audit.{old}") is importlib.import_module(f"vlmdata.audit.{new}"), old
    from vlmdata.audit.runner import run_audit
    from vlmdata.audit.settings.config import AuditConfig

    assert run_audit.__module__ == "vlmdata.audit.phases.runner" and AuditConfig.__module__.endswith("settings.config")
