"""Each source's live loader during an audit: started once, read by the warm-up's untimed steps and the
measured rounds.

``LiveLoaders.start()`` opens every source's loader (workers forked once; they stay alive across epochs) and
fetches its first batch: that wait is the source's start-up (``startup`` ms, reported apart, never inside a
timed step). ``untimed_steps(n)`` runs ``n`` untimed global steps per source: each takes a whole global step's
micro-batches from the loader (what the timed steps then read is what they read without it) and runs the model
on the last ``UNTIMED_MODEL_MICRO`` of them and the optimizer step, so that the loader's workers refill their
queues while the model runs, as they do in a timed step, without a whole untimed global step of model time per
source (a step of 16 padded Qwen3-VL-30B-A3B micro-batches takes 9 s on the H200). ``next(name, i)`` hands out the
next batch (the one fetched at start-up first, marked ``startup_excluded``); ``note_epoch(name)`` says whether
the batch just handed out opened a new epoch. ``record(name)`` is what the report says about the loader: the
source, its options, the factory and the loader's own stats.
"""

from __future__ import annotations

from typing import Any, Iterator

from vlmdata.audit.phases.census import iterate, next_batch
from vlmdata.audit.sources.registry import Input

__all__ = ["LiveLoaders", "UNTIMED_MODEL_MICRO"]

# micro-batches of an untimed global step that run the model (the rest are only taken from the loader): their
# model time is the loader's time to refill its queue before the first timed step
UNTIMED_MODEL_MICRO = 4


class LiveLoaders:
    """The live loaders of every source (module docstring)."""

    def __init__(self, run: Any, inputs: dict[str, Input]):
        self.run, self.inputs = run, inputs
        self.live: dict[str, Any] = {}
        self.its: dict[str, Iterator] = {}
        self.pending: dict[str, Any] = {}
        self.startup: dict[str, float] = {}
        self.records: dict[str, dict] = {}
        self.last_epoch: dict[str, Any] = {}

    @property
    def total(self) -> int:
        """Micro-batches the census covers per source (the most a loader is asked for)."""
        return self.run.plan.horizon * max(self.run.plan.micro_of(n) for n in self.run.plan.names)

    def start(self) -> None:
        """Open every source's loader and fetch its first batch (its start-up wait)."""
        run = self.run
        factory = run.factory
        for name in run.plan.names:
            self.live[name], opts = run.open(self.inputs[name])
            self.records[name] = {
                "source": self.inputs[name].name,
                "kwargs": {k: v for k, v in opts.items() if isinstance(v, (int, float, str, bool, type(None)))},
                "factory": f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', '?')}",
            }
            self.its[name] = iterate(self.live[name], inline=False)
            t0 = run.clock()
            self.pending[name] = next_batch(self.its[name], name, 0, self.total)
            self.startup[name] = (run.clock() - t0) * 1e3
            if getattr(self.live[name], "last_epoch", None) is not None:
                self.last_epoch[name] = self.live[name].last_epoch

    def untimed_steps(self, n: int) -> int:
        """``n`` untimed global steps per source on the live loaders (module docstring); returns the most
        micro-batches of one that ran the model (0 when ``n`` is 0)."""
        run, most = self.run, 0
        for _ in range(n):
            for name in run.plan.names:
                run.configure(name)
                n_micro = run.plan.micro_of(name)
                model = min(n_micro, UNTIMED_MODEL_MICRO)
                most = max(most, model)
                run.workload.begin_step(model)
                for j in range(n_micro):
                    batch = self.pending.pop(name) if name in self.pending else self.next_steady(name, j)
                    batch = run.plan.spec(name).prepare(batch)
                    if j >= n_micro - model:
                        run.workload.micro(batch)
                run.workload.finish()
                self.note_epoch(name)
        return most

    def next_steady(self, name: str, i: int):
        """The loader's next batch (``i``: its index, for the message when there is none)."""
        return next_batch(self.its[name], name, i, self.total)

    def next(self, name: str, i: int) -> tuple[Any, str]:
        """(batch, kind): the batch fetched at start-up first ("startup_excluded"), then the loader's ("steady")."""
        if name in self.pending:
            return self.pending.pop(name), "startup_excluded"
        return self.next_steady(name, i), "steady"

    def note_epoch(self, name: str) -> bool:
        """Record the loader's epoch; True when this batch opened an epoch later than any before."""
        ep = getattr(self.live[name], "last_epoch", None)
        if ep is None:
            return False
        new = ep > self.last_epoch.get(name, ep)
        self.last_epoch[name] = max(ep, self.last_epoch.get(name, ep))
        return new

    def keys(self, name: str) -> list[str]:
        """The sample keys of the batch just handed out."""
        return list(getattr(self.live[name], "last_keys", []) or [])

    def record(self, name: str) -> dict | None:
        """The report's ``loader`` entry of a source (its stats as of now)."""
        stats = getattr(self.live.get(name), "stats", None)
        if stats is not None and hasattr(stats, "to_json"):
            self.records[name]["stats"] = stats.to_json()
        return self.records.get(name)
