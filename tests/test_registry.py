"""vlmdata.registry: the one Registry of every family (names in order, the family's error for an unknown name, a
live view of another family), usable as argparse choices; load and lazy_exports."""

import argparse

import pytest

from vlmdata.errors import OptionsError, VlmdataError
from vlmdata.registry import Registry, lazy_exports, load


class FamilyError(VlmdataError):
    pass


def test_register_look_up_and_order():
    r: Registry[int] = Registry("colour", "colour", FamilyError)
    r.register("red", 1)
    r.register("blue", 2)
    assert list(r) == ["red", "blue"] and len(r) == 2 and "red" in r and "green" not in r and 3 not in r
    assert r["blue"] == 2 and r.get("green") is None and r.names(lambda e: e > 1) == ("blue",)
    with pytest.raises(FamilyError, match=r"`colour`: unknown colour 'green' \(choose from red, blue\)"):
        r["green"]
    with pytest.raises(OptionsError, match="registered already"):
        r.register("red", 3)
    r.register("red", 3, replace=True)
    assert r["red"] == 3
    for bad in ("", " red", "a,b", None):
        with pytest.raises(OptionsError):
            r.register(bad, 0)  # type: ignore[arg-type]
    r.unregister("red")
    assert list(r) == ["blue"]


def test_derived_entries_are_read_at_every_look_up():
    base: Registry[str] = Registry("mock", "source")
    view: Registry[str] = Registry("source", "sources", derived=lambda: ((n, f"via {n}") for n in base))
    view.register("real", "own")
    assert list(view) == ["real"]
    base.register("noise", "x")
    assert list(view) == ["real", "noise"] and view["noise"] == "via noise"


def test_a_registry_is_argparse_choices():
    r: Registry[int] = Registry("format", "format")
    r.register("a", 1)
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--format", choices=r)
    r.register("b", 2)  # registered after the parser was made: offered all the same
    assert p.parse_args(["--format", "b"]).format == "b"
    with pytest.raises(argparse.ArgumentError):
        p.parse_args(["--format", "c"])
    assert "{a,b}" in p.format_help()


def test_load_and_lazy_exports():
    assert load("os.path:join") is __import__("os").path.join and load(len) is len
    getattr_ = lazy_exports("pkg", {"join": "os.path"})
    assert getattr_("join") is __import__("os").path.join
    with pytest.raises(AttributeError, match="'pkg' has no attribute 'nope'"):
        getattr_("nope")
