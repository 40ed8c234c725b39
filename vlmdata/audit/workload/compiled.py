"""The reference model's blocks through ``torch.compile``: one stable call per part, dynamic sizes, a recompile
budget.

``compile_blocks(model, parts)`` replaces the ``forward`` of each vision block and/or decoder layer (the parts
of ``COMPILE_PARTS``: "vision", "decoder", "all", "none") by a dispatcher. While the part is on
(``set_compiled``) and within its budget, the dispatcher calls that part's compiled function, one per part
(its own code object, so its own dynamo cache and recompile limit; transformers >= 5.2x wraps every layer's
``forward`` in one shared ``forward_with_checkpointing``, whose cache the vision blocks and decoder layers
would otherwise share), always with the same signature:

- the block and its hidden states, and the keyword arguments its own caller passes (``cu_seqlens``,
  ``max_seqlen``, ``position_embeddings``, ``attention_mask``, ``position_ids``, ...), **without** the
  precomputed vision inputs (``image_*``, ``video_*``) that the Qwen-VL models hand down through every
  ``**kwargs`` (into the decoder layers too: absent on image-free batches, one shape per image count, they
  made a new graph per batch kind), and for a vision block without the flags no vision block reads
  (``VISION_DROPPED``: Qwen3-VL hands ``use_cache`` down to its tower; the tower run alone does not);
- for a packed decoder row (``kernels.packed``), its sample boundaries as the attention's own
  ``cu_seq_lens_q`` / ``max_length_q`` arguments: a traced input and a symbolic int, instead of a module
  global read inside the graph (a constant there: one graph per packed row's longest sample).

The functions are compiled with ``dynamic=True``: sequence lengths, patch and image counts and the longest
segment are symbolic from the first call, so one graph serves every image grid and packed length (another for
padded rows beside packed ones, for sizes 0/1, or past a threshold inductor guards); the number of graphs does
not grow with the number of distinct grids. Hidden states that are a view (the first vision block's input) are
cloned first (dynamo guards a view's base apart), and duck sizing is off for the process (two sizes equal by
chance in the first batch would share a symbol, and the first batch where they differ would build a graph).

The budget: the dispatcher counts the dynamo graphs each part's calls build (``torch._dynamo.utils.counters``)
and the wall time of those calls (compile seconds: the forward's tracing and compilation; on CUDA the call
itself is asynchronous). Past ``max_graphs`` graphs (``set_budget``; default ``DEFAULT_MAX_GRAPHS``) the part
runs its plain forward from then on: the same maths on eager kernels. ``compile_stats()`` says per part:
``{"graphs", "recompiles", "compile_seconds", "fallback", "reason"}``; the audit puts it in the report, whose
stage efficiencies are then eager for that part while every source still runs the same model (the ratios
stay paired).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from typing import Any

import torch

from vlmdata.audit.settings.model_config import COMPILE_PARTS
from vlmdata.audit.workload import kernels

PART_NAMES = ("vision", "decoder")
DEFAULT_MAX_GRAPHS = 12  # per part: a few per batch kind (packed or padded rows, images or none, sizes 0/1)
DROPPED_PREFIXES = ("image_", "video_")  # the model's precomputed vision inputs, handed down to every block
# flags the model's forward hands down to the vision blocks too, which no vision block reads: without them a
# block's call is the same whether the whole model or the tower alone runs (the warm-up's ``warm_vision``)
VISION_DROPPED = ("use_cache",)

_COMPILE_ON = set(PART_NAMES)  # the parts whose patched blocks run compiled (set_compiled)
_BUDGET = {"max_graphs": DEFAULT_MAX_GRAPHS, "backend": "inductor"}
_FNS: dict[str, Callable] = {}
_STATS: dict[str, dict[str, Any]] = {}


def _vision_call(block, hidden_states, kwargs: dict):
    """A vision block's forward with its caller's stable keyword arguments (compiled for the "vision" part)."""
    return type(block).forward(block, hidden_states, **kwargs)


def _decoder_call(block, hidden_states, kwargs: dict):
    """A decoder layer's forward with its caller's stable keyword arguments (compiled for the "decoder" part)."""
    return type(block).forward(block, hidden_states, **kwargs)


_CALLS = {"vision": _vision_call, "decoder": _decoder_call}


def _parts(parts: str) -> tuple[str, ...]:
    """The block kinds a ``COMPILE_PARTS`` value names ("all": both, "none": neither)."""
    if parts not in COMPILE_PARTS:
        raise ValueError(f"compile parts must be one of {COMPILE_PARTS}, got {parts!r}")
    return {"all": PART_NAMES, "none": ()}.get(parts, (parts,))


def _blocks(model, part: str) -> list[torch.nn.Module]:
    inner = getattr(model, "model", model)
    if part == "vision":
        return list(getattr(getattr(inner, "visual", None), "blocks", None) or [])
    return list(getattr(getattr(inner, "language_model", None), "layers", None) or [])


def _fresh_stats() -> dict[str, Any]:
    return {
        "graphs": 0,
        "compiles": 0,
        "recompiles": 0,
        "compile_seconds": 0.0,
        "fallback": False,
        "reason": None,
        "last_guard_failure": None,
    }


def _compiled(part: str) -> Callable:
    fn = _FNS.get(part)
    if fn is None:
        fn = _FNS[part] = torch.compile(_CALLS[part], dynamic=True, backend=_BUDGET["backend"])
    return fn


def _stable_kwargs(part: str, hidden_states, kwargs: dict) -> dict:
    """The block's keyword arguments without the handed-down vision inputs; a packed decoder row's boundaries
    as the attention's own arguments."""
    kw = {k: v for k, v in kwargs.items() if not k.startswith(DROPPED_PREFIXES)}
    if part == "vision":
        kw = {k: v for k, v in kw.items() if k not in VISION_DROPPED}
    packed = kernels.packed_now()
    if part == "decoder" and packed is not None and hidden_states.shape[0] == 1 and "cu_seq_lens_q" not in kw:
        kw.update(
            cu_seq_lens_q=packed["cu"],
            cu_seq_lens_k=packed["cu"],
            max_length_q=packed["max"],
            max_length_k=packed["max"],
        )
    return kw


