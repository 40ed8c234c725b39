"""The typed records an audit's phases hand to the report: what a key means and which keys are always there.

They are ``TypedDict``s (plain dicts at run time: the report's JSON is unchanged); a key marked ``NotRequired`` may
be absent, every other key is always written by its producer.

- ``StepRecord``: one measured global step (``phases.rounds.global_record``, then ``MeasuredRounds.global_step``
  and ``analysis.compose.compose_record``); its ``micro`` list holds ``MicroRecord``s.
- ``SourceResult``: one source's entry of the runner's result (``phases.result.sources_result``).
- ``Measurement``: how the figures were obtained (``phases.result.measurement``): rounds, stop reason, warm-up
  (``WarmupBlock``), seconds, garbage collection, compile statistics (``CompileSummary``).
- ``AuditResult``: what ``phases.runner.run_audit`` returns for one rank (``phases.result.header`` first).
- ``ReportSource`` and ``Report``: one source of the report and the report's top level
  (``report.build.build_report``; the session adds ``wall_s`` and ``plan``).

They live on the analysis floor, the lowest that reads them (``attribution`` reads a report, ``metrics`` and
``compose`` read step records), so that the phases (producers) and the report (consumer) both import them
downwards. ``Records`` is what a figure reads (``metrics``, ``ranks``, ``straggler_check``): any sequence of step
records, the runner's, ranks merged, a log's intervals (``vlmdata.audit.logs.records``). No imports beyond ``typing``
and ``collections.abc``; no ``from __future__ import annotations``: ``NotRequired`` must be seen at
run time (``__required_keys__``, which ``tests/audit/test_result_types.py`` checks against a run).
"""

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, Required, TypedDict

__all__ = [
    "Records",
    "MicroRecord",
    "StepRecord",
    "CensusBlock",
    "SourceResult",
    "WarmupBlock",
    "CompileSummary",
    "Measurement",
    "AuditResult",
    "ReportSource",
    "Report",
]


Records = Sequence[Mapping[str, Any]]  # step records as a figure reads them (module docstring)


class MicroRecord(TypedDict):
    """One micro-batch of a measured step: its device time and work (the straggler model's input)."""

    ms: float | None
    decoder_ms: float | None
    wait_ms: float
    tokens_total: int | None
    patches: int | None
    patch_sq: int | None
    ep_all_to_all_ms: NotRequired[float]  # composed steps only (``compose_record``)


class StepRecord(TypedDict):
    """One measured global step on one rank (``phases.rounds`` docstring: what is timed and how)."""

    step: int
    round: int
    micro_batches: int
    step_ms: float
    data_wait_ms: float
    loader_wait_ms: float
    wait_kind: str  # "steady" or "epoch_boundary"
    times_ms: dict[str, float]  # per stage (``vlmdata.audit.workload.stages``)
    peak_mem_bytes: int | None
    loss: float | None
    # the work summed over the micro-batches (``metrics.SUMMED``, then the sum of squared patches per image)
    samples: int
    images: int
    patches: int
    tokens_total: int
    tokens_nonpad: int
    tokens_loss: int
    tokens_visual: int
    tokens_padding: int
    patch_sq: int
    # model FLOPs (``metrics.FLOP_FIELDS``; ``total_flops`` is named ``flops``): None when a micro-batch had none
    flops: float | None
    lm_flops: float | None
    lm_layers_flops: float | None
    lm_head_flops: float | None
    vision_flops: float | None
    projector_flops: float | None
    micro: list[MicroRecord]
    plain_layers: dict[str, Any] | None
    visual_tokens_per_sample: list[int]
    first_seen_shapes: int
    census_match: bool | None
    keys: list[str]
    # written by ``MeasuredRounds.global_step`` after ``global_record``
    started_unix: NotRequired[float]
    gc_in_step_ms: NotRequired[float]
    graphs_compiled_in_step: NotRequired[int]
    # a slice's step composed into the run's (``compose.compose_record``)
    measured_step_ms: NotRequired[float]
    composed_decoder: NotRequired[str]


class CensusBlock(TypedDict):
    """What a source's census counted (``phases.census``)."""

    micro_batches: int
    samples: int
    longest_tokens: int
    mismatched_steps: int
    epoch_samples: Any  # (tokens, patches per image) of each sample of an epoch on this rank
    rank_epoch_samples: Any


