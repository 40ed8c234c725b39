"""``--step module:function``: the user's own training step as the audit's workload, run so that whatever
the user's code does becomes one clear line, never a vlmdata traceback, a silent exit or a hang.

``UserWorkload(spec, device, options)`` imports ``module`` (from the working directory too) and checks,
before anything is measured, that ``function`` can be called as ``function(batch, **options)`` (the
options are a sweep's values). Each call (``warm``, a measured step) is guarded:

- an exception raised by the user's code becomes ``AuditError``: "the step mod:fn raised KeyError: 'x'
  (at step.py:12 in fn: ``return batch["x"]``)": the user's exception as theirs, with the one frame of
  their code that raised it (the innermost frame outside vlmdata, torch and the standard library);
  ``torch.OutOfMemoryError`` is not an error but a result and passes through to the runner;
- ``sys.exit()`` / ``raise SystemExit`` inside the step (or at import) becomes ``AuditError``: a step that
  exits would otherwise end the audit with exit 0 and no verdict, and a CI gate would pass;
- a step that does not return within the time limit is interrupted (``SIGALRM`` in the main thread) and
  becomes ``AuditError`` naming the limit. The limit is what the caller set (``set_step_limit`` /
  ``time_limit``; the CLI sets the audit's ``budget_s``: no single step may outlast the whole measuring
  budget), or ``timeout_s``; warm-up calls and the first step get ``COLD_FACTOR`` times the limit (they
  may compile); a step stuck in native code that a signal cannot interrupt ends the process with one line
  and exit code 2 after a grace period (only with ``hard=True``, which the CLI uses);
- the step's batch is a shallow copy (a step may pop keys; the audit reads the batch's shapes after it), and a
  step that returns a generator or coroutine (a ``yield`` or ``async def`` step: its body never ran) is
  ``AuditError``;
- the returned dict is checked: ``times_ms`` a dict of finite non-negative milliseconds (with ``total``),
  ``flops`` and ``peak_mem_bytes`` non-negative numbers or absent; anything else is ``AuditError``.

A step returns ``{"times_ms": {...}, "flops": N, "peak_mem_bytes": N, "loss": x}`` (each optional);
otherwise it is timed as one block and TFLOP/s are not reported. Warming calls it once.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import linecache
import math
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Iterator

import torch

from vlmdata.audit.sources.registry import AuditError
from vlmdata.audit.workload.batch_shapes import shape_items
from vlmdata.audit.workload.flops import count_tokens
from vlmdata.audit.workload.model import IMAGE_TOKEN_ID

HARD_GRACE_S = 30.0  # after the limit, how long a step stuck in native code gets before the process ends
COLD_FACTOR = 10.0  # warm-up calls and the first step may compile (torch.compile, cuDNN plans): 10x the limit
_LIMIT: contextvars.ContextVar[tuple[float, bool] | None] = contextvars.ContextVar("vlmdata_step_limit", default=None)
_VLMDATA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))


class StepTimeout(BaseException):
    """Raised inside the user's step by the watchdog (a BaseException: ``except Exception`` in the step
    cannot swallow it)."""


def set_step_limit(seconds: float | None, hard: bool = False) -> contextvars.Token:
    """From now on every user step is stopped after ``seconds`` (None: no limit); ``hard``: a step that cannot
    be interrupted ends the process (one line, exit 2) ``HARD_GRACE_S`` later. Returns the token for
    ``reset_step_limit``."""
    return _LIMIT.set(None if seconds is None else (float(seconds), hard))


def reset_step_limit(token: contextvars.Token) -> None:
    """Undo ``set_step_limit``."""
    _LIMIT.reset(token)


@contextlib.contextmanager
def time_limit(seconds: float | None, hard: bool = False) -> Iterator[None]:
    """``set_step_limit`` for the duration of a block."""
    token = set_step_limit(seconds, hard)
    try:
        yield
    finally:
        reset_step_limit(token)


def _user_frame(tb) -> str:
    """'file:line in function: code' of the innermost traceback frame in the user's code."""
    frames = traceback.extract_tb(tb)

    def theirs(f) -> bool:
        p = os.path.abspath(f.filename)
        return not (p.startswith(_VLMDATA_DIR + os.sep) or p.startswith(_TORCH_DIR) or p.startswith(_STDLIB_DIR))

    mine = [f for f in frames if theirs(f)] or frames
    if not mine:
        return ""
    f = mine[-1]
    code = (f.line or linecache.getline(f.filename, f.lineno or 0)).strip()
    where = f"{os.path.relpath(f.filename) if not f.filename.startswith('<') else f.filename}:{f.lineno} in {f.name}"
    return f" (at {where}" + (f": {code[:160]}" if code else "") + ")"


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return f"{type(e).__name__}" + (f": {text}" if text else "")


