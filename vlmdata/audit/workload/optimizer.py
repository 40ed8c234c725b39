"""The optimizer step of the reference workload: what Megatron runs once per global step.

``MasterAdamW``: AdamW on fp32 master copies of low-precision (bf16) parameters with persistent fp32
main-gradient buffers (Megatron's DDP keeps one for every trainable parameter, so a parameter the global
step gave no gradient is stepped with a zero gradient). ``fill_missing_grads`` does the same for plain
AdamW on fp32 weights. ``vlmdata.audit.workload.step.TrainStep`` picks one and times it as the ``optimizer`` stage.
"""

from __future__ import annotations

import torch

__all__ = ["MasterAdamW", "fill_missing_grads"]


class MasterAdamW:
    """AdamW on fp32 master copies of low-precision (bf16) parameters, Megatron-style.

    ``step`` writes each bf16 gradient into a persistent fp32 main-gradient buffer (zero where the global
    step gave the parameter no gradient: Megatron's DDP keeps a buffer for every trainable parameter),
    optionally clips, steps AdamW on the masters and copies the result back into the bf16 parameters.
    Memory per parameter: 4 (master) + 4 (main gradient) + 8 (moments). A parameter that no longer requires a
    gradient (``ReferenceWorkload.configure`` froze it for one configuration) is not stepped.
    """

    def __init__(self, params, lr: float = 1e-4, weight_decay: float = 0.0, fused: bool | None = None):
        self.params = [p for p in params if p.requires_grad]
        self.master = [p.detach().float().clone() for p in self.params]
        self.main_grads = [torch.zeros_like(m) for m in self.master]  # persistent main gradients
        for m, g in zip(self.master, self.main_grads):
            m.grad = g
        self.optimizer = torch.optim.AdamW(self.master, lr=lr, weight_decay=weight_decay, fused=fused)

    def step(self, clip_grad: float | None = None) -> None:
        active = [i for i, p in enumerate(self.params) if p.requires_grad]  # a parameter frozen since: skipped
        with torch.no_grad():
            for i, (p, m) in enumerate(zip(self.params, self.master)):
                m.grad = self.main_grads[i] if p.requires_grad else None  # AdamW skips a master without one
                if m.grad is None:
                    continue
                if p.grad is None:
                    m.grad.zero_()
                else:
                    m.grad.copy_(p.grad)
        if clip_grad:
            torch.nn.utils.clip_grad_norm_([self.master[i] for i in active], clip_grad)
        self.optimizer.step()
        with torch.no_grad():
            if len(active) == len(self.params):
                torch._foreach_copy_(self.params, self.master)  # pyright: ignore[reportPrivateImportUsage]  # public op, not in torch's __all__
            elif active:
                torch._foreach_copy_([self.params[i] for i in active], [self.master[i] for i in active])  # pyright: ignore[reportPrivateImportUsage]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def fill_missing_grads(params) -> None:
    """A zero gradient for every trainable parameter without one (Megatron steps every parameter)."""
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
