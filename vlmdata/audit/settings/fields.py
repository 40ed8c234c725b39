"""The one place a setting of the audit is named: ``SETTINGS`` (a ``Setting`` per setting) and ``FIELDS`` (name ->
``Setting``).

Contract: every reader of a setting's name, flag, help, Bridge YAML path, log-dump key, compare meaning or report
label derives it from this table and restates none of them:

- the CLI (``vlmdata.cli.commands.audit``: which flags carry an ``AuditConfig`` field as it is; every flag's help,
  rendered by ``vlmdata.cli.audit_help``);
- ``vlmdata.audit.planning.resolve`` (``BRIDGE_RUN_FIELDS``: the settings a Bridge config may give the run) and
  ``vlmdata.audit.settings.bridge_run`` (``BRIDGE_NAMES``: setting -> ``BridgeRun`` attribute; the keys a Bridge
  config should state);
- the Bridge YAML reader (``vlmdata.audit.settings.bridge_config``: the dotted paths and the kind of value of every
  setting it reads; model-shape, packing, recompute-detail and execution-policy keys stay its own tables);
- ``audit compare`` (``vlmdata.audit.logs.settings``: ``SETTING_KEYS`` and ``MEANING``, in ``COMPARED`` order);
- the report's settings table (``vlmdata.audit.report.run_tables``: the row labels).

A ``Setting``:

- ``name``: the ``AuditConfig`` field (``config`` True), else the name the run spec, the benchmark or the compare
  table uses (``use_distributed_optimizer``, ``force_balance``, ``cuda_graphs``, ``sequence_parallel``,
  ``dataset``);
- ``section``: ``model`` (what is built), ``run`` (the user's training run, as Bridge has it), ``loader`` (the
  data and how it is read), ``measure`` (how long and on what), ``report`` (how the verdict is drawn);
- ``flag``: the ``vlmdata audit`` flag (``None``: no flag), its ``dest`` the flag's name with underscores;
- ``help``: the flag's help as a ``str.format`` template over ``cpu`` and ``gpu`` (``DEVICE_DEFAULTS``), ``a``
  (``AuditConfig``: its defaults), ``sources`` (the default sources, comma-joined) and ``other`` (left as
  ``{other}``: the CLI fills in the registry's other sources); ``help_text`` renders it;
- ``bridge``: the Bridge ``ConfigContainer`` YAML paths, first present wins (``()``: Bridge has none);
  ``bridge_attr``: the ``BridgeRun`` attribute holding it (``execution.<key>``: in ``BridgeRun.execution``, as
  ``BridgeRun.sources`` names it); ``bridge_kind``: the kind of value (``ConfigDoc.check``);
- ``from_bridge``: ``resolve`` takes it from the user's Bridge config when not given;
- ``dump``: its key in a Megatron log's configuration dump (``audit compare``); ``meaning``: the one line the
  compare table says about a difference in it;
- ``label``: its row in the report's settings table (``None``: the name).

Pure data, no imports of the audit: every layer of the wing may read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["Setting", "SETTINGS", "FIELDS", "COMPARED", "SECTIONS", "help_text", "bridge_attrs"]

SECTIONS = ("model", "run", "loader", "measure", "report")


@dataclass(frozen=True)
class Setting:
    """One setting of the audit (module docstring: what each field means)."""

    name: str
    section: str
    flag: str | None = None
    help: str = ""
    bridge: tuple[str, ...] = ()
    bridge_attr: str | None = None
    bridge_kind: str | None = None
    from_bridge: bool = False
    dump: str | None = None
    meaning: str | None = None
    label: str | None = None
    config: bool = True

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"{self.name}: section {self.section!r} is not one of {SECTIONS}")

    @property
    def dest(self) -> str | None:
        """The argparse destination of ``flag`` (None without a flag)."""
        return None if self.flag is None else self.flag[2:].replace("-", "_")


def _model(key: str) -> tuple[str, ...]:
    """A key under ``model``, or under ``model.transformer`` (Megatron's own ``GPTModelConfig`` layout)."""
    return (f"model.{key}", f"model.transformer.{key}")


def _parallel(name: str, attr: str, key: str, what: str, extra: str = "", dump: bool = True, **kw: Any) -> Setting:
    meaning = {
        "tp": "the layout changes how the step spreads over GPUs",
        "pp": "the layout changes how the step spreads over GPUs (pipeline bubble, vision on stage 0)",
        "ep": "the layout changes the expert all-to-all and the experts per GPU",
        "cp": "context parallelism splits the decoder but replicates the vision tower",
    }.get(name)
    return Setting(
        name,
        "run",
        f"--{name}",
        f"the run's {what}-parallel size (describes the run; default 1{extra})",
        bridge=kw.pop("bridge", _model(key)),
        bridge_attr=attr,
        bridge_kind="int",
        from_bridge=True,
        dump=key if dump else None,
        meaning=meaning,
        label=f"{what} parallel",
        **kw,
    )


def _freeze(part: str, meaning: str) -> Setting:
    name = f"freeze_{part}"
    return Setting(
        name,
        "run",
        f"--freeze-{part.replace('_', '-')}",
        "as Bridge's model field",
        bridge=_model(name),
        bridge_attr=name,
        bridge_kind="bool",
        from_bridge=True,
        dump=name,
        meaning=meaning,
    )


SETTINGS: tuple[Setting, ...] = (
    # the model
    Setting(
        "preset", "model", "--preset", "reference model size (default {cpu[preset]} on CPU, {gpu[preset]} on CUDA)"
    ),
    Setting(
        "model_config",
        "model",
        "--model-config",
        "take the model's shape from a Hugging Face Qwen3-VL / Qwen3-VL-MoE / Qwen2.5-VL / Qwen2-VL config.json (or the checkpoint folder holding it); random weights, nothing downloaded",
    ),
    Setting(
        "slice_layers",
        "model",
        "--slice-layers",
        "measure K decoder layers (at the true width, experts/EP per layer) and compose the step (default: the whole model if it fits the GPU, else its DeepStack layers + 2 plain ones)",
        label="decoder layers measured",
    ),
    Setting(
        "attention",
        "model",
        "--attention",
        "reference model attention: varlen (packed variable-length flash kernels) or sdpa (transformers' per-image path); default {a.attention}",
    ),
    Setting(
        "compile",
        "model",
        "--compile",
        "run the reference model's blocks through torch.compile (inductor): none, vision (the vision tower's blocks), decoder (the decoder layers) or all, as Transformer Engine's fused kernels in Bridge; compiled during the warm-up (default {cpu[compile]} on CPU, {gpu[compile]} on CUDA)",
    ),
    Setting(
        "logits",
        "model",
        "--logits",
        "lm_head over all tokens (Bridge; default on CUDA) or loss tokens only (default on CPU)",
    ),
    Setting("step", "model", "--step", "user workload: a callable taking a batch and running one training step"),
    # the user's run, as Bridge has it (the from_bridge settings in resolve's order)
    Setting(
        "bridge_config",
        "run",
        "--bridge-config",
        "take the run's settings from a Megatron Bridge ConfigContainer YAML (micro and global batch, seq_length, TP/PP/EP/CP, freezing, recompute, packing); flags override it",
    ),
    Setting(
        "micro_batch_size",
        "run",
        "--micro-batch-size",
        "samples per micro-batch and rank (default {cpu[micro_batch_size]})",
        bridge=("train.micro_batch_size",),
        bridge_attr="micro_batch_size",
        bridge_kind="int",
        from_bridge=True,
        dump="micro_batch_size",
        meaning="another micro-batch changes the kernels' sizes and the steps' overheads",
        label="micro-batch size",
    ),
    Setting(
        "global_batch_size",
        "run",
        "--global-batch-size",
        "samples per optimizer step over all data-parallel ranks (default {cpu[micro_batches]} micro-batches per step on CPU, {gpu[micro_batches]} on CUDA)",
        bridge=("train.global_batch_size",),
        bridge_attr="global_batch_size",
        bridge_kind="int",
        from_bridge=True,
        label="global batch size",
    ),
    Setting(
        "seq_length",
        "run",
        "--seq-length",
        "the run's seq_length (default {cpu[seq_length]} CPU / {gpu[seq_length]} CUDA)",
        bridge=(*_model("seq_length"), "dataset.seq_length"),  # the model's wins (bridge_config)
        bridge_attr="seq_length",
        bridge_kind="int",
        from_bridge=True,
    ),
    _parallel("tp", "tensor_parallel", "tensor_model_parallel_size", "tensor"),
    _parallel("pp", "pipeline_parallel", "pipeline_model_parallel_size", "pipeline"),
    _parallel("ep", "expert_parallel", "expert_model_parallel_size", "expert"),
    _parallel("cp", "context_parallel", "context_parallel_size", "context"),
    _parallel(
        "etp",
        "expert_tensor_parallel",
        "expert_tensor_parallel_size",
        "expert tensor",
        ", or the tensor-parallel size",
        dump=False,
    ),
    _parallel(
        "dp",
        "data_parallel",
        "data_parallel_size",
        "data",
        ", or the smallest the others allow",
        dump=False,
        bridge=("data_parallel_size", "comm_overlap.data_parallel_size"),  # bridge_run: DP derived or assumed
    ),
    _freeze("language_model", "a frozen language model has no weight gradients (and, without images, no backward)"),
    _freeze("vision_model", "a frozen vision tower has no weight gradients"),
    _freeze("vision_projection", "a frozen projection has no weight gradients"),
    Setting(
        "recompute",
        "run",
        "--recompute",
        "activation recompute of the run (default none)",
        bridge=_model("recompute_granularity"),
        bridge_attr="recompute",
        bridge_kind="recompute",
        from_bridge=True,
        dump="recompute_granularity",
        meaning="recompute runs forward passes again in the backward",
    ),
    Setting(
        "use_distributed_optimizer",
        "run",
        bridge=("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"),  # either on: on
        bridge_attr="use_distributed_optimizer",
        bridge_kind="bool",
        from_bridge=True,
        label="distributed optimizer",
        config=False,
    ),
    Setting(
        "manual_gc",
        "run",
        "--manual-gc",
        "Python's garbage collector as Bridge's train.manual_gc: off during the timed steps, a collection between them (default: on, as Bridge's recipes); --no-manual-gc leaves the automatic collector running inside the steps",
        bridge=("train.manual_gc",),
        bridge_attr="manual_gc",
        bridge_kind="bool",
        from_bridge=True,
        label="manual garbage collection",
    ),
    Setting(
        "manual_gc_interval",
        "run",
        "--manual-gc-interval",
        "Bridge's train.manual_gc_interval: steps between Bridge's collections, for the amortised cost the report states (default 100, the recipes'; 0: none)",
        bridge=("train.manual_gc_interval",),
        bridge_attr="manual_gc_interval",
        bridge_kind="int0",
        from_bridge=True,
        label="manual_gc_interval (Bridge's steps between collections)",
    ),
    Setting(
        "seq_policy",
        "run",
        "--seq-policy",
        "padding: bridge (default: Bridge's rule for --tp/--pp/--ep: seq_length when PP>1 or EP>1, else a multiple of 128 then of lcm(TP,16)), pad128, max (seq_length), pack (in-batch packing)",
        label="sequence policy",
    ),
    Setting(
        "gpus",
        "run",
        "--gpus",
        "the run's GPU count (Bridge's world size): DP = GPUs / (TP x PP x CP), as Bridge derives it; a saved Bridge config does not record it (default: --dp, else the config's comm_overlap.data_parallel_size, else assumed: the smallest DP the layout allows, said in the notes)",
    ),
    Setting(
        "link_gbps",
        "run",
        "--link-gbps",
        "per-GPU all-to-all bandwidth in GB/s for the modelled expert-parallel term (default {a.link_gbps:g})",
    ),
    Setting(
        "expert_imbalance",
        "run",
        "--expert-imbalance",
        "natural routing's busiest expert-parallel rank over the mean, for the composed layout (default {a.expert_imbalance}; forced balance: 1)",
    ),
    Setting(
        "benchmark_config",
        "run",
        "--benchmark-config",
        "the benchmark's own Bridge config YAML (e.g. a pretrain-mock recipe's), when it is not run as the training run: mocks are measured under it, real under --bridge-config, and the gap is attributed factor by factor",
    ),
    Setting(
        "benchmark",
        "run",
        "--benchmark-set",
        "a benchmark setting that differs from the run's (wins over --benchmark-config); repeatable. Keys: micro_batch_size, global_batch_size, seq_length, seq_policy, tp, pp, ep, cp, etp, dp, freeze_language_model, freeze_vision_model, freeze_vision_projection, recompute, force_balance, vp, cuda_graphs",
    ),
    # execution policy and data a Bridge config and a log state (audit compare; the benchmark's keys)
    Setting(
        "force_balance",
        "run",
        bridge=_model("moe_router_force_load_balancing"),
        bridge_attr="execution.moe_router_force_load_balancing",
        bridge_kind="bool",
        dump="moe_router_force_load_balancing",
        meaning="forced routing balance removes the expert-parallel stragglers natural routing has",
        config=False,
    ),
    Setting(
        "cuda_graphs",
        "run",
        bridge=_model("cuda_graph_impl"),
        bridge_attr="execution.cuda_graph_impl",
        bridge_kind="str",
        dump="cuda_graph_impl",
        meaning="CUDA graphs remove launch overheads that only fixed shapes allow",
        config=False,
    ),
    Setting(
        "sequence_parallel",
        "run",
        bridge=_model("sequence_parallel"),
        bridge_attr="execution.sequence_parallel",
        bridge_kind="bool",
        dump="sequence_parallel",
        meaning="sequence parallelism changes the tensor-parallel collectives",
        config=False,
    ),
    Setting(
        "dataset",
        "loader",
        bridge=("dataset._target_",),
        bridge_attr="dataset_target",
        bridge_kind="str",
        dump="_target_",
        meaning="the data",
        config=False,
    ),
    # the data and how it is read
    Setting(
        "real",
        "loader",
        "--real",
        "real dataset: a vlmdata shard folder, a glob or a .tar (default: the embedded sample data)",
    ),
    Setting(
        "profile",
        "loader",
        "--profile",
        "sample the synthetic source from this profile.json (not paired) instead of twinning the real samples",
    ),
    Setting(
        "sources",
        "loader",
        "--sources",
        "comma-separated sources (default {sources}; also: {other}); real is required",
    ),
    Setting(
        "num_workers",
        "loader",
        "--num-workers",
        "loader DataLoader workers per source and rank (default 0 on CPU; on CUDA the rank's CPUs minus 2, split over the sources, 1-4)",
    ),
    Setting("loader_options", "loader", "--loader-arg", "extra make_loader keyword (int/float/bool/str), repeatable"),
    Setting("seed", "loader", "--seed", "seed of the model, loaders, synthetic data and bootstrap (default {a.seed})"),
    # how long it is measured, and on what
    Setting("device", "measure", "--device", "cpu, cuda or cuda:N (default {a.device})"),
    Setting(
        "min_steps",
        "measure",
        "--min-steps",
        "steps per source before stopping may be considered (default: one epoch of the real data, at most --max-steps)",
    ),
    Setting(
        "max_steps",
        "measure",
        "--max-steps",
        "global steps per source at most (default {cpu[max_steps]} CPU / {gpu[max_steps]} CUDA)",
    ),
    Setting(
        "block",
        "measure",
        "--block",
        "consecutive global steps of one source per round (default {cpu[block]} / {gpu[block]})",
    ),
    Setting(
        "budget_s",
        "measure",
        "--budget-s",
        "the whole command's wall time: the model build, census and warm-up count, and a round is measured only when it can end before the budget does (at least one round; the plan says what runs before measuring and how long it is expected to take) (default {cpu[budget_s]:.0f} CPU / {gpu[budget_s]:.0f} CUDA)",
    ),
    Setting(
        "warmup",
        "measure",
        "--warmup",
        "extra untimed training steps per source after its loader starts, the model on the last 4 micro-batches of each (default {cpu[warmup]} CPU / {gpu[warmup]} CUDA; every shape is warmed anyway)",
    ),
    Setting(
        "precision",
        "measure",
        "--precision",
        "stop when every gap's 95%% interval is within this fraction of its ratio and decides the verdict (default {a.precision})",
    ),
    # how the verdict is drawn
    Setting(
        "threshold",
        "report",
        "--threshold",
        "MISLEADING when mock/real exceeds 1 + this (default {a.threshold}; '10%%' works)",
    ),
    Setting(
        "repeat_margin",
        "report",
        "--repeat-margin",
        "run-to-run spread a mock's interval is widened by before the verdict (default {a.repeat_margin:g})",
    ),
)
FIELDS: Mapping[str, Setting] = MappingProxyType({s.name: s for s in SETTINGS})
COMPARED = (  # the settings `audit compare` reads from two runs, in the order its table lists them
    *("freeze_language_model", "freeze_vision_model", "freeze_vision_projection", "recompute", "micro_batch_size"),
    *("tp", "pp", "ep", "cp", "force_balance", "cuda_graphs", "sequence_parallel", "dataset"),
)


def help_text(setting: Setting, **quoted: Any) -> str:
    """``setting.help`` with the defaults it quotes filled in (module docstring: ``cpu``, ``gpu``, ``a``,
    ``sources``); ``{other}`` stays for the CLI to fill."""
    return setting.help.format(**{"other": "{other}", **quoted})


def bridge_attrs() -> dict[str, str]:
    """Setting -> ``BridgeRun`` attribute, for the settings ``resolve`` takes from a Bridge config whose attribute
    has another name (``tp`` -> ``tensor_parallel``)."""
    return {s.name: s.bridge_attr for s in SETTINGS if s.from_bridge and s.bridge_attr and s.bridge_attr != s.name}