class _Watchdog:
    """SIGALRM after ``seconds`` in the main thread (raises StepTimeout there); with ``hard`` a thread that
    ends the process when the step still has not returned ``HARD_GRACE_S`` later."""

    def __init__(self, limit: tuple[float, bool] | None, spec: str):
        self.limit, self.spec = limit, spec
        self.active = limit is not None and threading.current_thread() is threading.main_thread()
        self.done = threading.Event()

    def __enter__(self):
        if not self.active:
            return self
        assert self.limit is not None
        seconds, hard = self.limit

        def fire(signum, frame):
            raise StepTimeout()

        self.old = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
        if hard:
            threading.Thread(target=self._hard, args=(seconds,), name="vlmdata-step-watchdog", daemon=True).start()
        return self

    def _hard(self, seconds: float) -> None:
        if self.done.wait(seconds + HARD_GRACE_S):
            return
        try:
            sys.stderr.write(
                f"error: the step {self.spec} did not return within {seconds:g} s (the audit's budget_s) and "
                "could not be interrupted (it is stuck outside Python); stopping\n"
            )
            sys.stderr.flush()
        finally:
            os._exit(2)

    def __exit__(self, *exc):
        self.done.set()
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False


def _load(spec: str):
    mod_name, _, fn_name = spec.partition(":")
    if not mod_name or not fn_name:
        raise AuditError(f"`step` must be module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        raise AuditError(f"cannot load `step` {spec!r}: {e}") from None
    except SyntaxError as e:
        raise AuditError(f"cannot load `step` {spec!r}: {e.msg} ({e.filename}:{e.lineno})") from None
    except (Exception, SystemExit) as e:  # the user's module raised while importing
        raise AuditError(
            f"importing the `step` module {mod_name!r} raised {_describe(e)}{_user_frame(e.__traceback__)}"
        ) from None
    try:
        fn = getattr(module, fn_name)
    except AttributeError:
        raise AuditError(f"cannot load `step` {spec!r}: module {mod_name!r} has no attribute {fn_name!r}") from None
    if not callable(fn):
        raise AuditError(f"`step` {spec!r} is not callable")
    return fn


def _check_signature(fn, spec: str, options: dict) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check before calling it
    try:
        sig.bind(object(), **options)
    except TypeError as e:
        call = ", ".join(["batch", *[f"{k}=..." for k in options]])
        raise AuditError(
            f"`step` {spec!r} has the signature {fn.__name__ if hasattr(fn, '__name__') else spec}{sig}, but the "
            f"audit calls it as ({call}): {e}"
        ) from None


def _number(v, what: str, spec: str) -> float | None:
    if v is None:
        return None
    try:
        bad = isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
    except OverflowError:  # an integer past float's range (10**400)
        bad = True
    if bad:
        try:
            shown = repr(v) if len(repr(v)) <= 80 else repr(v)[:77] + "..."
        except ValueError:  # an integer of 4,300+ digits: Python will not print it
            shown = f"an integer of {int(v).bit_length()} bits"
        raise AuditError(
            f"the `step` function {spec} returned {what}={shown}: expected a finite number >= 0 (or nothing)"
        )
    return v


def _checked(ret: Any, spec: str) -> dict:
    """The step's return value as a checked dict (an empty one when it returned something else)."""
    if not isinstance(ret, dict):
        return {}
    if type(ret) is not dict:  # a subclass's methods are the user's code: read it once, as a plain dict
        try:
            ret = dict(ret)
        except Exception as e:  # noqa: BLE001 - the user's code: their exception, reported as theirs
            raise AuditError(
                f"the `step` function {spec} returned a {type(ret).__name__} that cannot be read ({_describe(e)})"
            ) from None
    times = ret.get("times_ms")
    if times is not None:
        if not isinstance(times, dict) or not all(isinstance(k, str) for k in times):
            raise AuditError(
                f"the `step` function {spec} returned times_ms={times!r:.100}: expected {{stage: milliseconds}}"
            )
        for k, v in times.items():
            _number(v, f"times_ms[{k!r}]", spec)
    _number(ret.get("flops"), "flops", spec)
    _number(ret.get("peak_mem_bytes"), "peak_mem_bytes", spec)
    loss = ret.get("loss")
    if loss is not None and (isinstance(loss, bool) or not isinstance(loss, (int, float))):
        try:
            loss = float(loss)  # a 0-d tensor
        except (TypeError, ValueError):
            raise AuditError(f"the `step` function {spec} returned loss={loss!r:.100}: expected a number") from None
        ret = {**ret, "loss": loss}
    return ret


class UserWorkload:
    """``--step module:function``: ``function(batch, **options)`` runs one training step (module docstring)."""

    def __init__(self, spec: str, device: str, options: dict | None = None, timeout_s: float | None = None):
        if not isinstance(spec, str):
            raise AuditError(f"`step` must be 'module:function', got {type(spec).__name__}")
        self.options = dict(options or {})  # sweep values, passed to the function as keyword arguments
        fn = _load(spec)
        _check_signature(fn, spec, self.options)
        self.fn, self.name, self.cuda = fn, spec, torch.device(device).type == "cuda"
        self.timeout_s = timeout_s
        self._calls = 0
        self._last: dict = {}

    def _limit(self, cold: bool) -> tuple[float, bool] | None:
        limit = (self.timeout_s, False) if self.timeout_s is not None else _LIMIT.get()
        return None if limit is None else (limit[0] * (COLD_FACTOR if cold else 1.0), limit[1])

    def _call(self, batch: dict, cold: bool = False):
        """The user's function on ``batch``, guarded (module docstring)."""
        limit = self._limit(cold or not self._calls)
        self._calls += 1
        try:
            with _Watchdog(limit, self.name):
                ret = self.fn(dict(batch), **self.options)  # a copy: the step may pop keys the audit reads after it
        except torch.OutOfMemoryError:
            raise  # a result the runner records, not an error
        except StepTimeout:
            assert limit is not None
            raise AuditError(
                f"the `step` function {self.name} did not return within {limit[0]:g} s (the audit's `budget_s`"
                + (
                    f" x {COLD_FACTOR:g} for a first or warm-up call"
                    if limit[0] != (self._limit(False) or limit)[0]
                    else ""
                )
                + "): stopped; check it for a hang, or raise `budget_s`"
            ) from None
        except SystemExit as e:
            raise AuditError(
                f"the `step` function {self.name} called sys.exit({e.code!r}){_user_frame(e.__traceback__)}: a step must "
                "return (or raise); the audit stops without a verdict"
            ) from None
        except (Exception, GeneratorExit) as e:  # noqa: BLE001 - the user's code: their exception, reported as theirs
            raise AuditError(
                f"the `step` function {self.name} raised {_describe(e)}{_user_frame(e.__traceback__)}"
            ) from None
        if inspect.isgenerator(ret) or inspect.iscoroutine(ret) or inspect.isasyncgen(ret):
            kind = {"async_generator": "an async generator"}.get(type(ret).__name__, f"a {type(ret).__name__}")
            if not inspect.isasyncgen(ret):
                ret.close()  # never started: closing it runs nothing (and a coroutine warns no more)
            raise AuditError(
                f"the `step` function {self.name} returned {kind}: its body never ran (a step that yields or is "
                "'async def'); the audit needs a function that runs one training step when called"
            )
        return ret

    def shape_items(self, batch: dict) -> frozenset:
        return shape_items(batch)

    def warm(self, batch: dict) -> None:
        self._call(batch, cold=True)
        if self.cuda:
            torch.cuda.synchronize()

    def begin_step(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def __call__(self, batch: dict) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        ret = self._call(batch)
        if self.cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        self._last = _checked(ret, self.name)
        times = dict(self._last.get("times_ms") or {"step": ms})
        times.setdefault("total", ms)
        peak = self._last.get("peak_mem_bytes", torch.cuda.max_memory_allocated() if self.cuda else None)
        return {"times_ms": times, "wall_ms": ms, "peak_mem_bytes": peak, "loss": self._last.get("loss")}

    def flops(self, batch: dict) -> dict:
        out: dict[str, Any] = count_tokens(batch, IMAGE_TOKEN_ID)
        out["total_flops"] = self._last.get("flops")
        return out

    def recover(self) -> None:
        if self.cuda:
            torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        return {"kind": "user", "name": self.name, **({"options": self.options} if self.options else {})}

    def close(self) -> None:
        pass
