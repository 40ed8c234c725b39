"""Every family the audit accepts runs through the compiled blocks on many image grids and packed lengths with a
bounded number of graphs (it does not grow with the number of distinct grids and lengths), and past the recompile
budget a part falls back to eager and the result says so.

The blocks are compiled with the "aot_eager" backend: dynamo's tracing and guards plus AOTAutograd's (the
joint forward/backward trace, where an operator's backward is traced too), without inductor's code generation
(minutes on CPU). On CPU inductor built the same graphs per part as aot_eager for the tiny Qwen2.5-VL over these
12 batches (vision 1, decoder 2); before the fix aot_eager built 47 over them, a new one every batch. The
"eager" backend misses the guards AOTAutograd adds. Tiny versions of the real ``config.json`` fixtures: 2
decoder layers, a 4-block vision tower (Qwen2.5-VL: window attention with full attention in blocks 1 and 3;
Qwen3-VL: DeepStack at block 1; Qwen2-VL: full attention in every block)."""

import json
import os

import pytest
import torch
import torch._dynamo

from vlmdata.audit.phases.result import _compile_summary
from vlmdata.audit.settings.model_config import VISION_END_TOKEN_ID, VISION_START_TOKEN_ID, read_model_config
from vlmdata.audit.workload import compiled
from vlmdata.audit.workload.model import build_model
from vlmdata.audit.workload.step import TrainStep

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
FAMILIES = {
    "qwen2-vl": "hf_qwen2_vl_7b.json",
    "qwen2.5-vl": "hf_qwen2_5_vl_7b.json",
    "qwen3-vl": "hf_qwen3_vl_8b.json",
    "qwen3-vl-moe": "hf_qwen3_vl_30b_a3b.json",
}
BACKEND = "aot_eager"
BOUND = 2  # graphs per part: one, and for the decoder one more for padded rows beside packed ones
# (t, h, w) in patches: 12 distinct grids, h and w multiples of the spatial merge (2)
GRIDS = [
    (1, 4, 4),
    (1, 4, 6),
    (1, 6, 8),
    (1, 8, 8),
    (1, 8, 12),
    (1, 10, 6),
    (1, 12, 12),
    (1, 6, 14),
    (1, 14, 10),
    (1, 16, 8),
    (1, 4, 20),
    (1, 18, 6),
]


def tiny_shape(tmp_path, fixture: str):
    """The fixture's ``config.json`` with its family's structure at a tiny width and depth."""
    with open(os.path.join(FIXTURES, fixture)) as f:
        c = json.load(f)
    text, vision = c.get("text_config", c), c["vision_config"]
    text.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    text.update(num_hidden_layers=2, max_window_layers=2)
    if "head_dim" in text:
        text["head_dim"] = 16
    if "num_experts" in text:
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    rope = text.get("rope_scaling") or c.get("rope_scaling")
    rope["mrope_section"] = [2, 3, 3]  # head_dim 16: 8 frequencies
    if "embed_dim" in vision:  # Qwen2-VL: the tower's width is embed_dim, its hidden_size the merger's output
        vision.update(depth=4, embed_dim=64, mlp_ratio=2, num_heads=4, hidden_size=64)
    else:
        vision.update(depth=4, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64)
    if "fullatt_block_indexes" in vision:
        vision["fullatt_block_indexes"] = [1, 3]
    if "deepstack_visual_indexes" in vision:
        vision.update(deepstack_visual_indexes=[1], num_position_embeddings=256)
    path = tmp_path / fixture
    path.write_text(json.dumps(c))
    return read_model_config(str(path))


def _sample(model, grid, text: int, gen) -> torch.Tensor:
    ids = torch.randint(1000, 5000, (text,), generator=gen)
    if grid is None:
        return ids
    n = grid[0] * grid[1] * grid[2] // model.config.vision_config.spatial_merge_size**2
    image = [torch.tensor([VISION_START_TOKEN_ID]), torch.full((n,), model.config.image_token_id)]
    return torch.cat([ids[:3], *image, torch.tensor([VISION_END_TOKEN_ID]), ids[3:]])


def _batch(model, samples, packed: bool, gen) -> dict:
    """A micro-batch as the loaders give it: one packed row (``cu_seqlens_q``) or padded rows; a few loss tokens
    (the 151,936-row lm_head would dominate the step)."""
    vc = model.config.vision_config
    rows = [_sample(model, g, t, gen) for g, t in samples]
    grids = [g for g, _ in samples if g is not None]
    extra = {}
    if packed:
        ids = torch.cat(rows).view(1, -1)
        extra["cu_seqlens_q"] = torch.tensor([0, *torch.tensor([len(r) for r in rows]).cumsum(0)], dtype=torch.int32)
    else:
        ids = torch.full((len(rows), max(len(r) for r in rows)), 151_643)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
    grid = torch.tensor(grids, dtype=torch.int64) if grids else None
    width = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    pv = torch.randn(int(grid.prod(-1).sum()), width, generator=gen) if grid is not None else None
    return {
        "input_ids": ids,
        "labels": ids.clone(),
        "loss_mask": (torch.arange(ids.shape[1]) % 97 == 5).float().expand(ids.shape[0], -1).contiguous(),
        "position_ids": torch.arange(ids.shape[1]).expand(ids.shape[0], -1),
        "visual_inputs": {"pixel_values": pv, "image_grid_thw": grid},
        **extra,
    }


