"""Write the Megatron Bridge config fixtures with Bridge 0.6.2 itself: its own Qwen-VL recipes, its own
``ConfigContainer``, its own YAML writer.

Run in the Bridge venv (``scripts/bridge_env.sh``), from the repository root::

    PYTHONPATH=. .bridge-venv/bin/python tests/bridge/make_config_fixtures.py            # -> tests/audit/fixtures/
    PYTHONPATH=. .bridge-venv/bin/python tests/bridge/make_config_fixtures.py --out DIR --expected DIR/expected.json

Files (``FIXTURES``):

- ``bridge_qwen3_vl_30b_a3b_sft.yaml``: ``qwen3_vl_30b_a3b_sft_config()`` (= ``recipes.qwen_vl.h100.qwen3_vl.
  qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config``; GBS 32, MBS 2, seq 4096, TP 1, PP 1, EP 8, nothing frozen, in-batch
  packing deferred to the step) as a run saves it: after ``runtime_config_update(cfg)`` on 8 ranks.
- ``bridge_qwen3_vl_30b_a3b_sft_changed.yaml``: the same recipe with non-default settings set on the container before
  ``runtime_config_update``, as a user's script would (``CHANGED``): TP 2 (sequence parallel), PP 2, CP 2, EP 4,
  ETP 1, GBS 64, MBS 1, seq 8192, language and vision models frozen (projection trainable), full recompute (uniform,
  1 layer), in-batch packing off, no distributed optimizer, a ``CommOverlapConfig`` (so the file records
  ``comm_overlap.data_parallel_size``), on 32 ranks (DP 4).
- ``bridge_qwen3_vl_30b_a3b_sft_recipe.yaml``: the recipe's container as built, before ``runtime_config_update``
  (what ``cfg.to_yaml()`` right after the recipe gives: ``mixed_precision: bf16_mixed``, nulls Megatron-Core fills
  in later).

More recipes, each as a run saves it (after ``runtime_config_update`` with the recipe's own GPU count as the world
size), nothing changed on the container unless said (``RECIPES``; the legacy names are aliases that
``recipes.qwen_vl.qwen3_vl`` / ``recipes.qwen_vl.qwen25_vl`` keep for the ``recipes.qwen_vl.h100`` functions):

- ``bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml``: ``qwen3_vl_30b_a3b_pretrain_mock_config()`` (=
  ``qwen3_vl_30b_a3b_pretrain_8gpu_h100_bf16_mock_config``; TP 4, PP 2, EP 4, sequence parallel, language and vision
  models frozen, ``MockVLMSFTDatasetConfig``), 8 ranks.
- ``bridge_qwen3_vl_235b_a22b_sft.yaml``: ``qwen3_vl_235b_a22b_sft_config()`` (``..._sft_32gpu_h100_bf16_config``;
  TP 4, EP 32), 32 ranks; the model from tests/audit/fixtures/hf_qwen3_vl_235b_a22b.json.
- ``bridge_qwen3_vl_235b_a22b_pretrain_mock.yaml``: ``qwen3_vl_235b_a22b_pretrain_mock_config()``
  (``..._pretrain_256gpu_h100_bf16_mock_config``; TP 4, PP 16, EP 8, CP 2), 256 ranks.
- ``bridge_qwen3_vl_8b_sft.yaml``: ``qwen3_vl_8b_sft_config()`` (``..._sft_2gpu_h100_bf16_config``; dense, TP 2),
  2 ranks; hf_qwen3_vl_8b.json.
- ``bridge_qwen2_5_vl_7b_sft.yaml``: ``qwen25_vl_7b_sft_config()`` (``qwen25_vl_7b_sft_2gpu_h100_bf16_config``;
  ``Qwen25VLModelProvider``, TP 2), 2 ranks; hf_qwen2_5_vl_7b.json.
- ``bridge_qwen3_vl_30b_a3b_peft.yaml``: ``qwen3_vl_30b_a3b_peft_config()`` (``..._peft_4gpu_h100_bf16_config``;
  LoRA, EP 4), 4 ranks, with the one setting a PEFT run must add: ``checkpoint.pretrained_checkpoint`` (``validate()``
  asserts it is set, ``CheckpointConfig.finalize()`` that it exists). It is the recipe's own placeholder,
  ``/path/to/checkpoint`` (its comment "Uncomment below to use a pretrained checkpoint"), and Bridge's
  ``checkpoint_utils.file_exists`` answers True for that one path while ``runtime_config_update`` runs.
- ``bridge_qwen2_5_vl_3b_sft.yaml``: ``qwen25_vl_3b_sft_config()`` (``qwen25_vl_3b_sft_1gpu_h100_bf16_config``; TP 1),
  1 rank; hf_qwen2_5_vl_3b.json.

Not written: Qwen3-VL 2B / 4B (no such recipe in 0.6.2: its Qwen3-VL recipes are 8B, 30B-A3B, 235B-A22B) and
Qwen2.5-VL 32B / 72B (no fixture ``config.json`` for them).

How Bridge writes a run's config: ``ConfigContainer.to_yaml(path)`` (megatron/training/config/container.py:
``to_dict()``, then ``yaml.safe_dump`` under ``safe_yaml_representers``), called by ``checkpointing.save_checkpoint``
for ``<checkpoint>/iter_N/run_config.yaml`` and by ``training.setup.maybe_log_and_save_config`` for
``logger.save_config_filepath``; ``pretrain()`` runs ``runtime_config_update(cfg)`` (mixed precision resolved,
``set_data_parallel_size``, ``cfg.validate()``) before either.

What it takes to run the recipe on a CPU-only machine with no hub access (nothing else is changed; no Bridge source is
modified and no value is edited after Bridge produced it):

1. ``transformer_engine`` is stubbed (tests/bridge/te_stub.py), as in the other tests/bridge files.
2. ``megatron.bridge.recipes`` is registered as a package without running its ``__init__``: that file star-imports
   every model family's recipes, and the FLUX ones import ``diffusers``, which the Bridge venv does not install.
   The Qwen-VL recipe modules (``recipes.qwen_vl``, ``recipes.qwen_vl.h100``, ``recipes.common``) import normally.
3. The recipe calls ``AutoBridge.from_hf_pretrained("Qwen/Qwen3-VL-30B-A3B-Instruct")`` (or its model's hub id),
   which with ``load_weights=False`` reads only the checkpoint's ``config.json``. It is answered offline from a
   throwaway hub cache (``HF_HOME`` = a temp folder, ``HF_HUB_OFFLINE=1``) whose snapshot's ``config.json`` is the
   model's tests/audit/fixtures/hf_*.json (``HF_CONFIGS``), so the model shape in the YAML is Bridge's conversion of
   that file.
4. ``torch.cuda.get_device_properties`` answers with an H100's (sm_90) while the recipe and ``runtime_config_update``
   run: the recipe's ``apply_flex_dispatcher_backend(cfg.model, moe_flex_dispatcher_backend=None)`` asks for device
   0 before it finds that no flex backend was requested, then logs and returns without changing anything (and
   ``validate_flex_dispatcher_backend`` only asks when the dispatcher is ``flex``, which it is not here).
5. ``WORLD_SIZE`` is the recipe's GPU count (8 for the default; ``WORLD_SIZE``) or 32 (changed) while
   ``runtime_config_update`` runs: Bridge's ``safe_get_world_size`` reads it when torch.distributed is not
   initialised.
6. The working directory is ``/`` while the recipe builds: its default paths are ``<cwd>/nemo_experiments/default/
   {checkpoints,tb_logs}`` (``checkpoint.save``, ``checkpoint.load``, ``logger.tensorboard_dir``), the only
   machine-dependent values; with a fixed cwd a regeneration is byte-identical. Nothing is created there.

``--expected FILE`` also writes, per fixture, the values ``vlmdata.audit.settings.bridge_config.BridgeRun`` should hold, read
from Bridge's live ``ConfigContainer`` attributes (not from the YAML), for tests/bridge/test_bridge_run_config.py,
and beside them (``bridge_values``) what Bridge holds for settings vlmdata may not read yet: ``world_size``,
``derived_data_parallel_size`` (Bridge's ``cfg.data_parallel_size``) and ``data_parallel_from_world`` (world /
(TP * PP * CP), computed here), ``sequence_parallel``, ``virtual_pipeline_model_parallel_size``,
``moe_router_force_load_balancing``, ``cuda_graph_settings`` (every model field whose name holds ``cuda_graph``:
``cuda_graph_impl``, ``cuda_graph_scope``, ``enable_cuda_graph``, ``external_cuda_graph``, the ``vision_cuda_graph_*``
of the Qwen3-VL providers, ...), ``peft`` (``null``, or the PEFT dataclass's ``_target_`` and fields: ``dim``,
``alpha``, ``target_modules``, ...) and ``execution`` (``bridge_config.EXECUTION_FIELDS``, where vlmdata defines
it).
Without ``--out``, the values go to tests/audit/fixtures/bridge_expected.json (``EXPECTED``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types
from types import SimpleNamespace
from unittest import mock

# torch and megatron.bridge are imported inside the functions: the hub environment (offline_hub) and the stubs
# (install_cpu_shims) must be in place before the first of them is imported.

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE_DIR = os.path.join(REPO, "tests", "audit", "fixtures")
HF_CONFIGS = {  # hub id the recipe asks for -> the fixture config.json the offline hub answers with
    "Qwen/Qwen3-VL-30B-A3B-Instruct": "hf_qwen3_vl_30b_a3b.json",
    "Qwen/Qwen3-VL-235B-A22B-Instruct": "hf_qwen3_vl_235b_a22b.json",
    "Qwen/Qwen3-VL-8B-Instruct": "hf_qwen3_vl_8b.json",
    "Qwen/Qwen2.5-VL-7B-Instruct": "hf_qwen2_5_vl_7b.json",
    "Qwen/Qwen2.5-VL-3B-Instruct": "hf_qwen2_5_vl_3b.json",
}
RECIPE_CWD = "/"
EXPECTED = os.path.join(FIXTURE_DIR, "bridge_expected.json")
FIXTURES = {
    "default": "bridge_qwen3_vl_30b_a3b_sft.yaml",
    "changed": "bridge_qwen3_vl_30b_a3b_sft_changed.yaml",
    "recipe": "bridge_qwen3_vl_30b_a3b_sft_recipe.yaml",
    "30b_a3b_pretrain_mock": "bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml",
    "235b_a22b_sft": "bridge_qwen3_vl_235b_a22b_sft.yaml",
    "235b_a22b_pretrain_mock": "bridge_qwen3_vl_235b_a22b_pretrain_mock.yaml",
    "8b_sft": "bridge_qwen3_vl_8b_sft.yaml",
    "qwen2_5_vl_7b_sft": "bridge_qwen2_5_vl_7b_sft.yaml",
    "30b_a3b_peft": "bridge_qwen3_vl_30b_a3b_peft.yaml",
    "qwen2_5_vl_3b_sft": "bridge_qwen2_5_vl_3b_sft.yaml",
}
# fixture -> the recipe function (its legacy alias, under megatron.bridge.recipes.qwen_vl)
RECIPES = {
    "default": "qwen3_vl.qwen3_vl_30b_a3b_sft_config",
    "changed": "qwen3_vl.qwen3_vl_30b_a3b_sft_config",
    "recipe": "qwen3_vl.qwen3_vl_30b_a3b_sft_config",
    "30b_a3b_pretrain_mock": "qwen3_vl.qwen3_vl_30b_a3b_pretrain_mock_config",
    "235b_a22b_sft": "qwen3_vl.qwen3_vl_235b_a22b_sft_config",
    "235b_a22b_pretrain_mock": "qwen3_vl.qwen3_vl_235b_a22b_pretrain_mock_config",
    "8b_sft": "qwen3_vl.qwen3_vl_8b_sft_config",
    "qwen2_5_vl_7b_sft": "qwen25_vl.qwen25_vl_7b_sft_config",
    "30b_a3b_peft": "qwen3_vl.qwen3_vl_30b_a3b_peft_config",
    "qwen2_5_vl_3b_sft": "qwen25_vl.qwen25_vl_3b_sft_config",
}
# the world size runtime_config_update sees: the recipe's own GPU count ("recipe" is written before it runs)
WORLD_SIZE = {
    "default": 8,
    "changed": 32,
    "30b_a3b_pretrain_mock": 8,
    "235b_a22b_sft": 32,
    "235b_a22b_pretrain_mock": 256,
    "8b_sft": 2,
    "qwen2_5_vl_7b_sft": 2,
    "30b_a3b_peft": 4,
    "qwen2_5_vl_3b_sft": 1,
}
PRETRAINED_CHECKPOINT = "/path/to/checkpoint"  # the PEFT recipe's own placeholder (its commented-out line)
H100 = SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3", total_memory=80 << 30, multi_processor_count=132)


def offline_hub(tmp: str) -> None:
    """A hub cache in ``tmp`` holding only each HF_CONFIGS repo's config.json; set before transformers is imported."""
    revision = "0" * 40
    for repo, config in HF_CONFIGS.items():
        repo_dir = os.path.join(tmp, "hub", "models--" + repo.replace("/", "--"))
        os.makedirs(os.path.join(repo_dir, "snapshots", revision))
        os.makedirs(os.path.join(repo_dir, "refs"))
        shutil.copyfile(os.path.join(FIXTURE_DIR, config), os.path.join(repo_dir, "snapshots", revision, "config.json"))
        with open(os.path.join(repo_dir, "refs", "main"), "w") as f:
            f.write(revision)
    os.environ["HF_HOME"] = tmp
    os.environ["HF_HUB_OFFLINE"] = "1"


