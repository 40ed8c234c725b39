"""Every public function (``vlmdata.__all__`` and the documented loader/build/validate/profile/HF entry points)
called with wrong types, missing paths and bad values, one argument at a time: each call either works or
raises a ``VlmdataError`` subclass (issue 20: the API never answers a user's input with a TypeError,
AttributeError, jinja2 or ``datasets`` error)."""

import logging
import math

import pytest
from PIL import Image

import vlmdata
from vlmdata import BuildOptions, LoaderOptions, VlmdataError
from vlmdata.loaders.loader import VlmLoader
from vlmdata.loaders.options import names as loader_option_names

HOSTILE = [
    None,
    123,
    -1,
    3.5,
    math.nan,
    "",
    "/proc/vlmdata-missing/x",
    b"bytes",
    [],
    {},
    object(),
    True,
    "../../vlmdata-missing-dir",
]
D = vlmdata.sample_data_path()


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    for i in range(2):
        Image.new("RGB", (48, 32), (i * 50, 60, 90)).save(d / f"{i}.jpg", "JPEG")
        (d / f"{i}.txt").write_text(f"caption {i}")
    return str(d)


@pytest.fixture(scope="module")
def tok():
    from vlmdata.qwen.spec import load_qwen_tokenizer

    return load_qwen_tokenizer()


def attempt(fn, *args, **kwargs):
    """Call ``fn``; a returned loader is iterated to its first batch (errors there count too)."""
    logging.disable(logging.WARNING)
    try:
        out = fn(*args, **kwargs)
        if isinstance(out, VlmLoader):
            next(iter(out), None)
        return out
    except VlmdataError:
        return None
    finally:
        logging.disable(logging.NOTSET)


def test_public_names_are_covered():
    assert set(vlmdata.__all__) == {
        "BuildOptions",
        "LoaderOptions",
        "VlmdataError",
        "__version__",
        "build",
        "load_hf",
        "make_loader",
        "profile_dataset",
        "sample_data_path",
        "validate",
    }


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("param", ["source", "options", "tokenizer"])
def test_make_loader_arguments(param, value, tok):
    kwargs = {"source": D, "options": None, "tokenizer": tok, param: value}
    attempt(vlmdata.make_loader, kwargs.pop("source"), kwargs.pop("options"), **kwargs)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("field", loader_option_names())
def test_loader_options_fields(field, value):
    attempt(LoaderOptions, **{field: value})


@pytest.mark.parametrize("value", HOSTILE[:8], ids=repr)
@pytest.mark.parametrize("field", ["seq_length", "micro_batch_size", "chat_template", "images", "on_error"])
def test_make_loader_changes_reach_the_first_batch(field, value, tok):
    attempt(vlmdata.make_loader, D, tokenizer=tok, **{field: value})


def test_loader_state(tok):
    ld = vlmdata.make_loader(D, tokenizer=tok)
    good = ld.state_dict()
    for bad in (*HOSTILE, {**good, "epoch": "x"}, {**good, "consumed": {"prefix": "x"}}, {**good, "consumed": []}):
        attempt(ld.load_state_dict, bad)
    ld.load_state_dict(good)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize(
    "param", ["source", "out", "opts", "resume", "overwrite", "progress", "energon", "energon_target", "engine"]
)
def test_build_arguments(param, value, src, tmp_path):
    kwargs = {"source": src, "out": str(tmp_path / "out"), param: value}
    attempt(vlmdata.build, **kwargs)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize(
    "field", ["prefix", "max_count", "max_size", "max_pixels", "verify", "format", "prompt", "workers"]
)
def test_build_options_fields(field, value, src, tmp_path):
    attempt(lambda: vlmdata.build(src, str(tmp_path / "out"), BuildOptions(**{field: value})))  # validates itself


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("param", ["root", "progress", "decode", "energon"])
def test_validate_arguments(param, value):
    attempt(vlmdata.validate, **{"root": D, param: value})


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("param", ["path", "opts", "progress"])
def test_profile_arguments(param, value):
    from vlmdata.profile.measure import ProfileOptions

    kwargs = {"path": D, "opts": ProfileOptions(decode_images=0), param: value}
    attempt(vlmdata.profile_dataset, kwargs.pop("path"), kwargs.pop("opts"), **kwargs)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("param", ["root", "split"])
def test_load_hf_arguments(param, value):
    pytest.importorskip("datasets")
    attempt(vlmdata.load_hf, **{"root": D, "split": "train", param: value})