def family_batches(model, n: int = 12) -> list[dict]:
    """``n`` micro-batches cycling through four kinds (packed with two images and text, two padded rows with an
    image each, packed text only, packed with one image), every one with new grids and lengths."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        g1, g2 = GRIDS[i % len(GRIDS)], GRIDS[(5 * i + 3) % len(GRIDS)]
        kind = i % 4
        if kind == 0:
            out.append(_batch(model, [(g1, 20 + i), (None, 30 + 3 * i), (g2, 10 + i)], True, gen))
        elif kind == 1:
            out.append(_batch(model, [(g1, 15 + 2 * i), (g2, 25)], False, gen))
        elif kind == 2:
            out.append(_batch(model, [(None, 40 + 5 * i), (None, 17 + i)], True, gen))
        else:
            out.append(_batch(model, [(g2, 12 + i)], True, gen))
    return out


@pytest.fixture
def fresh_compile():
    """A clean dynamo cache and budget around a test (the compiled functions are process-wide)."""
    torch._dynamo.reset()
    compiled.set_budget(backend=BACKEND)
    yield compiled
    compiled.set_budget()
    compiled.set_compiled("all")
    torch._dynamo.reset()


def _graphs() -> dict[str, int]:
    return {p: s["graphs"] for p, s in compiled.compile_stats().items()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_compiled_graphs_do_not_grow_with_grids_and_lengths(family, tmp_path, fresh_compile):
    model = build_model(tiny_shape(tmp_path, FAMILIES[family]), "cpu")
    batches = family_batches(model)
    grids = {tuple(g) for b in batches if (t := b["visual_inputs"]["image_grid_thw"]) is not None for g in t.tolist()}
    lengths = {b["input_ids"].shape[1] for b in batches}
    assert len(grids) >= 10 and len(lengths) >= 10  # the data the bound must hold over
    assert compiled.compile_blocks(model, "all") == 4 + 2
    step = TrainStep(model, logits="loss")
    after = []
    for b in batches:
        step.warm(b)
        after.append(_graphs())
    assert set(after[-1]) == {"vision", "decoder"}
    for part in ("vision", "decoder"):
        assert after[-1][part] <= BOUND, (part, after)
        assert after[3][part] == after[-1][part], (part, after)  # one batch of each kind: nothing new after it
    assert not any(s["fallback"] for s in compiled.compile_stats().values())
    step.close()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_tower_alone_warms_new_grids_through_the_steps_graphs(family, tmp_path, fresh_compile):
    """``warm_vision`` (the warm-up's pass for a micro-batch whose new items are all the tower's) runs the
    vision tower forward and backward through the graphs the whole step built: new grids build none; a
    text-only batch runs nothing (False); gradients are dropped."""
    model = build_model(tiny_shape(tmp_path, FAMILIES[family]), "cpu")
    compiled.compile_blocks(model, "all")
    step = TrainStep(model, logits="loss")
    batches = family_batches(model, 12)
    for b in batches[:4]:  # one of each kind
        step.warm(b)
    before = _graphs()
    seen = {
        tuple(g) for b in batches[:4] if (t := b["visual_inputs"]["image_grid_thw"]) is not None for g in t.tolist()
    }
    new = {tuple(g) for b in batches[4:] if (t := b["visual_inputs"]["image_grid_thw"]) is not None for g in t.tolist()}
    assert len(new - seen) >= 5  # grids the tower has not met
    ran = [step.warm_vision(b) for b in batches[4:]]
    assert ran == [b["visual_inputs"]["image_grid_thw"] is not None for b in batches[4:]] and not all(ran)
    assert _graphs() == before
    assert all(p.grad is None for p in model.parameters())
    step.close()


class _Run:
    """What ``result._compile_summary`` reads of a run: the workload's description."""

    def __init__(self, blocks: int):
        self.workload = self
        self.blocks = blocks

    def describe(self) -> dict:
        return {"options": {"compile": "all"}, "compiled_blocks": self.blocks}


class _Rounds:
    records = {"real": [{"graphs_compiled_in_step": 0}]}


