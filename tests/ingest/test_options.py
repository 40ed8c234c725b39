"""``BuildOptions`` / ``ShardSpec``: frozen, validated on construction (``BuildOptionsError``: an OptionsError and a
BuildError, naming the parameter), ``replace``; the CLI's defaults are the library's."""

import dataclasses

import pytest

from vlmdata.cli.main import parser
from vlmdata.dataset.nvmeta import TARGETS
from vlmdata.errors import OptionsError
from vlmdata.ingest import BuildError, BuildOptions, BuildOptionsError, ShardSpec
from vlmdata.ingest.engines import DEFAULT_ENGINE
from vlmdata.ingest.options import DEFAULT_ENERGON_TARGET, ENERGON_TARGETS, names


@pytest.mark.parametrize(
    "change, message",
    [
        ({"max_count": 0}, "`max_count` must be an integer >= 1, got 0"),
        ({"max_count": "5"}, "`max_count` must be an integer >= 1"),
        ({"max_size": 100}, "`max_size` must be an integer >= 4096"),
        ({"workers": True}, "`workers` must be an integer >= 1"),
        ({"max_image_pixels": 0}, "`max_image_pixels`"),
        ({"verify": "fast"}, "`verify` must be one of 'header', 'full'"),
        ({"prefix": "../x"}, "`prefix`"),
        ({"fsync": "yes"}, "`fsync` must be True or False"),
        ({"format": 3}, "`format` must be a string or None"),
        ({"prompt": "<|im_end|>"}, "`prompt` must be plain text"),
    ],
)
def test_bad_values_name_the_parameter(change, message):
    with pytest.raises(BuildOptionsError, match=message.replace("(", r"\(").replace("|", r"\|")) as e:
        BuildOptions(**change)
    assert isinstance(e.value, OptionsError) and isinstance(e.value, BuildError)
    with pytest.raises(BuildOptionsError):
        BuildOptions().replace(**change)


def test_frozen_replace_and_fingerprint():
    o = BuildOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.max_count = 3  # type: ignore[misc]
    assert o.replace(max_count=3).max_count == 3 and o.replace() is o
    with pytest.raises(BuildOptionsError, match="unknown build option 'max_cont' \\(did you mean 'max_count'\\?\\)"):
        o.replace(max_cont=3)
    assert set(o.fingerprint()) == set(names()) - {"workers", "fsync"}
    assert o.shards == ShardSpec("shard", 1000, 512 * 1024 * 1024)
    with pytest.raises(BuildOptionsError, match="max_size"):
        ShardSpec("shard", 10, 10)
    assert ShardSpec("p", 2, None).planner().prefix == "p"


def test_cli_defaults_are_the_options_defaults():
    argv = ["build", "src", "-o", "out"]
    args = parser(argv).parse_args(argv)
    d = BuildOptions()
    for name in ("prefix", "max_count", "max_image_pixels", "verify", "prompt", "workers", "format", "image_root"):
        assert getattr(args, name) == getattr(d, name), name
    assert (args.max_size or None) == d.max_size and args.fsync == d.fsync
    assert args.allow_outside_root == d.allow_outside_root
    assert args.engine == DEFAULT_ENGINE and args.energon_target == DEFAULT_ENERGON_TARGET


def test_energon_targets_are_the_index_writers():
    assert set(ENERGON_TARGETS) == set(TARGETS) and DEFAULT_ENERGON_TARGET in ENERGON_TARGETS
