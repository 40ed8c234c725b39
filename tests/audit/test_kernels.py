"""The reference model's attention and norm kernels (vlmdata.audit.workload.kernels) compute what transformers' own
path computes; and a global step accumulates gradients over micro-batches and steps every parameter once."""

import pytest
import torch
import torch.nn.functional as F

from vlmdata.audit.workload import compiled, kernels
from vlmdata.audit.workload.model import IMAGE_TOKEN_ID, build_model
from vlmdata.audit.workload.step import STAGES, MasterAdamW, TrainStep, mrope_position_ids


def test_varlen_attention_equals_sdpa_per_segment():
    g = torch.Generator().manual_seed(0)
    lengths = [5, 17, 9]
    T, H, D = sum(lengths), 4, 8
    q, k, v = (torch.randn(T, H, D, generator=g) for _ in range(3))
    cu = torch.tensor([0, 5, 22, 31], dtype=torch.int32)
    for causal in (False, True):
        out = kernels.varlen_attention(q, k, v, cu, 17, causal=causal)
        for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            ref = F.scaled_dot_product_attention(*(x[s:e].transpose(0, 1) for x in (q, k, v)), is_causal=causal)
            assert torch.allclose(out[s:e], ref.transpose(0, 1), atol=1e-6)
    kv = torch.randn(T, 2, D, generator=g)  # grouped-query attention: 2 key/value heads for 4 query heads
    out = kernels.varlen_attention(q, kv, kv, cu, 17, causal=True)
    ref = F.scaled_dot_product_attention(
        q[:5].transpose(0, 1), kv[:5].transpose(0, 1), kv[:5].transpose(0, 1), is_causal=True, enable_gqa=True
    )
    assert torch.allclose(out[:5], ref.transpose(0, 1), atol=1e-6)


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", "cpu", seed=0)