def install_cpu_shims() -> None:
    """Points 1 and 2 of the module docstring."""
    install_te_stub()
    skip_recipes_init()


def install_te_stub() -> None:
    """Point 1: the transformer_engine stub of tests/bridge/te_stub.py."""
    spec = importlib.util.spec_from_file_location("vlmdata_te_stub", os.path.join(HERE, "te_stub.py"))
    assert spec is not None and spec.loader is not None
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    stub.install()


def skip_recipes_init() -> None:
    """Point 2: ``megatron.bridge.recipes`` as a package whose ``__init__`` did not run."""
    if "megatron.bridge.recipes" in sys.modules:
        return
    import megatron.bridge  # noqa: F401  (the parent package, so that the recipes spec can be found)

    recipes = importlib.util.find_spec("megatron.bridge.recipes")
    assert recipes is not None and recipes.submodule_search_locations is not None
    package = types.ModuleType("megatron.bridge.recipes")
    package.__path__ = list(recipes.submodule_search_locations)
    package.__spec__ = recipes
    package.__file__ = recipes.origin
    sys.modules["megatron.bridge.recipes"] = package


@contextlib.contextmanager
def as_on_gpus(world_size: int | None = None, cwd: str | None = None):
    """Points 4-6 of the module docstring, undone on exit."""
    import torch

    env = {"WORLD_SIZE": str(world_size)} if world_size is not None else {}
    old_cwd = os.getcwd()
    with (
        mock.patch.object(torch.cuda, "get_device_properties", lambda *_a, **_k: H100),
        mock.patch.dict(os.environ, env),
    ):
        if cwd is not None:
            os.chdir(cwd)
        try:
            yield
        finally:
            os.chdir(old_cwd)