class SourceResult(TypedDict):
    """One source's entry of the runner's result (``phases.result.sources_result``)."""

    trains: Any  # what trained under this source's configuration (the workload's ``trains()``), or None
    records: list[StepRecord]  # the stop rule's window
    loader: Any  # the live loader's record (``LiveLoaders.record``)
    world_size: int
    paired: bool
    definition: Any
    startup_wait_ms: float | None
    census: CensusBlock
    pairing: dict[str, Any] | None  # paired sources: steps that saw exactly real's samples
    oom: dict[str, Any] | None  # where it ran out of memory, or None


class WarmupBlock(TypedDict):
    """The warm-up's entry of the measurement (``phases.warmup.Warmup.describe``)."""

    shape_batches: int
    vision_batches: int  # of shape_batches: the vision tower alone (their new items were its own)
    full_steps: int
    shape_items: int
    seconds: float
    loader_steps_per_source: int
    loader_model_micro: int  # micro-batches of each untimed step that ran the model (the rest only loaded)
    loader_seconds: float


class CompileSummary(TypedDict):
    """What torch.compile did (``phases.result``): parts, graphs, graphs built in timed steps, per part."""

    parts: str
    blocks: Any
    graphs: int | None
    graphs_in_timed_steps: int
    by_part: dict[str, dict[str, Any]]
    compile_seconds: float
    fallbacks: list[str]
    notes: list[str]


class Measurement(TypedDict):
    """How the figures were obtained (``phases.result.measurement``)."""

    method: str  # "interleaved"
    unit: str  # "global step"
    micro_batches_per_step: int
    block: int
    rounds: int
    steps_run: int
    steps_per_source: int
    real_epoch_steps: int
    real_epoch_micro_batches: Any
    samples_per_step: int
    epoch_wrap: Any
    stop: str | None  # why the rounds stopped
    open: list[Any]
    min_steps: int
    max_steps: int
    budget_s: float
    precision: str
    order_first_round: list[str]
    warmup: WarmupBlock
    prepare_seconds: float
    measure_seconds: float
    total_seconds: float
    load_average_end: list[float] | None
    gc: dict[str, Any]  # ``workload.collector.Collector.describe``
    compile: CompileSummary | None


class AuditResult(TypedDict):
    """One rank's result of ``run_audit`` (its docstring); ``header`` writes the first five keys."""

    config: dict[str, Any]
    run: dict[str, Any]  # ``planning.resolve.Resolved.describe``
    environment: dict[str, Any]
    workload: dict[str, Any]
    sources: dict[str, SourceResult]
    composition: NotRequired[dict[str, Any]]
    benchmark: NotRequired[dict[str, Any]]
    straggler_model: NotRequired[dict[str, Any] | None]
    measurement: NotRequired[Measurement]
    plan: NotRequired[dict[str, Any]]


class ReportSource(TypedDict, total=False):
    """One source of a run's report: the result's entry without ``world_size``, with its summary (None when it ran
    out of memory or measured nothing) and, under torchrun, each rank's summary."""

    summary: Required[dict[str, Any] | None]
    records: list[StepRecord]
    per_rank: list[dict[str, Any]]
    trains: Any
    loader: Any
    paired: bool
    definition: Any
    startup_wait_ms: float | None
    census: CensusBlock
    pairing: dict[str, Any] | None
    oom: dict[str, Any] | None


class Report(TypedDict):
    """A run's report (``report.build.build_report``; ``vlmdata.audit.report`` docstring)."""

    schema: str
    kind: str  # "run"
    config: dict[str, Any]
    environment: dict[str, Any]
    workload: dict[str, Any]
    world_size: int
    measurement: Measurement | None
    run: dict[str, Any] | None
    composition: dict[str, Any] | None
    straggler_model: dict[str, Any] | None
    benchmark: dict[str, Any] | None
    plan: dict[str, Any] | None
    notes: list[str]
    stopped: Any
    definitions: dict[str, Any]
    sources: dict[str, ReportSource]
    stragglers: dict[str, Any]
    straggler_check: NotRequired[Any]
    verdict: NotRequired[dict[str, Any] | None]
    attribution: NotRequired[Any]
    wall_s: NotRequired[float]
