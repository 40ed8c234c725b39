"""Round-4 fuzz cases (issue 32), added to ``bench/fuzz.py``'s corpus by ``cases(fuzz_module)``:

- ``configs``: a ``config.json`` (``--model-config``) and a Megatron Bridge YAML (``--bridge-config``) as hostile
  input: wrong types (booleans, floats, strings, NaN/Infinity as sizes), impossible shapes (``head_dim`` 0 or odd,
  key-value heads not dividing, patch sizes the family does not use, DeepStack indexes past the tower, a wrong
  ``image_token_id``), sizes of 10^9 and integers of 5,000 digits, arrays nested 100,000 deep, missing structural
  fields; run sizes of 10^12, a seed beyond 64 bits, TP not dividing the heads, EP not dividing the experts, a
  sweep grid of 10^9 configurations, a YAML over the size cap. Each must be one clear line (exit 2) naming the
  field (and for a YAML the file and key), before anything is built.
- ``splits``: ``.nv-meta/split.yaml`` listing part of the shards, a shard twice, a stranger, excluding a shard,
  without ``val``, a brace range of 10^12 names, garbage, a FIFO: ``validate`` must fail with the problem named.
- ``special``: a shard that is a FIFO under validate, inspect, profile and the loader: never a hang.
- ``reports``: concurrent ``audit compare -o SAME`` (every file of the set from one run), a full disk while writing
  the reports (the file named, the previous set whole, the rerun accepted), leftovers of an interrupted write, an
  interrupted synthetic twin (the rerun replaces it).
- ``api`` (more of it): the audit's entry points with wrong types.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "audit" / "fixtures"
QUICK = frozenset(
    {
        "configs/json_layers_bool",
        "configs/json_nested_100000",
        "configs/yaml_query_groups_3",
        "configs/yaml_digits_5000",
        "splits/train_lists_one_shard",
        "special/fifo_shard_validate",
        "reports/compare_race",
        "api/audit_run_session_str",
    }
)


def _moe() -> dict:
    return json.loads((FIX / "hf_qwen3_vl_30b_a3b.json").read_text())


def _set(d: dict, path: str, value) -> dict:
    d = copy.deepcopy(d)
    node = d
    *head, last = path.split(".")
    for k in head:
        node = node[k]
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return d


_DELETE = object()
JSON_CASES = {  # name -> (path, value) in the 30B-A3B config.json, and a word the message must hold
    "layers_bool": ("text_config.num_hidden_layers", True, "num_hidden_layers"),
    "layers_float": ("text_config.num_hidden_layers", 2.0, "num_hidden_layers"),
    "layers_str": ("text_config.num_hidden_layers", "2", "num_hidden_layers"),
    "layers_1e9": ("text_config.num_hidden_layers", 10**9, "num_hidden_layers"),
    "eps_str": ("text_config.rms_norm_eps", "x", "rms_norm_eps"),
    "text_config_list": ("text_config", [1], "text_config"),
    "model_type_list": ("model_type", ["qwen3_vl_moe"], "model_type"),
    "head_dim_0": ("text_config.head_dim", 0, "head_dim"),
    "head_dim_7": ("text_config.head_dim", 7, "head_dim"),
    "head_dim_100": ("text_config.head_dim", 100, "mrope_section"),
    "kv_heads_3": ("text_config.num_key_value_heads", 3, "num_key_value_heads"),
    "moe_width_0": ("text_config.moe_intermediate_size", 0, "moe_intermediate_size"),
    "moe_width_negative": ("text_config.moe_intermediate_size", -5, "moe_intermediate_size"),
    "experts_1e9": ("text_config.num_experts", 10**9, "num_experts"),
    "hidden_act_unknown": ("text_config.hidden_act", "nope", "hidden_act"),
    "temporal_patch_0": ("vision_config.temporal_patch_size", 0, "temporal_patch_size"),
    "patch_14": ("vision_config.patch_size", 14, "patch_size"),
    "vision_mlp_0": ("vision_config.intermediate_size", 0, "intermediate_size"),
    "deepstack_99": ("vision_config.deepstack_visual_indexes", [8, 16, 99], "deepstack_visual_indexes"),
    "deepstack_nested": ("vision_config.deepstack_visual_indexes", [[[8]]], "deepstack_visual_indexes"),
    "image_token_5": ("image_token_id", 5, "image_token_id"),
    "no_text_config": ("text_config", _DELETE, "text_config"),
    "no_hidden_size": ("text_config.hidden_size", _DELETE, "hidden_size"),
}
RAW_JSON = {  # name -> raw text, word in the message
    "hidden_nan": (lambda: json.dumps(_moe()).replace('"hidden_size": 2048', '"hidden_size": NaN'), "hidden_size"),
    "hidden_inf": (lambda: json.dumps(_moe()).replace('"hidden_size": 2048', '"hidden_size": Infinity'), "hidden_size"),
    "digits_5000": (lambda: '{"model_type": "qwen3_vl_moe", "x": ' + "9" * 5000 + "}", "JSON"),
    "nested_100000": (lambda: '{"model_type": "qwen3_vl_moe", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
    "only_model_type": (lambda: '{"model_type": "qwen3_vl_moe"}', "text_config"),
}
YAML_MODEL = {  # name -> model-section changes of the 30B-A3B SFT YAML, word in the message
    "query_groups_3": ({"num_query_groups": 3}, "model.num_query_groups"),
    "hidden_60_heads_4": (
        {"hidden_size": 60, "num_attention_heads": 4, "num_query_groups": 4, "kv_channels": None},
        "model.hidden_size",
    ),
    "layers_1e9": ({"num_layers": 10**9}, "model.num_layers"),
    "experts_1e9": ({"num_moe_experts": 10**9}, "model.num_moe_experts"),
    "tp_1e6": ({"tensor_model_parallel_size": 10**6}, "model.tensor_model_parallel_size"),
    "tp_64": ({"tensor_model_parallel_size": 64}, "model.tensor_model_parallel_size"),
    "kv_channels_7": ({"kv_channels": 7}, "model.kv_channels"),
    "image_token_7": ({"image_token_id": 7}, "model.image_token_id"),
    "seq_1e12": ({"seq_length": 10**12}, "seq_length"),
}
FLAGS = {  # name -> extra audit flags, word in the message
    "seed_2_64": (["--seed", str(2**64)], "seed"),
    "tp_1e6": (["--tp", str(10**6)], "--tp"),
    "mbs_1e12": (["--micro-batch-size", str(10**12)], "--micro-batch-size"),
    "gbs_1e12": (["--global-batch-size", str(10**12)], "--global-batch-size"),
    "seq_1e12": (["--seq-length", str(10**12)], "--seq-length"),
    "sweep_1e9": (
        ["--step", "x:y"] + [a for k in "abc" for a in ("--sweep", f"{k}=" + ",".join(map(str, range(1000))))],
        "sweep",
    ),
}


def _yaml_file(ctx, name: str, model: dict | None = None, train: dict | None = None, tail: str = "") -> str:
    import yaml

    d = yaml.safe_load((FIX / "bridge_qwen3_vl_30b_a3b_sft.yaml").read_text())
    d["model"].update(model or {})
    d["train"].update(train or {})
    if "seq_length" in (model or {}):
        d["dataset"]["seq_length"] = model["seq_length"]
    p = ctx.root / name
    p.write_text(yaml.safe_dump(d) + tail)
    return str(p)


def _config_cases(F) -> list:
    cases = []
    fast = ["--sources", "imagefree,real", "--steps", "6", "-q"]
    for name, (path, value, word) in JSON_CASES.items():

        def make(ctx, path=path, value=value, word=word):
            p = ctx.root / "config.json"
            p.write_text(json.dumps(_set(_moe(), path, value)))
            return [F.Step("audit", ["audit", "--model-config", str(p), *fast], ok=(2,), check=F.expect_in_err(word))]

        cases.append(F.Case(f"configs/json_{name}", "configs", make))
    for name, (text, word) in RAW_JSON.items():

        def make(ctx, text=text, word=word):
            p = ctx.root / "config.json"
            p.write_text(text())
            return [F.Step("audit", ["audit", "--model-config", str(p), *fast], ok=(2,), check=F.expect_in_err(word))]

        cases.append(F.Case(f"configs/json_{name}", "configs", make))
    for name, (model, word) in YAML_MODEL.items():

        def make(ctx, model=model, word=word):
            p = _yaml_file(ctx, "run.yaml", model=model)
            argv = ["audit", "--bridge-config", p, "--dp", "8", *fast]
            return [F.Step("audit", argv, ok=(2,), check=F.expect_in_err(word, "run.yaml"))]

        cases.append(F.Case(f"configs/yaml_{name}", "configs", make))

    def yaml_ep3(ctx):
        p = _yaml_file(ctx, "run.yaml", model={"expert_model_parallel_size": 3})
        argv = ["audit", "--bridge-config", p, "--dp", "3", "--global-batch-size", "6", *fast]
        return [F.Step("audit", argv, ok=(2,), check=F.expect_in_err("expert_model_parallel_size", "128"))]

    def yaml_digits(ctx):
        p = _yaml_file(ctx, "run.yaml", tail="\nunused_section: " + "9" * 5000 + "\n")
        return [F.Step("audit", ["audit", "--bridge-config", p, *fast], ok=(2,), check=F.expect_in_err("run.yaml"))]

    def yaml_too_big(ctx):
        p = _yaml_file(
            ctx, "run.yaml", tail="\nextra:\n" + "".join(f"  k{i}: [1, 2, 3, 4, 5, 6, 7, 8]\n" for i in range(60_000))
        )
        return [
            F.Step("audit", ["audit", "--bridge-config", p, *fast], ok=(2,), check=F.expect_in_err("limit"), timeout=60)
        ]

    for name, make in (("yaml_ep_3", yaml_ep3), ("yaml_digits_5000", yaml_digits), ("yaml_2mib", yaml_too_big)):
        cases.append(F.Case(f"configs/{name}", "configs", make))
    for name, (flags, word) in FLAGS.items():

        def make(ctx, flags=flags, word=word):
            return [F.Step("audit", ["audit", *flags, *fast], ok=(2,), check=F.expect_in_err(word), timeout=60)]

        cases.append(F.Case(f"configs/flag_{name}", "configs", make))
    return cases


SPLITS = {  # name -> split.yaml text (shards of the clean dataset: shard-000000..3), a word of the problem
    "train_lists_one_shard": (
        "split_parts:\n  train: [shard-000000.tar]\n  val: ['shard-{000000..000003}.tar']\n",
        "lists 1 of 4",
    ),
    "no_val": ("split_parts:\n  train: ['shard-{000000..000003}.tar']\n", "'val'"),
    "no_train": ("split_parts:\n  val: ['shard-{000000..000003}.tar']\n", "'train'"),
    "duplicate": (
        "split_parts:\n  train: ['shard-{000000..000003}.tar', shard-000001.tar]\n  val: [shard-000000.tar]\n",
        "more than once",
    ),
    "stranger": ("split_parts:\n  train: ['shard-{000000..000003}.tar']\n  val: [other.tar]\n", "not shards"),
    "excluded": (
        "split_parts:\n  train: ['shard-{000000..000003}.tar']\n  val: [shard-000000.tar]\nexclude: [shard-000002.tar]\n",
        "exclude",
    ),
    "range_1e12": (
        "split_parts:\n  train: ['shard-{0..999999999999}.tar']\n  val: [shard-000000.tar]\n",
        "far too many",
    ),
    "garbage": ("split_parts: [\n", "unreadable"),
    "not_a_mapping": ("- 1\n- 2\n", "split_parts"),
}


def _expect_in_out(*words):
    def check(root, res):
        text = res.out + res.err
        missing = [w for w in words if w not in text]
        return ("mismatch", f"output lacks {missing}: {text.strip()[-200:]}") if missing else None

    return check


def _split_cases(F) -> list:
    cases = []
    for name, (text, word) in SPLITS.items():

        def make(ctx, text=text, word=word):
            ds = F.sample_copy(ctx)
            (Path(ds) / ".nv-meta" / "split.yaml").write_text(text)
            return [F.Step("validate", ["validate", ds], ok=(1,), check=_expect_in_out(word), timeout=120)]

        cases.append(F.Case(f"splits/{name}", "splits", make))

    def fifo_split(ctx):
        ds = F.sample_copy(ctx)
        os.remove(Path(ds) / ".nv-meta" / "split.yaml")
        os.mkfifo(Path(ds) / ".nv-meta" / "split.yaml")
        return [F.Step("validate", ["validate", ds], ok=(1,), check=_expect_in_out("split.yaml"), timeout=120)]

    cases.append(F.Case("splits/split_is_a_fifo", "splits", fifo_split))
    return cases


def _fifo_shard(F, ctx) -> str:
    ds = F.sample_copy(ctx)
    shard = Path(ds) / "shard-000001.tar"
    shard.unlink()
    os.mkfifo(shard)
    return ds


def _loader_over(root: str) -> dict:
    from vlmdata import make_loader

    ld = make_loader(root, seq_length=4096, micro_batch_size=1, num_workers=0)
    n = sum(1 for _ in ld)
    return {"batches": n, "skipped": len(ld.stats.skipped_samples)}


def _special_cases(F) -> list:
    def validate(ctx):
        return [
            F.Step("validate", ["validate", _fifo_shard(F, ctx)], ok=(1,), check=_expect_in_out("not a regular file"))
        ]

    def inspect(ctx):
        return [F.Step("inspect", ["inspect", _fifo_shard(F, ctx)], ok=(0, 1))]

    def profile(ctx):
        out = ctx.out("p.json")
        return [F.Step("profile", ["profile", _fifo_shard(F, ctx), "-o", out, "-q", "--decode-images", "0"], ok=(0,))]

    def loader(ctx):
        ds = _fifo_shard(F, ctx)

        def check(root, res):
            d = res.data or {}
            return None if d.get("skipped") and d.get("batches") else ("mismatch", f"loader gave {d}")

        return [F.Step("loader", fn=_loader_over, args=(ds,), check=check)]

    def single(ctx):
        return [F.Step("validate", ["validate", str(Path(_fifo_shard(F, ctx)) / "shard-000001.tar")], ok=(2,))]

    out = []
    for name, make in (
        ("fifo_shard_validate", validate),
        ("fifo_shard_inspect", inspect),
        ("fifo_shard_profile", profile),
        ("fifo_shard_loader", loader),
        ("fifo_shard_alone", single),
    ):
        out.append(F.Case(f"special/{name}", "special", make))
    return out


def _race_compare(out: str, pairs: list[tuple[str, str]]) -> dict:
    """Several ``audit compare -o OUT`` at once; every file of the final set must come from one run."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vlmdata",
                "audit",
                "compare",
                "--mock",
                m,
                "--real",
                r,
                "-o",
                out,
                "-q",
                "--allow-mismatch",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for m, r in pairs
    ]
    codes = [p.wait(300) for p in procs]
    rep = json.loads((Path(out) / "report.json").read_text())
    mock = os.path.basename(rep["config"]["mock"])
    same = all(mock in (Path(out) / n).read_text() for n in ("report.md", "report.html"))
    names = sorted(os.listdir(out))
    return {"codes": codes, "consistent": same, "files": names}