def _graphs() -> int:
    """Dynamo's graph count so far (read around every compiled call: one dict lookup)."""
    from torch._dynamo.utils import counters  # already loaded by torch.compile; not at the top (a second's import)

    return int(counters["stats"]["unique_graphs"])


def _run_compiled(block, part: str, hidden_states, kwargs: dict):
    """The part's compiled call, its graphs and compile time counted; past the budget the part falls back."""
    stats = _STATS.setdefault(part, _fresh_stats())
    before, t = _graphs(), time.perf_counter()
    if hidden_states._base is not None:  # a view (the first vision block's input): guarded apart from the others'
        hidden_states = hidden_states.clone()
    out = _compiled(part)(block, hidden_states, _stable_kwargs(part, hidden_states, kwargs))
    built = _graphs() - before
    if built > 0:
        stats["compile_seconds"] += time.perf_counter() - t
        stats["graphs"] += built
        stats["compiles"] += 1
        stats["recompiles"] = stats["compiles"] - 1
        guard = _last_guard_failure(part)
        if guard:
            stats["last_guard_failure"] = guard
        if stats["graphs"] > _BUDGET["max_graphs"] and not stats["fallback"]:
            stats["fallback"] = True
            stats["reason"] = (
                f"{stats['graphs']} graphs built, over the budget of {_BUDGET['max_graphs']}; the last recompile's "
                f"failed guard: {guard or 'not recorded'} (TORCH_LOGS=recompiles shows every one)"
            )
    return out


def _last_guard_failure(part: str) -> str | None:
    """The first line of the last guard failure dynamo recorded for the part's compiled function, or None."""
    try:
        from torch._dynamo.utils import guard_failures
    except ImportError:  # pragma: no cover  (an older torch)
        return None
    fails = guard_failures.get(_CALLS[part].__code__) or []
    return str(fails[-1]).strip().splitlines()[0][:200] if fails else None


def _dispatch_forward(self, *args, **kwargs):
    """A patched block's forward: its part's compiled call while that part is on and within its budget, else the
    plain forward."""
    part = str(getattr(self, "vlmdata_compiled", ""))
    if part in _COMPILE_ON and len(args) == 1 and not _STATS.get(part, {}).get("fallback"):
        return _run_compiled(self, part, args[0], kwargs)
    return _plain(self, args, kwargs)


def _plain(block, args, kwargs):
    return type(block).forward(block, *args, **kwargs)