def recipe(name: str = "recipe"):
    """The ConfigContainer of fixture ``name``'s recipe, as built."""
    module, function = RECIPES[name].rsplit(".", 1)
    make = getattr(importlib.import_module(f"megatron.bridge.recipes.qwen_vl.{module}"), function)
    with as_on_gpus(cwd=RECIPE_CWD):
        return make()


def change(cfg) -> None:
    """The changed fixture's settings (on the container, before runtime_config_update)."""
    import torch
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    m = cfg.model
    m.tensor_model_parallel_size = 2
    m.sequence_parallel = True  # MoE with TP > 1
    m.pipeline_model_parallel_size = 2
    m.pipeline_dtype = torch.bfloat16
    m.context_parallel_size = 2
    m.calculate_per_token_loss = True  # validate(): SFT with CP > 1
    cfg.ddp.average_in_collective = False  # validate(): SFT with CP > 1
    m.expert_model_parallel_size = 4
    m.expert_tensor_parallel_size = 1
    m.seq_length = cfg.dataset.seq_length = 8192
    m.freeze_language_model = True
    m.freeze_vision_model = True
    m.freeze_vision_projection = False
    m.recompute_granularity = "full"
    m.recompute_method = "uniform"
    m.recompute_num_layers = 1
    cfg.dataset.enable_in_batch_packing = False
    cfg.dataset.defer_in_batch_packing_to_step = False
    cfg.train.global_batch_size = 64
    cfg.train.micro_batch_size = 1
    cfg.ddp.use_distributed_optimizer = False
    cfg.optimizer.use_distributed_optimizer = False
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)


