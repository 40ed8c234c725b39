"""User workloads for `vlmdata audit --step` tests on a fake clock: each step advances ``CLOCK`` by a known
cost instead of sleeping, and ``clocked(monkeypatch)`` makes the CLI's audits (one run or a sweep) time
themselves on ``CLOCK``. Verdicts, exit codes and sweep decisions are then functions of the costs below,
never of the machine's load (a loaded machine makes real sleeps late, and turned MISLEADING into UNDECIDED).

``python audit_clocked_step.py ARGS...`` runs ``vlmdata ARGS...`` on the fake clock (for torchrun tests).
"""

import functools
import sys

from audit_fakes import FakeClock

from vlmdata.audit.workload.model import IMAGE_TOKEN_ID

CLOCK = FakeClock()


def _spend(ms: float, flops: float | None = 1e9) -> dict:
    """Advance the clock by ``ms``; ``total`` is that cost too, so every per-micro-batch time the audit records
    (the straggler model's input) is the fake clock's, not the machine's (a step's ``total`` defaults to its
    real wall time: under load, noise the straggler model then fitted)."""
    CLOCK.now += ms / 1e3
    return {"flops": flops, "loss": 0.0, "times_ms": {"step": ms, "total": ms}}


def by_visual_tokens(batch):
    """3 ms + 0.2 ms per visual token: image-free batches are fast, real ones slow."""
    return _spend(3 + 0.2 * int((batch["input_ids"] == IMAGE_TOKEN_ID).sum()))


def constant(batch):
    """40 ms whatever the batch, no FLOPs reported."""
    CLOCK.now += 0.04


def per_step_overhead(batch, micro_batch_size=1, **options):
    """A fixed 20 ms per step plus 1 ms per sample: larger micro-batches win (sweep tests)."""
    return _spend(20 + 1.0 * int(batch["input_ids"].shape[0]))


def clocked(monkeypatch) -> FakeClock:
    """Every ``run_audit`` the CLI starts (one audit or each configuration of a sweep) timed on ``CLOCK``."""
    import vlmdata.audit.phases.session as session
    import vlmdata.audit.phases.sweep as sweep
    from vlmdata.audit.phases.runner import run_audit

    CLOCK.now = 0.0
    timed = functools.partial(run_audit, clock=CLOCK)
    monkeypatch.setattr(session, "run_audit", timed)
    monkeypatch.setattr(sweep, "run_audit", timed)
    return CLOCK


if __name__ == "__main__":
    import audit_clocked_step  # the module `--step audit_clocked_step:...` imports, not this __main__
    import pytest

    from vlmdata.cli.main import main

    with pytest.MonkeyPatch.context() as mp:
        audit_clocked_step.clocked(mp)
        sys.exit(main(sys.argv[1:]))