def compile_blocks(model, parts: str = "all") -> int:
    """Run the vision tower's blocks and/or the decoder's layers through ``torch.compile`` (the module docstring:
    one stable call per part, dynamic sizes, the recompile budget), fusing their elementwise work (rotary
    embeddings, residual adds, the MoE router's softmax and top-k weights, activation and gating) into few
    kernels, as Transformer Engine's fused kernels do in Bridge. The blocks' own modules, hooks and activation
    recompute stay as they are (only ``forward`` is replaced). Returns how many blocks were patched.
    """
    chosen = _parts(parts)
    if not chosen:
        return 0
    import torch._dynamo  # the submodules, for their config (torch imports them lazily)
    import torch.fx.experimental._config as fx_config

    # the budget decides before dynamo's own limit does (dynamo's would run the frame eager, silently)
    limit = max(64, 2 * int(_BUDGET["max_graphs"]))
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, limit)
    # no duck sizing: two sizes equal by chance in the first batch (a cu_seqlens length and a window count)
    # would share one symbol, and the first batch where they differ would build another graph
    fx_config.use_duck_shape = False
    n = 0
    for part in chosen:
        _STATS[part] = _fresh_stats()  # the budget is per model (a sweep's next one starts afresh)
        for block in _blocks(model, part):
            block.forward = types.MethodType(_dispatch_forward, block)
            block.vlmdata_compiled = part  # pyright: ignore[reportArgumentType]  (nn.Module takes any value)
            n += 1
    return n


def set_compiled(parts: str) -> None:
    """Which of ``compile_blocks``' patched blocks run compiled (``COMPILE_PARTS``; for before/after
    measurements: the others run their plain forward)."""
    global _COMPILE_ON
    _COMPILE_ON = set(_parts(parts))


def set_budget(max_graphs: int | None = None, backend: str | None = None) -> None:
    """The recompile budget per part (``max_graphs``; None: ``DEFAULT_MAX_GRAPHS``) and the backend of the parts
    not compiled yet (None: inductor; tests count graphs with "eager" or "aot_eager"). Resets the counts, the
    fallbacks and the compiled functions (a new backend compiles afresh)."""
    if max_graphs is not None and (isinstance(max_graphs, bool) or int(max_graphs) < 1):
        raise ValueError(f"max_graphs must be a positive integer, got {max_graphs!r}")
    _BUDGET["max_graphs"] = DEFAULT_MAX_GRAPHS if max_graphs is None else int(max_graphs)
    _BUDGET["backend"] = backend or "inductor"
    _FNS.clear()
    _STATS.clear()


def compile_stats() -> dict[str, dict[str, Any]]:
    """Per compiled part since ``compile_blocks``: ``graphs`` (dynamo graphs its calls built), ``compiles`` (calls
    that built any) and ``recompiles`` (those after the first), ``compile_seconds`` (wall time of those calls),
    ``fallback`` (past the budget: eager from then on) and its ``reason``, ``last_guard_failure`` (what made the
    last recompile), ``max_graphs`` (the budget)."""
    return {part: dict(s, max_graphs=_BUDGET["max_graphs"]) for part, s in sorted(_STATS.items())}


PART_WORDS = {"vision": "vision blocks", "decoder": "decoder layers"}


def fallback_note(stats: dict[str, dict[str, Any]], in_timed_steps: int = 0) -> str | None:
    """The note a report carries when a part fell back to eager (``compile_stats()``'s), or None.

    Args:
        stats: per part, as ``compile_stats()`` returns.
        in_timed_steps: graphs built inside timed steps (the fallback may have come while measuring).
    """
    fell = [p for p, s in stats.items() if s.get("fallback")]
    if not fell:
        return None
    what = " and ".join(
        f"the {PART_WORDS.get(p, p)} after {stats[p].get('graphs')} graphs (budget {stats[p].get('max_graphs')}; "
        f"last failed guard: {stats[p].get('last_guard_failure') or 'not recorded'})"
        for p in fell
    )
    when = (
        " Graphs were still being built inside timed steps, so steps before the fallback ran other kernels."
        if in_timed_steps
        else ""
    )
    return (
        f"torch.compile kept recompiling: {what} ran eager from then on. Those stages' times and TFLOP/s are eager "
        "kernels' (slower than the fused kernels compilation stands for); every source ran the same model, so the "
        f"ratios between sources stay paired.{when}"
    )