def test_fallback_engages_past_the_budget_and_is_reported(tmp_path, fresh_compile):
    """A budget of one graph per part: the decoder's second batch kind (padded rows after a packed one) needs a
    second graph, so the decoder layers fall back to eager, say why, and build nothing more; the result's compile
    entry and its note say what that does to the figures."""
    from vlmdata.audit.report.notes import collect_notes
    from vlmdata.audit.report.writers import _compile_line

    model = build_model(tiny_shape(tmp_path, FAMILIES["qwen2.5-vl"]), "cpu")
    compiled.set_budget(max_graphs=1, backend=BACKEND)
    n = compiled.compile_blocks(model, "all")
    step = TrainStep(model, logits="loss")
    batches = family_batches(model, 4)
    step.warm(batches[0])  # packed: one decoder graph
    assert not compiled.compile_stats()["decoder"]["fallback"]
    step.warm(batches[1])  # padded rows: a second one, over the budget
    stats = compiled.compile_stats()
    assert stats["decoder"]["fallback"] and stats["decoder"]["graphs"] == 2
    assert "over the budget of 1" in stats["decoder"]["reason"]
    assert stats["decoder"]["last_guard_failure"]  # what made it recompile, from dynamo
    frozen = _graphs()
    for b in batches[2:]:
        step.warm(b)  # eager decoder from here on: no more decoder graphs
    assert _graphs()["decoder"] == frozen["decoder"]
    summary = _compile_summary(_Run(n), _Rounds())
    assert summary is not None
    assert "decoder" in summary["fallbacks"]
    assert summary["by_part"]["decoder"]["fallback"] is True
    assert summary["by_part"]["decoder"]["recompiles"] == 1
    assert summary["compile_seconds"] > 0
    (note,) = summary["notes"]
    assert "decoder layers" in note and "eager" in note and "paired" in note
    line = _compile_line(summary)
    assert "decoder 2" in line and note in line  # report.md / report.html's Method line
    assert note in collect_notes({"measurement": {"compile": summary}})  # the notes under the verdict (console too)
    step.close()


def test_budget_rejects_a_non_positive_bound():
    with pytest.raises(ValueError, match="max_graphs"):
        compiled.set_budget(max_graphs=0)
    compiled.set_budget()


def test_compiled_packed_rows_compute_what_the_plain_blocks_compute(tmp_path, fresh_compile):
    """The compiled path's own arguments (a packed row's boundaries as the attention's, the handed-down vision
    inputs dropped, the opaque per-segment operator) change no maths: loss and gradients of a packed micro-batch
    with two images (Qwen2.5-VL: windowed and full-attention blocks) as the plain blocks give them."""
    model = build_model(tiny_shape(tmp_path, FAMILIES["qwen2.5-vl"]), "cpu")
    compiled.compile_blocks(model, "all")
    step = TrainStep(model, logits="loss")
    batch = family_batches(model, 1)[0]

    def run(parts: str):
        compiled.set_compiled(parts)
        model.zero_grad(set_to_none=True)
        pos, vkw = step._host_inputs(batch)
        loss = step._run_micro(batch, pos, vkw, last=True)
        return float(loss.detach()), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    ref_loss, ref_grads = run("none")
    loss, grads = run("all")
    assert _graphs() == {"vision": 1, "decoder": 1}
    assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        assert float((g - r).norm()) <= 1e-4 * float(r.norm()) + 1e-6
    step.close()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_towers_widths_are_the_built_models(family, tmp_path):
    """``vision_widths`` (what the FLOPs and the memory estimate read) is the width and MLP width of the tower
    transformers builds, in every family (Qwen2-VL names them embed_dim and embed_dim x mlp_ratio)."""
    from vlmdata.audit.settings.model_config import vision_widths

    model = build_model(tiny_shape(tmp_path, FAMILIES[family]), "cpu")
    block = model.model.visual.blocks[0]
    width, mlp = vision_widths(model.config.vision_config)
    assert block.attn.qkv.in_features == width
    assert max(m.out_features for m in block.mlp.modules() if isinstance(m, torch.nn.Linear)) == mlp


def test_qwen2_vl_flops_count_its_towers_width_not_its_output(tmp_path):
    """Qwen2-VL's vision hidden_size is the merger's output (the decoder's 64 here), its tower embed_dim wide:
    the FLOPs of one 4x4-patch image through the tiny tower (width 64, MLP 128, 4 blocks)."""
    from vlmdata.audit.workload.flops import vision_flops

    model = build_model(tiny_shape(tmp_path, FAMILIES["qwen2-vl"]), "cpu")
    vc = model.config.vision_config
    assert (vc.embed_dim, vc.mlp_ratio, vc.hidden_size, vc.depth) == (64, 2, 64, 4)
    vis, proj = vision_flops(vc, 64, [[1, 4, 4]])
    P = 3 * 2 * 14 * 14  # values per patch
    per_patch = 2 * P * 64 + 4 * 2 * (4 * 64 * 64 + 2 * 64 * 128)  # patch embedding; 4 blocks of QKV/O and MLP
    assert vis == 3 * (16 * per_patch + 4 * 64 * 4 * 16**2)  # forward + backward; full attention in every block
    assert proj == 3 * 4 * 2 * (16 * 64 * 64 + 4 * 64 * 64)  # 4 merged tokens: (256 x 256) then (256 x 64)
