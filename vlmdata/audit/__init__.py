"""``vlmdata audit``: one training workload on mock, synthetic and real inputs, the gap explained.

The folders are the audit's flow; imports point down this list only (``tests/test_architecture.py``)::

    phases -> report -> logs -> analysis -> planning -> workload -> settings -> sources

- ``sources/``: what is measured: the audit-source registry (``registry``: real, synthetic, the mocks;
  ``AuditError``), what the real source reads (``real_data``), what the generated ones write (``generated``).
- ``settings/``: what the user asked for, resolved once before anything is built: ``AuditConfig``
  (``config``), the device defaults, the Bridge YAML and the model's config.json (``bridge_*``, ``model_config``,
  ``model_checks``, ``peft``), the run's step semantics (``run_spec``), the benchmark's configuration beside the
  run's (``benchmark``) and the checks made first (``guard``).
- ``workload/``: the step that is timed: the reference model (``model``, ``kernels``, ``compiled``, ``lora``), one
  Bridge global step (``step``, ``optimizer``), the workloads (``workloads``; a user's ``--step``: ``user_step``),
  FLOPs and stage arithmetic (``flops``, ``stages``), garbage collection, the process group (``distributed``).
- ``planning/``: the run resolved once into the ``AuditPlan`` every phase reads (``resolve``, ``plan``) and what
  the model and its slice will cost (``estimate``: the slice that fits).
- ``analysis/``: the figures: rates and intervals (``metrics``, ``resample``), the verdict and the knobs, the
  decision audit (``decisions``, ``knob_effects``, ``cards``), stragglers, the slice composition (``compose``),
  the layout composition and the benchmark's attribution (``layout``, ``attribution``); the typed records the
  phases hand the report (``result_types``: ``StepRecord``, ``SourceResult``, ``Measurement``, ``Report``).
- ``logs/``: two training logs compared (``audit compare``).
- ``report/``: the report's tables, plots and files.
- ``phases/``: one run as phases (``runner``: census, warm-up, live loaders, measured rounds, stop rule, result),
  a sweep of configurations (``sweep``), the plan shown before a run (``preview``) and the whole command
  (``session``: ``run_session``).

Old import paths (``vlmdata.audit.config``, ``vlmdata.audit.runner``, ... before 2026-12-04) keep working: a
finder maps each to its new home (``MOVED``), so ``vlmdata.audit.config is vlmdata.audit.settings.config``.
See ``docs/audit.md`` and ``docs/reference-workload.md``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old module (vlmdata.audit.<name>) -> its home since the wing became sub-packages
MOVED = {
    **{
        m: f"settings.{m}"
        for m in (
            "config",
            "defaults",
            "run_spec",
            "model_config",
            "model_checks",
            "bridge_config",
            "bridge_yaml",
            "bridge_model",
            "bridge_run",
            "bridge_checks",
            "benchmark",
            "peft",
            "guard",
        )
    },  # fmt: skip
    **{m: f"planning.{m}" for m in ("resolve", "plan", "estimate")},
    "preview": "phases.preview",
    "inputs": "sources.registry",
    "real_data": "sources.real_data",
    "generated": "sources.generated",
    **{
        m: f"workload.{m}"
        for m in (
            "workloads",
            "user_step",
            "model",
            "kernels",
            "compiled",
            "step",
            "optimizer",
            "batch_checks",
            "batch_shapes",
            "flops",
            "stages",
            "collector",
            "distributed",
            "lora",
        )
    },  # fmt: skip
    **{
        m: f"phases.{m}"
        for m in (
            "session",
            "runner",
            "census",
            "warmup",
            "live_loaders",
            "rounds",
            "stop",
            "result",
            "sweep",
        )
    },  # fmt: skip
    **{
        m: f"analysis.{m}"
        for m in (
            "metrics",
            "verdict",
            "knobs",
            "decisions",
            "knob_effects",
            "resample",
            "cards",
            "ranks",
            "straggler_model",
            "straggler_cost",
            "straggler_check",
            "compose",
            "layout",
            "attribution",
        )
    },  # fmt: skip
    "run_tables": "report.run_tables",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)  # the new module itself: one module object under two names

    def exec_module(self, module) -> None:
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    """``vlmdata.audit.<old>`` -> the module ``MOVED`` names (the package docstring)."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(f"{__name__}.{MOVED[name]}"))


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