def add_pretrained_checkpoint(cfg) -> None:
    """The PEFT fixture's one setting: the checkpoint the adapters train on (see the module docstring)."""
    cfg.checkpoint.pretrained_checkpoint = PRETRAINED_CHECKPOINT


CHANGES = {"changed": change, "30b_a3b_peft": add_pretrained_checkpoint}


@contextlib.contextmanager
def pretrained_checkpoint_exists():
    """``CheckpointConfig.finalize()`` asks whether the pretrained checkpoint exists: yes for PRETRAINED_CHECKPOINT."""
    from megatron.bridge.training.utils import checkpoint_utils

    real = checkpoint_utils.file_exists
    with mock.patch.object(checkpoint_utils, "file_exists", lambda path: path == PRETRAINED_CHECKPOINT or real(path)):
        yield


def build(name: str):
    """The ConfigContainer of fixture ``name`` (a key of FIXTURES)."""
    from megatron.bridge.training.config import runtime_config_update

    cfg = recipe(name)
    if name not in WORLD_SIZE:
        return cfg
    if name in CHANGES:
        CHANGES[name](cfg)
    with as_on_gpus(world_size=WORLD_SIZE[name]), pretrained_checkpoint_exists():
        runtime_config_update(cfg)
    return cfg


def bridge_values(cfg, world_size: int | None = None) -> dict:
    """What BridgeRun should hold, read from the live ConfigContainer (field -> value, JSON-able), and the settings
    listed in the module docstring that vlmdata may not read yet."""
    from vlmdata.audit.settings.bridge_config import MODEL_FIELDS, PACKING_KEYS

    m, ds = cfg.model, cfg.dataset
    in_batch = getattr(ds, "enable_in_batch_packing", None)
    offline = getattr(ds, "enable_offline_packing", None)
    has_packing = hasattr(ds, "enable_in_batch_packing") or hasattr(ds, "enable_offline_packing")
    modules = m.recompute_modules
    return {
        "micro_batch_size": cfg.train.micro_batch_size,
        "global_batch_size": cfg.train.global_batch_size,
        "seq_length": m.seq_length,
        "tensor_parallel": m.tensor_model_parallel_size,
        "pipeline_parallel": m.pipeline_model_parallel_size,
        "expert_parallel": m.expert_model_parallel_size,
        "context_parallel": m.context_parallel_size,
        "expert_tensor_parallel": m.expert_tensor_parallel_size,
        "data_parallel": cfg.comm_overlap.data_parallel_size if cfg.comm_overlap is not None else None,
        "freeze_language_model": m.freeze_language_model,
        "freeze_vision_model": m.freeze_vision_model,
        "freeze_vision_projection": m.freeze_vision_projection,
        "recompute": m.recompute_granularity or "none",
        "recompute_detail": {
            "recompute_method": m.recompute_method,
            "recompute_num_layers": m.recompute_num_layers,
            "recompute_modules": list(modules) if modules is not None else None,
        },
        "packing": bool(in_batch or offline) if has_packing else None,
        "packing_detail": {k: getattr(ds, k) for k in PACKING_KEYS if hasattr(ds, k)},
        "use_distributed_optimizer": bool(cfg.ddp.use_distributed_optimizer or cfg.optimizer.use_distributed_optimizer),
        "model_target": f"{type(m).__module__}.{type(m).__qualname__}",
        "dataset_target": f"{type(ds).__module__}.{type(ds).__qualname__}",
        "model_fields": {key: value for key in MODEL_FIELDS if (value := _attr(m, key)) is not _ABSENT},
        "manual_gc": cfg.train.manual_gc,
        "manual_gc_interval": cfg.train.manual_gc_interval,
        # not BridgeRun fields: what Bridge derived, for the test's cross-checks
        "derived_data_parallel_size": getattr(cfg, "data_parallel_size", None),
        "dataset_seq_length": ds.seq_length,
        # not read by vlmdata (yet): Bridge's live values of further settings
        "world_size": world_size,
        "data_parallel_from_world": (
            world_size // (m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size)
            if world_size is not None
            else None
        ),
        "sequence_parallel": m.sequence_parallel,
        "virtual_pipeline_model_parallel_size": m.virtual_pipeline_model_parallel_size,
        "moe_router_force_load_balancing": m.moe_router_force_load_balancing,
        "cuda_graph_settings": {
            f.name: _jsonable(getattr(m, f.name)) for f in dataclasses.fields(m) if "cuda_graph" in f.name
        },
        "peft": peft_values(cfg.peft),
    } | execution_values(m)


