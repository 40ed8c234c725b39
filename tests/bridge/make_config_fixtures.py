"""Write the Megatron Bridge config fixtures with Bridge 0.6.2 itself: its own Qwen3-VL-30B-A3B SFT recipe, its own
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
3. The recipe calls ``AutoBridge.from_hf_pretrained("Qwen/Qwen3-VL-30B-A3B-Instruct")``, which with
   ``load_weights=False`` reads only the checkpoint's ``config.json``. It is answered offline from a throwaway hub
   cache (``HF_HOME`` = a temp folder, ``HF_HUB_OFFLINE=1``) whose snapshot's ``config.json`` is
   tests/audit/fixtures/hf_qwen3_vl_30b_a3b.json, so the model shape in the YAML is Bridge's conversion of that file.
4. ``torch.cuda.get_device_properties`` answers with an H100's (sm_90) while the recipe and ``runtime_config_update``
   run: the recipe's ``apply_flex_dispatcher_backend(cfg.model, moe_flex_dispatcher_backend=None)`` asks for device
   0 before it finds that no flex backend was requested, then logs and returns without changing anything (and
   ``validate_flex_dispatcher_backend`` only asks when the dispatcher is ``flex``, which it is not here).
5. ``WORLD_SIZE`` is 8 (default: the recipe's 8 GPUs) or 32 (changed) while ``runtime_config_update`` runs: Bridge's
   ``safe_get_world_size`` reads it when torch.distributed is not initialised.
6. The working directory is ``/`` while the recipe builds: its default paths are ``<cwd>/nemo_experiments/default/
   {checkpoints,tb_logs}`` (``checkpoint.save``, ``checkpoint.load``, ``logger.tensorboard_dir``), the only
   machine-dependent values; with a fixed cwd a regeneration is byte-identical. Nothing is created there.

``--expected FILE`` also writes, per fixture, the values ``vlmdata.audit.bridge_config.BridgeRun`` should hold, read
from Bridge's live ``ConfigContainer`` attributes (not from the YAML), for tests/bridge/test_bridge_run_config.py.
"""

from __future__ import annotations

import argparse
import contextlib
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
HF_CONFIG = os.path.join(FIXTURE_DIR, "hf_qwen3_vl_30b_a3b.json")
HF_REPO = "Qwen/Qwen3-VL-30B-A3B-Instruct"
RECIPE_CWD = "/"
FIXTURES = {
    "default": "bridge_qwen3_vl_30b_a3b_sft.yaml",
    "changed": "bridge_qwen3_vl_30b_a3b_sft_changed.yaml",
    "recipe": "bridge_qwen3_vl_30b_a3b_sft_recipe.yaml",
}
WORLD_SIZE = {"default": 8, "changed": 32}
H100 = SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3", total_memory=80 << 30, multi_processor_count=132)


def offline_hub(tmp: str) -> None:
    """A hub cache in ``tmp`` holding only HF_REPO's config.json; set before transformers is imported."""
    repo_dir = os.path.join(tmp, "hub", "models--" + HF_REPO.replace("/", "--"))
    revision = "0" * 40
    os.makedirs(os.path.join(repo_dir, "snapshots", revision))
    os.makedirs(os.path.join(repo_dir, "refs"))
    shutil.copyfile(HF_CONFIG, os.path.join(repo_dir, "snapshots", revision, "config.json"))
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


def recipe():
    """The recipe's ConfigContainer, as built."""
    from megatron.bridge.recipes.qwen_vl.qwen3_vl import qwen3_vl_30b_a3b_sft_config

    with as_on_gpus(cwd=RECIPE_CWD):
        return qwen3_vl_30b_a3b_sft_config()


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


def build(name: str):
    """The ConfigContainer of fixture ``name`` (a key of FIXTURES)."""
    from megatron.bridge.training.config import runtime_config_update

    cfg = recipe()
    if name == "recipe":
        return cfg
    if name == "changed":
        change(cfg)
    with as_on_gpus(world_size=WORLD_SIZE[name]):
        runtime_config_update(cfg)
    return cfg


def bridge_values(cfg) -> dict:
    """What BridgeRun should hold, read from the live ConfigContainer (field -> value, JSON-able)."""
    from vlmdata.audit.bridge_config import MODEL_FIELDS, PACKING_KEYS

    m, ds = cfg.model, cfg.dataset
    in_batch = getattr(ds, "enable_in_batch_packing", None)
    offline = getattr(ds, "enable_offline_packing", None)
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
        "packing": bool(in_batch or offline),
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
    }


_ABSENT = object()


def _attr(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part, _ABSENT)
        if obj is _ABSENT:
            return _ABSENT
    return list(obj) if isinstance(obj, tuple) else obj


def write(out_dir: str, expected: str | None = None, names=tuple(FIXTURES)) -> dict[str, str]:
    """Build each fixture, write it with ``ConfigContainer.to_yaml`` into ``out_dir``; returns name -> path."""
    paths, values = {}, {}
    for name in names:
        cfg = build(name)
        paths[name] = os.path.join(out_dir, FIXTURES[name])
        cfg.to_yaml(paths[name])
        values[name] = bridge_values(cfg)
    if expected:
        with open(expected, "w") as f:
            json.dump(values, f, indent=1, sort_keys=True)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", default=FIXTURE_DIR, help="folder for the YAML files (default: tests/audit/fixtures)")
    ap.add_argument("--expected", help="also write the expected BridgeRun values, from Bridge's objects, as JSON")
    ap.add_argument("--only", choices=sorted(FIXTURES), action="append", help="write only these fixtures")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vlmdata-hf-") as tmp:
        offline_hub(tmp)
        install_cpu_shims()
        paths = write(os.path.abspath(args.out), args.expected, tuple(args.only or FIXTURES))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