def _two_image_row(model):
    """One row with two images (8x12 and 6x6 patches) and its MRoPE positions: (ids, pos, pixels, grid)."""
    grid = torch.tensor([[1, 8, 12], [1, 6, 6]])
    pv = torch.randn(int(grid.prod(-1).sum()), 1536, generator=torch.Generator().manual_seed(1))
    vis = (grid.prod(-1) // 4).tolist()
    ids = torch.full((1, 8 + sum(vis) + 4), 100)
    ids[0, 3 : 3 + vis[0]] = IMAGE_TOKEN_ID
    ids[0, 5 + vis[0] : 5 + vis[0] + vis[1]] = IMAGE_TOKEN_ID
    pos = mrope_position_ids(model, {"input_ids": ids, "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid}})
    return ids, pos, pv, grid


def test_fast_path_equals_transformers_sdpa(tiny):
    ids, pos, pv, grid = _two_image_row(tiny)
    with torch.no_grad():
        kernels.use_sdpa(tiny.config)
        kernels.set_fused_norm(False)
        ref = tiny.model(input_ids=ids, position_ids=pos, pixel_values=pv, image_grid_thw=grid).last_hidden_state
        kernels.use_fast_attention(tiny.config)
        kernels.set_fused_norm(True)
        kw = kernels.vision_kwargs(tiny.model.visual, grid)
        for mode in kernels.SEGMENT_MODES:
            kernels.set_segment_mode(mode)
            with kernels.host_segments(kw["image_cu_seqlens"].tolist()):
                new = tiny.model(input_ids=ids, position_ids=pos, pixel_values=pv, image_grid_thw=grid, **kw)
            assert torch.allclose(new.last_hidden_state, ref, atol=1e-4), mode
        kernels.set_segment_mode("per_image")  # no host boundaries given: split on the device's (one sync)
        new = tiny.model(input_ids=ids, position_ids=pos, pixel_values=pv, image_grid_thw=grid, **kw)
        assert torch.allclose(new.last_hidden_state, ref, atol=1e-4)
    kernels.set_segment_mode("varlen")


def test_packed_decoder_rows_attend_within_their_sample(tiny):
    a, b = torch.randint(0, 1000, (1, 11)), torch.randint(0, 1000, (1, 7))
    with torch.no_grad():
        sep = torch.cat([tiny.model(input_ids=x, use_cache=False).last_hidden_state for x in (a, b)], 1)
        pos = torch.cat([torch.arange(11), torch.arange(7)]).view(1, -1)
        with kernels.packed(torch.tensor([0, 11, 18], dtype=torch.int32), 11):
            packed = tiny.model(input_ids=torch.cat([a, b], 1), position_ids=pos, use_cache=False).last_hidden_state
    assert torch.allclose(packed, sep, atol=1e-4)


def test_fused_rms_norm_equals_transformers():
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextRMSNorm

    m = Qwen3VLMoeTextRMSNorm(32)
    m.weight.data.uniform_(0.5, 1.5)
    x = torch.randn(4, 9, 32)
    ref = m(x)
    assert kernels.fuse_rms_norm(torch.nn.Sequential(m)) == 1
    assert torch.allclose(m(x), ref, atol=1e-5)


def test_global_step_accumulates_and_steps_every_parameter_once():
    from audit_fakes import make_tiny_batch

    model = build_model("tiny", "cpu", torch.bfloat16, seed=0)
    img = make_tiny_batch()
    text = {**img, "visual_inputs": {"pixel_values": None, "image_grid_thw": None}}
    text["input_ids"] = img["input_ids"].masked_fill(img["input_ids"] == IMAGE_TOKEN_ID, 100)
    with TrainStep(model, lr=1e-3, logits="loss") as step:
        opt = step.optimizer
        assert isinstance(opt, MasterAdamW)
        calls = []
        inner = opt.optimizer.step
        opt.optimizer.step = lambda *a, **k: (calls.append(1), inner(*a, **k))[1]
        step.begin(3)
        for b in (img, text, img):
            step.micro(b, wait_ms=1.0)
        r = step.finish()
        assert len(calls) == 1 and len(r["micro_ms"]) == 3 and set(r["times_ms"]) == set(STAGES) | {"total"}
        assert r["times_ms"]["data_wait"] >= 1.0 and r["plain_layers"]["layers"] == 3 * (2 - 1)
        # an image-free global step still steps the vision tower (zero main gradients, as Megatron's buffers)
        vis = {id(p) for p in model.model.visual.parameters()}
        step.begin(1)
        step.micro(text)
        step.finish()
        masters = [m for p, m in zip(opt.params, opt.master) if id(p) in vis]
        assert masters and all(opt.optimizer.state[m]["step"] == 2 for m in masters)


def test_compiled_blocks_compute_what_the_plain_blocks_compute():
    """``compile_blocks`` (torch.compile of every vision block and decoder layer) changes kernels, not maths:
    outputs and every gradient as the plain forward's, the same model switched back runs plain again, and the
    graphs it built are counted."""
    model = build_model("tiny", "cpu", seed=0)
    ids, pos, pv, grid = _two_image_row(model)
    kw = kernels.vision_kwargs(model.model.visual, grid)
    weights = torch.randn(
        1, ids.shape[1], model.config.text_config.hidden_size, generator=torch.Generator().manual_seed(2)
    )

    def run():
        model.zero_grad()
        with kernels.host_segments(kw["image_cu_seqlens"].tolist()):
            out = model.model(input_ids=ids, position_ids=pos, pixel_values=pv, image_grid_thw=grid, **kw)
        (out.last_hidden_state * weights).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return out.last_hidden_state.detach(), grads

    ref, ref_grads = run()
    n_blocks = len(model.model.visual.blocks) + len(model.model.language_model.layers)
    assert compiled.compile_blocks(model, "none") == 0
    assert compiled.compile_blocks(model, "all") == n_blocks
    before = kernels.compile_counters()["unique_graphs"]
    compiled.set_compiled("all")
    out, grads = run()
    assert kernels.compile_counters()["unique_graphs"] > before  # it did compile
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        assert float((g - r).norm()) <= 1e-4 * float(r.norm()) + 1e-6
    kernels.set_segment_mode("per_image")  # its per-image loop runs outside the compiled graph
    try:
        out, grads = run()
    finally:
        kernels.set_segment_mode("varlen")
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        assert float((g - r).norm()) <= 1e-4 * float(r.norm()) + 1e-6
    compiled.set_compiled("none")
    plain, _ = run()
    assert torch.equal(plain, ref)  # switched off: the plain forward, bit for bit
    compiled.set_compiled("all")
    with pytest.raises(ValueError, match="compile parts"):
        compiled.compile_blocks(model, "everything")
