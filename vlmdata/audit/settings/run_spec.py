"""The training run the audit reproduces: Megatron Bridge's step semantics and padding rule, and where each
setting came from.

``RunSpec`` describes the user's run (they need not have the GPUs it names: one GPU measures one
data-parallel rank of it):

- **Global batch** (``train.global_batch_size``): Bridge's ``train_step`` runs forward and backward over
  ``GBS / (MBS * DP)`` micro-batches, then one optimizer step (REFERENCE.md section 11).
  ``micro_batches`` is that count; a measured step of the audit is one such global step of one rank.
- **Parallel sizes** ``tp``, ``pp``, ``ep``, ``cp``, ``etp``, ``dp``: they set the padding rule, the number
  of micro-batches and, for models too big for one GPU, the slice and the modelled communication
  (``vlmdata.audit.analysis.compose``). ``dp`` left unset is the smallest data-parallel size the others allow
  (an EP=8 run has at least 8 data-parallel ranks: Megatron places expert parallelism inside DP x CP x TP).
- **Sequence policy** (``SEQ_POLICIES``):

  ``bridge`` (default): exactly Bridge 0.6.2's: the collate pads each micro-batch to a multiple of 128
  (capped at seq_length; ``qwen2_5_collate_fn``), then ``qwen3_vl_step._pad_and_pack_qwen3_vl_step`` pads
  to a multiple of lcm(TP * (2 CP if CP > 1), 16), or to ``seq_length`` whenever PP > 1 or EP > 1;
  ``pad128``: the collate's multiple of 128 only (what Bridge does with TP in {1, 2, 4, 8, 16} and PP = EP = 1);
  ``max``: every micro-batch padded to ``seq_length``;
  ``pack``: the micro-batch's samples packed into one row (THD, per-sample attention boundaries: the
  in-batch packing of Bridge main's VLM packing, PR #5285), no padding.
- **Freezing and recompute**: ``freeze_language_model``, ``freeze_vision_model``,
  ``freeze_vision_projection`` (Bridge's fields) and ``recompute`` ("none" | "selective" | "full").
- **Garbage collection** (``train.manual_gc``, ``train.manual_gc_interval``): default as Bridge's recipes
  (``recipes/common.py``: manual, every 100 steps): Python's automatic collector off during the measured
  rounds, collections between steps (``vlmdata.audit.workload.collector``). ``manual_gc=False`` leaves the automatic
  collector on, as Bridge's own ``TrainingConfig`` default does.

``sources`` records, for every field, where its value came from: "flag", "bridge config", "model config",
"derived" (computed as Bridge computes it, e.g. DP from the GPU count), "assumed" (a value the user's Bridge config
does not record and the audit had to guess, said in the notes) or "default" (the report lists them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from vlmdata.errors import VlmdataError

SEQ_POLICIES = ("bridge", "pad128", "max", "pack")
RECOMPUTE = ("none", "selective", "full")
PROVENANCE = ("flag", "bridge config", "model config", "derived", "assumed", "default")
PARALLEL_FIELDS = ("tp", "pp", "ep", "cp", "etp", "dp")


class RunSpecError(VlmdataError, ValueError):
    """Settings that do not describe a valid Megatron Bridge run."""


# Upper bounds, checked before anything is sized from them (a micro-batch of 10^12 rows was allocated)
MAX_MICRO_BATCH = 4096
MAX_GLOBAL_BATCH = 1 << 24
MAX_SEQ_LENGTH = 1 << 20  # tokens per row (Qwen3-VL's positions: 262,144)
MAX_PARALLEL = 1 << 16  # any parallel size, and DP
BOUNDS = {
    "micro_batch_size": MAX_MICRO_BATCH,
    "global_batch_size": MAX_GLOBAL_BATCH,
    "seq_length": MAX_SEQ_LENGTH,
    "default_micro_batches": MAX_GLOBAL_BATCH,
    **{name: MAX_PARALLEL for name in ("tp", "pp", "ep", "cp", "etp", "dp")},
}


def _show(value) -> str:
    """A value for a message; an integer too long to print (4,300+ digits raise) by its size."""
    if isinstance(value, int) and abs(value) >= 1 << 64:
        return f"an integer of {abs(value).bit_length()} bits"
    return f"{value!r:.60}"


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RunSpecError(f"`{name}` must be an integer >= 1, got {_show(value)}")
    if value > BOUNDS.get(name, value):
        raise RunSpecError(f"`{name}` must be at most {BOUNDS[name]}, got {_show(value)}")
    return value


@dataclass(frozen=True)
class RunSpec:
    """The user's run (see the module docstring). Frozen; validates itself."""

    micro_batch_size: int = 2
    global_batch_size: int | None = None  # None: micro_batch_size * dp * DEFAULT_MICRO_BATCHES
    seq_length: int = 4096
    seq_policy: str = "bridge"
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    etp: int | None = None  # expert tensor parallel; None: tp (Megatron's default)
    dp: int | None = None  # None: the smallest the other sizes allow
    freeze_language_model: bool = False
    freeze_vision_model: bool = False
    freeze_vision_projection: bool = False
    recompute: str = "none"
    use_distributed_optimizer: bool = True
    manual_gc: bool = True  # Bridge's recipes (recipes/common.py); TrainingConfig's own default is False
    manual_gc_interval: int = 100  # the recipes' value; 0: no periodic collection
    default_micro_batches: int = 16  # micro-batches per optimizer step when no GBS is given
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("micro_batch_size", "seq_length", "tp", "pp", "ep", "cp", "default_micro_batches"):
            _positive(name, getattr(self, name))
        for name in ("global_batch_size", "etp", "dp"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.seq_policy not in SEQ_POLICIES:
            raise RunSpecError(f"`seq_policy` must be one of {', '.join(SEQ_POLICIES)}, got {self.seq_policy!r}")
        if self.recompute not in RECOMPUTE:
            raise RunSpecError(f"`recompute` must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        experts = self.ep * self.expert_tp
        if (self.data_parallel * self.cp * self.tp) % experts:
            raise RunSpecError(
                f"`ep` * `etp` = {experts} must divide `dp` * `cp` * `tp` = {self.data_parallel * self.cp * self.tp} "
                "(Megatron places expert parallelism inside the data-, context- and tensor-parallel ranks)"
            )
        gbs, per = self.global_batch, self.micro_batch_size * self.data_parallel
        if gbs % per:
            raise RunSpecError(
                f"`global_batch_size` {gbs} must be a multiple of `micro_batch_size` * `dp` = "
                f"{self.micro_batch_size} * {self.data_parallel} = {per}"
            )
        if not isinstance(self.manual_gc, bool):
            raise RunSpecError(f"`manual_gc` must be true or false, got {self.manual_gc!r}")
        interval = self.manual_gc_interval
        if isinstance(interval, bool) or not isinstance(interval, int) or not 0 <= interval <= 1 << 31:
            raise RunSpecError(f"`manual_gc_interval` must be an integer >= 0 and <= {1 << 31}, got {_show(interval)}")
        for src in self.sources.values():
            if src not in PROVENANCE:
                raise RunSpecError(f"unknown provenance {src!r}")

    def check_sequence_split(self, sequence_parallel: bool = False) -> None:
        """Megatron Bridge's ``validate()`` on the sequence a rank holds: with CP > 1, ``seq_length`` a multiple of
        2 * CP (each sequence split into 2 * CP chunks), and of CP * TP with sequence parallelism and TP > 1 (the
        collate's padding multiple); a row padded to ``seq_length`` is then split evenly. Raises RunSpecError."""
        cp2 = 2 * self.cp if self.cp > 1 else 1
        sp = self.cp * self.tp if sequence_parallel and self.tp > 1 else 1
        multiple = math.lcm(cp2, sp)
        if self.seq_length % multiple:
            parts = [p for p, on in (("2 * `cp`", cp2 > 1), ("`cp` * `tp` (sequence parallel)", sp > 1)) if on]
            raise RunSpecError(
                f"`seq_length` {self.seq_length} must be a multiple of {' and '.join(parts)} = {multiple} (Megatron "
                "Bridge's validate(): each sequence is split evenly over the context- and sequence-parallel ranks)"
            )

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def data_parallel(self) -> int:
        """DP: as given, else the smallest that places EP*ETP inside DP*CP*TP."""
        if self.dp is not None:
            return self.dp
        need = self.ep * self.expert_tp
        return need // math.gcd(need, self.cp * self.tp)

    @property
    def global_batch(self) -> int:
        if self.global_batch_size is not None:
            return self.global_batch_size
        return self.micro_batch_size * self.data_parallel * self.default_micro_batches

    @property
    def micro_batches(self) -> int:
        """Micro-batches per optimizer step on one data-parallel rank: GBS / (MBS * DP)."""
        return self.global_batch // (self.micro_batch_size * self.data_parallel)

    @property
    def expert_data_parallel(self) -> int:
        """Ranks that replicate one expert shard: DP * CP * TP / (EP * ETP) (Megatron's expert-DP group)."""
        return self.data_parallel * self.cp * self.tp // (self.ep * self.expert_tp)

    @property
    def force_seq_length(self) -> bool:
        """Bridge's step pads every micro-batch to seq_length (PP > 1 or EP > 1)."""
        return self.pp > 1 or self.ep > 1

    @property
    def fixed_length(self) -> bool:
        """Every micro-batch is computed at ``seq_length`` (``max``, or Bridge's rule forcing it): one token shape,
        so what a new micro-batch brings is its images' shapes."""
        return self.seq_policy == "max" or (self.seq_policy == "bridge" and self.force_seq_length)

    def step_multiple(self) -> int:
        """The multiple Bridge's Qwen3-VL step pads to: lcm(TP * (2 CP if CP > 1 else 1), 16)."""
        divisible = self.tp * self.cp * 2 if self.cp > 1 else self.tp
        return math.lcm(divisible, 16)

    def padded_length(self, longest: int) -> int:
        """The row length a micro-batch whose longest row has ``longest`` tokens is computed at."""
        if longest < 1:
            return 0
        s = self.seq_length
        if self.seq_policy == "max":
            return s
        if self.seq_policy == "pack":
            return longest
        collate = min(s, -(-longest // 128) * 128)  # the collate: multiple of 128, capped at seq_length
        if self.seq_policy == "pad128":
            return collate
        if self.force_seq_length:
            return s
        m = self.step_multiple()
        return -(-collate // m) * m

    def loader_changes(self) -> dict[str, Any]:
        """The ``LoaderOptions`` fields that make the loader's batches follow the policy (the step's extra
        padding, when the policy needs one, is ``prepare``)."""
        out: dict[str, Any] = {"seq_length": self.seq_length, "micro_batch_size": self.micro_batch_size}
        if self.seq_policy == "pack":
            return out | {"packing": True, "pad_to_max_length": False}
        return out | {"packing": False, "pad_to_max_length": self.fixed_length, "pad_to_multiple_of": 128}

    def prepare(self, batch: dict) -> dict:
        """The batch as Bridge's step computes it: a padded batch from the loader (already at the collate's
        multiple of 128, or at seq_length) padded further to ``padded_length`` when the step's rule asks for
        more (a TP or CP whose lcm with 16 does not divide the row length): input_ids with 0, labels with
        -100, loss_mask with 0, position ids continued (Bridge's ``padding_utils``). Packed batches pass."""
        import torch  # torch stays out of `vlmdata audit --help`, which reads this module's constants
        import torch.nn.functional as F

        if batch.get("cu_seqlens_q") is not None or self.seq_policy == "pack":
            return batch
        ids = batch["input_ids"]
        cur = int(ids.shape[1])
        target = self.padded_length(cur) if self.seq_policy == "bridge" else cur
        if target <= cur:
            return batch
        extra = target - cur
        out = dict(batch)
        for key, value in (("input_ids", 0), ("labels", -100), ("loss_mask", 0.0), ("attention_mask", 0)):
            if isinstance(batch.get(key), torch.Tensor):
                out[key] = F.pad(batch[key], (0, extra), value=value)
        pos = batch.get("position_ids")
        if isinstance(pos, torch.Tensor) and pos.ndim == 2:
            add = torch.arange(cur, target, dtype=pos.dtype).unsqueeze(0).expand(pos.shape[0], -1)
            out["position_ids"] = torch.cat([pos, add], dim=1)
        return out

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with ``changes`` (validated)."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        """Every setting, the derived sizes and where each setting came from."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sources"}
        return {
            **own,
            "dp": self.data_parallel,
            "etp": self.expert_tp,
            "global_batch_size": self.global_batch,
            "micro_batches_per_step": self.micro_batches,
            "expert_data_parallel": self.expert_data_parallel,
            "padding_rule": self.padding_rule(),
            "sources": {k: self.sources.get(k, "default") for k in own},
        }

    def padding_rule(self) -> str:
        """The padding rule in words."""
        if self.seq_policy == "pack":
            return "in-batch packing: one row per micro-batch, per-sample attention, no padding"
        if self.seq_policy == "max":
            return f"every micro-batch padded to seq_length {self.seq_length}"
        if self.seq_policy == "pad128":
            return f"each micro-batch padded to a multiple of 128 (capped at {self.seq_length})"
        if self.force_seq_length:
            why = " and ".join(x for x, on in (("PP > 1", self.pp > 1), ("EP > 1", self.ep > 1)) if on)
            return f"Bridge: every micro-batch padded to seq_length {self.seq_length} ({why})"
        return (
            f"Bridge: a multiple of 128 (the collate, capped at {self.seq_length}), then of "
            f"lcm(TP{' * 2CP' if self.cp > 1 else ''}, 16) = {self.step_multiple()} (the step)"
        )