def execution_values(m) -> dict:
    """``{"execution": ...}``: the ``bridge_config.EXECUTION_FIELDS`` present on the model (a list where a string or
    a list is read: comma-joined), for ``BridgeRun.execution``; ``{}`` where vlmdata has no EXECUTION_FIELDS."""
    from vlmdata.audit.settings import bridge_config

    if not hasattr(bridge_config, "EXECUTION_FIELDS"):
        return {}
    found = {}
    for key, kind in bridge_config.EXECUTION_FIELDS.items():
        value = _attr(m, key)
        if value is _ABSENT:
            continue
        if kind == "str_or_list" and isinstance(value, list):
            value = ",".join(str(_jsonable(v)) for v in value)
        found[key] = _jsonable(value)
    return {"execution": found}


def peft_values(peft) -> dict | None:
    """The PEFT config's class (as ``_target_``) and dataclass fields, or None without PEFT."""
    if peft is None:
        return None
    values = {"_target_": f"{type(peft).__module__}.{type(peft).__qualname__}"}
    values.update((f.name, _jsonable(getattr(peft, f.name))) for f in dataclasses.fields(peft) if f.init)
    return values


def _jsonable(value):
    """An enum as ``Class.name``, a torch dtype as its repr, containers element-wise."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


_ABSENT = object()


def _attr(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part, _ABSENT)
        if obj is _ABSENT:
            return _ABSENT
    return list(obj) if isinstance(obj, tuple) else obj


def write(out_dir: str, expected: str | None = None, names=tuple(FIXTURES)) -> dict[str, str]:
    """Build each fixture, write it with ``ConfigContainer.to_yaml`` into ``out_dir``; returns name -> path.

    ``expected``: also write the values (``bridge_values``) there; an existing file's other fixtures are kept."""
    paths, values = {}, {}
    for name in names:
        cfg = build(name)
        paths[name] = os.path.join(out_dir, FIXTURES[name])
        cfg.to_yaml(paths[name])
        values[name] = bridge_values(cfg, WORLD_SIZE.get(name))
    if expected:
        if os.path.exists(expected) and set(names) != set(FIXTURES):
            with open(expected) as f:
                values = {**json.load(f), **values}
        with open(expected, "w") as f:
            json.dump(values, f, indent=1, sort_keys=True)
            f.write("\n")
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", help="folder for the YAML files (default: tests/audit/fixtures)")
    ap.add_argument(
        "--expected",
        help="also write the expected BridgeRun values, from Bridge's objects, as JSON (default without --out: "
        "tests/audit/fixtures/bridge_expected.json)",
    )
    ap.add_argument("--only", choices=sorted(FIXTURES), action="append", help="write only these fixtures")
    args = ap.parse_args(argv)
    out = args.out or FIXTURE_DIR
    expected = args.expected or (None if args.out else EXPECTED)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vlmdata-hf-") as tmp:
        offline_hub(tmp)
        install_cpu_shims()
        paths = write(os.path.abspath(out), expected, tuple(args.only or FIXTURES))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
