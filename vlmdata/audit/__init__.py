"""Reference training workload for ``vlmdata audit``.

The audit runs one training workload (a Qwen3-VL-MoE architecture with random
weights, built from a config: nothing is downloaded) on mock, synthetic and
real inputs and explains the throughput gap stage by stage.

- :mod:`vlmdata.audit.config`: ``AuditConfig``, the settings of a run (frozen, validated, defaults once).
- :mod:`vlmdata.audit.session`: ``run_session``, a whole ``vlmdata audit`` command as one call.
- :mod:`vlmdata.audit.runner`: ``run_audit`` and its phases (census, warmup, rounds, stop, result).
- :mod:`vlmdata.audit.model`: size presets, ``build_model``, ``model_summary``.
- :mod:`vlmdata.audit.step`: one timed training step on a Bridge-format batch.
- :mod:`vlmdata.audit.flops`: model FLOPs and token counts from actual shapes.
- :mod:`vlmdata.audit.user_step`: ``--step module:function`` run so that the user's errors, exits and
  hangs become one line.
- :mod:`vlmdata.audit.guard`: the checks made before anything is measured (device, output folder, paths).
- :mod:`vlmdata.audit.report`, :mod:`vlmdata.audit.logs`: the report, and the comparison of two training logs.

See ``docs/reference-workload.md`` and ``docs/audit.md``.
"""
