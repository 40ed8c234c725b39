"""Bad inputs an attack corpus found past the earlier hardening (each was a Python traceback, or a figure the step
never produced): a config.json whose vocabulary is smaller than the loaders' tokenizer, whose pad id is outside
it or whose dtype is not a float; --seq-policy pack with a seq_length no sample fits; a report whose real source
ran out of memory; a --step that pops batch keys, yields, is async, or returns an integer past float's range."""

import copy
import json

import pytest

from vlmdata.audit.settings.model_config import ModelConfigError, read_model_config
from vlmdata.audit.sources.registry import AuditError

FIX = "tests/audit/fixtures"
TINY = json.load(open(f"{FIX}/hf_qwen3_vl_4b.json"))


def _config(tmp_path, section: str | None, **changes) -> str:
    d = copy.deepcopy(TINY)
    (d if section is None else d[section]).update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    return str(path)


@pytest.mark.parametrize(
    "section, changes, match",
    [
        (
            "text_config",
            {"vocab_size": 1000},
            "text_config.vocab_size 1000 is smaller than the loaders' Qwen tokenizer",
        ),
        ("text_config", {"vocab_size": 151656}, "whose ids reach 151668"),  # image ids fit, <think> does not
        (
            "text_config",
            {"pad_token_id": 10**9},
            r"text_config.pad_token_id must be an id of the vocabulary \(0..151935",
        ),
        ("text_config", {"pad_token_id": -5}, "text_config.pad_token_id must be an id of the vocabulary"),
        ("text_config", {"dtype": "int8"}, "text_config.dtype must be one of bfloat16, .* not the string 'int8'"),
        ("text_config", {"dtype": "float8_e4m3fn"}, "text_config.dtype must be one of"),
        ("text_config", {"dtype": 5}, "text_config.dtype must be one of .* not the number 5"),
        ("vision_config", {"torch_dtype": "int64"}, "vision_config.torch_dtype must be one of"),
    ],
)
def test_config_json_values_transformers_or_the_embedding_would_crash_on(tmp_path, section, changes, match):
    path = _config(tmp_path, section, **changes)
    with pytest.raises(ModelConfigError, match=match) as e:
        read_model_config(path)
    assert path in str(e.value)


def test_float_dtypes_and_a_pad_id_inside_the_vocabulary_are_read(tmp_path):
    for dtype in ("bfloat16", "float16", "float32"):
        assert read_model_config(_config(tmp_path, "text_config", dtype=dtype, pad_token_id=151643)).model_type


def test_packing_with_a_seq_length_no_sample_fits_is_named_not_a_traceback():
    from vlmdata.audit.phases.preview import preview
    from vlmdata.audit.settings.config import AuditConfig

    cfg = AuditConfig(seq_length=64, seq_policy="pack", sources=("imagefree", "real"))
    with pytest.raises(AuditError, match="source real: .*exceeds configured sequence_length 64"):
        preview(cfg, measure_rate=False)


def test_plots_of_a_report_whose_real_source_ran_out_of_memory():
    from vlmdata.audit.report.plots import plots

    rates = {"samples_per_s": 10.0, "images_per_s": 0.0, "nonpad_tokens_per_s": 100.0, "loss_tokens_per_s": 50.0}
    summary = {"rates": rates, "stages_ms_per_sample": {}, "visual_tokens_per_sample": []}
    report = {
        "kind": "run",
        "world_size": 1,
        "verdict": None,
        "sources": {
            "imagefree": {"summary": summary, "records": [], "oom": None},
            "real": {"summary": None, "records": [], "oom": {"where": "warm-up"}},
        },
    }
    assert "throughput" in plots(report)


STEPS = """
import torch
def pops(batch):
    batch.pop("input_ids")
    batch.clear()
def yields(batch):
    yield 1
async def awaits(batch):
    return None
def huge(batch):
    return {"peak_mem_bytes": 10**400}
def huger(batch):
    return {"flops": 10**5000}
def exits_generator(batch):
    raise GeneratorExit
class Hostile(dict):
    def __iter__(self):
        raise RuntimeError("no iteration")
    def keys(self):
        raise RuntimeError("no keys")
def hostile_dict(batch):
    return Hostile(times_ms={"step": 1.0})
class Getless(dict):
    def get(self, *a):
        raise RuntimeError("no get")
def dict_subclass(batch):
    return Getless(times_ms={"step": 2.0}, loss=0.5)
"""