def _report_cases(F) -> list:
    logs = [str(FIX / n) for n in ("bridge_mock.log", "bridge_real.log", "megatron_mock.log", "megatron_real.log")]

    def race(ctx):
        out = ctx.out("rep")
        pairs = [(logs[0], logs[1]), (logs[2], logs[3]), (logs[1], logs[0]), (logs[3], logs[2])]

        def check(root, res):
            d = res.data or {}
            if not d.get("consistent"):
                return "silent corruption/data loss", f"report files of different runs: {d}"
            return None if d.get("files") == ["report.html", "report.json", "report.md"] else ("mismatch", str(d))

        return [F.Step("race", fn=_race_compare, args=(out, pairs), check=check, timeout=300)]

    def full_disk(ctx):
        out = ctx.out("rep")
        argv = ["audit", "compare", "--mock", logs[0], "--real", logs[1], "-o", out, "-q"]
        return [
            F.Step("first", argv, ok=(0, 3, 4)),
            F.Step("full", argv, ok=(2,), fsize=20_000, check=F.expect_in_err("report.", "cannot be written")),
            F.Step("rerun", argv, ok=(0, 3, 4)),
        ]

    def leftovers(ctx):
        out = ctx.out("rep")
        os.makedirs(out)
        Path(out, ".report.json.tmp-99999").write_text("{half")
        argv = ["audit", "compare", "--mock", logs[0], "--real", logs[1], "-o", out, "-q"]

        def check(root, res):
            left = [n for n in os.listdir(out) if n.startswith(".")]
            return ("mismatch", f"left {left}") if left else None

        return [F.Step("compare", argv, ok=(0, 3, 4), check=check)]

    def twin_interrupted(ctx):
        out = ctx.out("aud")
        twin = Path(out) / "synthetic-twin"
        (twin / ".vlmdata-build").mkdir(parents=True)
        (twin / ".vlmdata-build" / "options.json").write_text('{"kind": "twin", "seed": 0}')
        (twin / "twin-000000.tar").write_bytes(b"\0" * 4096)
        return [F.Step("guard", fn=_guard, args=(out,))]

    return [
        F.Case("reports/compare_race", "reports", race),
        F.Case("reports/full_disk_then_rerun", "reports", full_disk),
        F.Case("reports/leftover_temporary_files", "reports", leftovers),
        F.Case("reports/interrupted_twin_is_ours", "reports", twin_interrupted),
    ]


