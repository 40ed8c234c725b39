"""The YAML side of ``vlmdata.audit.settings.bridge_config``: the file loaded safely into a mapping (``load_config``) and
dotted-path access to it (``ConfigDoc``): whole-value ``${a.b}`` references resolved within the file, every value
checked against the kind the field needs; every problem a ``BridgeConfigError`` that names the file and the
field's path.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

from vlmdata import storage
from vlmdata.errors import BridgeConfigError

__all__ = ["ConfigDoc", "load_config", "kind_of", "RECOMPUTE_GRANULARITIES", "RECOMPUTE_METHODS"]

RECOMPUTE_GRANULARITIES = ("selective", "full")
RECOMPUTE_METHODS = ("uniform", "block")
_MISSING: Any = object()
_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}$")
_MAX_REF_DEPTH = 16
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: the same safe constructor, ~3x faster


class _Loader(_BASE_LOADER):  # type: ignore[misc,valid-type]
    """The safe loader refusing a mapping's duplicate key, as OmegaConf's loader (Bridge's) does: PyYAML keeps the
    last one silently, so a hand-edited YAML would be read one way here and refused by Bridge."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value}",
                        key_node.start_mark,
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


MAX_INT = 1 << 53  # the largest integer a field takes (each size has its own, smaller bound where it is used)


def load_config(path: str, max_bytes: int, sections: tuple[str, ...]) -> dict:
    """The file's top-level mapping, at most ``max_bytes``, with one of ``sections`` (BridgeConfigError for
    everything that stops it being one)."""
    if not isinstance(path, (str, os.PathLike)):
        raise BridgeConfigError(f"`bridge_config` must be a path to a YAML file, not {type(path).__name__}", "")
    path = os.fspath(path)
    try:
        local = storage.local(path)
    except storage.CredentialsInURL as e:
        raise BridgeConfigError(f"{storage.redact(path)}: {e}", path) from None
    if storage.is_url(local):
        raise BridgeConfigError(f"{storage.redact(path)}: a Bridge config must be a local file", path)
    try:
        data = storage.read_regular(local, max_bytes, "the Bridge config")
    except FileNotFoundError:
        raise BridgeConfigError(f"{path}: no such file", path) from None
    except (storage.NotRegularFile, storage.FileTooLarge) as e:
        raise BridgeConfigError(f"{path}: {e.strerror}", path) from None
    except OSError as e:
        raise BridgeConfigError(f"{path}: cannot be read ({e.strerror or e})", path) from None
    try:
        root = yaml.load(data, Loader=_Loader)  # noqa: S506 - a safe loader (no Python tags), in C when available
    except yaml.YAMLError as e:
        if "nesting depth" in str(e):  # libyaml's own depth limit
            raise BridgeConfigError(f"{path}: not usable as YAML (nested too deeply)", path) from None
        raise BridgeConfigError(f"{path}: not valid YAML ({_yaml_problem(e)})", path) from None
    except RecursionError:
        raise BridgeConfigError(f"{path}: not usable as YAML (nested too deeply)", path) from None
    except ValueError as e:  # an integer of 4,300+ digits (Python's int() limit), anywhere in the file
        raise BridgeConfigError(f"{path}: not usable as YAML ({str(e)[:120]})", path) from None
    if not isinstance(root, dict):
        raise BridgeConfigError(
            f"{path}: not a Megatron Bridge config (the YAML document is {kind_of(root)}, not a mapping)", path
        )
    if not any(s in root for s in sections) and "data_parallel_size" not in root:
        raise BridgeConfigError(
            f"{path}: not a Megatron Bridge config (none of the sections {', '.join(sections)} is present)", path
        )
    return root


def _yaml_problem(e: yaml.YAMLError) -> str:
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem}, line {mark.line + 1} column {mark.column + 1}"
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def kind_of(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


class ConfigDoc:
    """Dotted-path access to the loaded YAML, with whole-value ``${a.b}`` references resolved and values checked."""

    def __init__(self, path: str, root: dict):
        self.path = path
        self.root = root

    def error(self, where: str, problem: str) -> BridgeConfigError:
        return BridgeConfigError(f"{self.path}: {where} {problem}", self.path, where)

    def get(self, dotted: str) -> Any:
        """The value at ``dotted`` (``_MISSING`` when a key on the way is absent)."""
        return self._get(dotted, set())

    def _get(self, dotted: str, seen: set[str]) -> Any:
        node: Any = self.root
        walked: list[str] = []
        for key in dotted.split("."):
            if not isinstance(node, dict):
                if node is None:
                    return _MISSING  # a null section (``comm_overlap: null``) holds nothing
                raise self.error(".".join(walked), f"is {kind_of(node)}, not a mapping")
            if key not in node:
                return _MISSING
            walked.append(key)
            node = self._resolve(".".join(walked), node[key], seen)
        return node

    def _resolve(self, where: str, value: Any, seen: set[str]) -> Any:
        if not isinstance(value, str) or "${" not in value:
            return value
        ref = _REF.match(value)
        if ref is None:
            raise self.error(
                where,
                f"is the OmegaConf interpolation {value[:80]!r}; only a whole-value reference to another key of the "
                "file (${section.key}) is resolved",
            )
        target = ref.group(1)
        if target in seen or len(seen) >= _MAX_REF_DEPTH:
            raise self.error(where, f"is a circular or too deep reference ({value!r})")
        resolved = self._get(target, seen | {target})
        if resolved is _MISSING:
            raise self.error(where, f"refers to {target}, which the file does not have")
        return resolved

    def first(self, paths: tuple[str, ...], kind: str) -> tuple[Any, str | None]:
        """The checked value of the first of ``paths`` present, and that path (``(None, None)`` when none is)."""
        for dotted in paths:
            value = self.get(dotted)
            if value is not _MISSING:
                return self.check(dotted, value, kind), dotted
        return None, None

    def check(self, where: str, value: Any, kind: str) -> Any:
        if value is None:
            return None
        if kind in ("int", "int0"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(where, f"must be an integer, not {kind_of(value)}")
            low = 0 if kind == "int0" else 1
            if value < low:
                raise self.error(where, f"must be at least {low}, not {value}")
            if value > MAX_INT:
                raise self.error(where, f"must be at most {MAX_INT}, not an integer of {len(str(value))} digits")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.error(where, f"must be true or false, not {kind_of(value)}")
            return value
        if kind == "str":
            if not isinstance(value, str):
                raise self.error(where, f"must be a string, not {kind_of(value)}")
            return value
        if kind == "int_list":
            if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
                raise self.error(where, f"must be a list of integers, not {kind_of(value)}")
            return list(value)
        if kind == "str_list":
            if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
                raise self.error(where, f"must be a list of strings, not {kind_of(value)}")
            return list(value)
        if kind == "str_or_list":  # a string or a list of strings, kept as a comma-joined string
            if isinstance(value, str):
                return value
            return ",".join(self.check(where, value, "str_list"))
        if kind == "recompute":
            return self._choice(where, value, RECOMPUTE_GRANULARITIES)
        if kind == "recompute_method":
            return self._choice(where, value, RECOMPUTE_METHODS)
        raise AssertionError(kind)

    def _choice(self, where: str, value: Any, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            names = " | ".join(repr(a) for a in allowed)
            raise self.error(where, f"must be null or one of {names}, not {kind_of(value)}")
        return value