@pytest.fixture
def steps(tmp_path, monkeypatch):
    (tmp_path / "attack_steps.py").write_text(STEPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    from vlmdata.audit.workload.user_step import UserWorkload

    return lambda fn: UserWorkload(f"attack_steps:{fn}", "cpu")


def test_a_step_that_pops_batch_keys_leaves_the_audits_batch_whole(steps):
    batch = {"input_ids": [[1, 2]], "labels": [[1, 2]]}
    steps("pops")(batch)
    assert batch == {"input_ids": [[1, 2]], "labels": [[1, 2]]}  # the shapes and FLOPs are read from it after


@pytest.mark.parametrize(
    "fn, match",
    [
        ("yields", "returned a generator: its body never ran"),
        ("awaits", "returned a coroutine: its body never ran"),
        ("huge", r"returned peak_mem_bytes=1000\d+\.\.\.: expected a finite number"),
        ("huger", "returned flops=an integer of 16610 bits: expected a finite number"),
        ("exits_generator", "raised GeneratorExit"),
        ("hostile_dict", r"returned a Hostile that cannot be read \(RuntimeError: no keys\)"),
    ],
)
def test_step_results_that_are_not_a_step_are_errors(steps, fn, match):
    with pytest.raises(AuditError, match=match):
        steps(fn)({"input_ids": [[1, 2]]})


def test_the_plan_bounds_threads_as_the_run_does(monkeypatch):
    """--plan --threads 100000 started 100,000 torch threads (it hung; the run refused it)."""
    import torch

    from vlmdata.audit.phases import session
    from vlmdata.audit.settings.config import AuditConfig

    monkeypatch.setattr(torch, "set_num_threads", lambda n: pytest.fail(f"set_num_threads({n})"))
    with pytest.raises(AuditError, match="`threads` must be an integer 1..4096, not 100000"):
        session.plan_only(AuditConfig(), threads=100_000)


@pytest.mark.parametrize(
    "options, torchvision, match",
    [
        ({"image_device": "cuda"}, True, "image_device='cuda' finishes the images on a GPU, but `device` is 'cpu'"),
        ({"image_device": "cuda:x"}, True, "image_device='cuda:x' is not cpu, cuda or cuda:N"),
        ({"image_device": "meta"}, True, "image_device='meta' is not cpu, cuda or cuda:N"),
        ({"image_device": "cpu"}, False, "nvJPEG .* needs torchvision: install it, or add --loader-arg image_decoder"),
    ],
)
def test_an_image_device_the_run_cannot_use_is_refused_before_the_plan(monkeypatch, options, torchvision, match):
    """--loader-arg image_device=cuda on a CPU run (or nvJPEG without torchvision) was a traceback in the warm-up."""
    from vlmdata.audit.phases import session
    from vlmdata.audit.settings import guard
    from vlmdata.audit.settings.config import AuditConfig

    monkeypatch.setattr(guard.importlib.util, "find_spec", lambda name: object() if torchvision else None)
    with pytest.raises(AuditError, match=match):
        session.plan_only(AuditConfig(device="cpu", loader_options=options))


def test_images_finished_on_the_cpu_by_pillow_need_nothing_more(monkeypatch):
    from vlmdata.audit.settings import guard
    from vlmdata.loaders.options import LoaderOptions

    monkeypatch.setattr(guard.importlib.util, "find_spec", lambda name: None)
    guard.check_device("cpu", LoaderOptions(image_device="cpu", image_decoder="pillow"))
    guard.check_device("cpu", None)


@pytest.mark.parametrize(
    "item, words", [("nope=1,2", "--sweep nope: the reference workload sweeps"), ("recompute=bogus", "recompute takes")]
)
def test_the_plan_checks_the_sweep_as_the_run_does(capsys, item, words):
    """--plan ignored --sweep: a grid the run refuses passed the plan with exit 0."""
    from vlmdata.cli.main import main

    assert main(["audit", "--plan", "--sweep", item]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_dict_subclass_result_is_read_as_a_plain_dict(steps):
    """Its own methods (a `get` that raises) are never called: the audit reads a plain copy."""
    r = steps("dict_subclass")({"input_ids": [[1, 2]]})
    assert r["times_ms"]["step"] == 2.0 and r["loss"] == 0.5