def _guard(out: str) -> dict:
    from vlmdata.audit.settings.guard import check_out_dir

    check_out_dir(out)  # an AuditError here is a traceback in the child: the rerun must be accepted
    return {"accepted": True}


def _audit_api(kind: str) -> dict:
    from vlmdata import VlmdataError
    from vlmdata.audit.analysis.straggler_cost import CostModel
    from vlmdata.audit.analysis.straggler_model import Sample, simulate
    from vlmdata.audit.logs import compare_logs
    from vlmdata.audit.phases.session import run_session
    from vlmdata.audit.settings.bridge_config import read_bridge_config
    from vlmdata.audit.settings.config import AuditConfig
    from vlmdata.audit.settings.model_config import read_model_config

    census = {"real": [Sample(100, (64,))] * 8}
    calls = {
        "read_bridge_config_int": lambda: read_bridge_config(123),
        "read_model_config_int": lambda: read_model_config(123),
        "audit_config_bridge_int": lambda: AuditConfig(bridge_config=123),
        "run_session_str": lambda: run_session("cfg"),
        "compare_logs_int": lambda: compare_logs(123, None),
        "simulate_dp_1e9": lambda: simulate(
            census,
            CostModel(1, 0, 0, 0, 1),
            micro_batch_size=1,
            micro_batches_per_rank=1,
            dp_sizes=[10**9],
            padded_len=lambda n, b: n,
        ),
        "make_loader_seq_2_63": lambda: __import__("vlmdata").make_loader(None, seq_length=2**63),
    }
    try:
        calls[kind]()
    except VlmdataError as e:
        return {"error": type(e).__name__, "message": str(e)[:200]}
    return {"returned": True}


def _api_cases(F) -> list:
    kinds = (
        "read_bridge_config_int",
        "read_model_config_int",
        "audit_config_bridge_int",
        "run_session_str",
        "compare_logs_int",
        "simulate_dp_1e9",
        "make_loader_seq_2_63",
    )

    def check(root, res):
        return None if (res.data or {}).get("error") else ("mismatch", f"accepted: {res.data}")

    return [
        F.Case(f"api/audit_{k}", "api", lambda ctx, k=k: [F.Step("call", fn=_audit_api, args=(k,), check=check)])
        for k in kinds
    ]


def cases(F) -> list:
    """Every round-4 case, built with ``bench/fuzz.py``'s ``Case``/``Step`` and helpers (``F``: that module)."""
    return _config_cases(F) + _split_cases(F) + _special_cases(F) + _report_cases(F) + _api_cases(F)
