"""Many ranks with torchrun (gloo, CPU): every sample of an epoch reaches exactly one rank, uneven ranks end
the epoch without a hang, and resume after a restart with another number of DataLoader workers per rank
loses and duplicates nothing. Each rank runs tests/helpers/scale_ranks_worker.py."""

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter

import pytest

from vlmdata.dataset.tar import iter_shard

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDS = os.path.join(REPO, "sample_shards")
WORKER = os.path.join(REPO, "tests", "helpers", "scale_ranks_worker.py")
TIMEOUT = 150  # a rank waiting on a collective that never comes would hang: fail instead


def keys_of(shards):
    return [r.key for s in shards for r in iter_shard(os.path.join(SHARDS, s))]


def torchrun(nproc, source, out, *args):
    os.makedirs(out, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--monitor-interval=0.1",
        WORKER,
        str(source),
        str(out),
        *map(str, args),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        log, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"torchrun with {nproc} ranks did not finish in {TIMEOUT}s (hang)")
    assert p.returncode == 0, log[-4000:]
    return [json.load(open(os.path.join(out, f"rank-{r}.json"))) for r in range(nproc)]


def test_uneven_ranks_end_the_epoch_without_a_hang(tmp_path):
    # 3 shards (16 + 16 + 9 samples) for 3 ranks x 2 workers = 6 slots: fewer shards than slots, and
    # 41 samples split 13/14/14 over the ranks -> 7, 8, 8 micro-batches of 2 (one worker has 7 samples)
    names = ["shard-000000.tar", "shard-000001.tar", "shard-000005.tar"]
    src = tmp_path / "three"
    src.mkdir()
    for n in names:
        shutil.copy(os.path.join(SHARDS, n), src / n)
    ranks = torchrun(3, src, tmp_path / "out", "--workers", 2, "--sync")
    assert sorted(r["epoch_samples"] for r in ranks) == [13, 14, 14]
    # the training loop's all-reduce stops every rank at the shortest rank's step count: no hang
    assert [r["steps"] for r in ranks] == [7, 7, 7]
    # what the longer ranks had left is theirs alone: over all ranks the epoch is every sample once
    trained = [k for r in ranks for k in r["keys"]]
    assert len(trained) == len(set(trained)) == 3 * 13  # 7 steps: 4 + 3 batches of the 2 workers, one of 1
    assert [len(r["keys"]) + len(r["dropped"]) for r in ranks] == [r["epoch_samples"] for r in ranks]
    allkeys = trained + [k for r in ranks for k in r["dropped"]]
    assert Counter(allkeys) == Counter(keys_of(names))


def test_resume_with_another_worker_count_every_sample_once(tmp_path):
    names = [f"shard-{i:06d}.tar" for i in range(6)]
    run1 = tmp_path / "run1"
    first = torchrun(3, SHARDS, run1, "--workers", 2, "--stop-after", 4)  # the "crash": state after 4 batches
    assert [r["batches"] for r in first] == [4, 4, 4]
    state = json.load(open(run1 / "state-0.json"))
    assert "num_workers" not in state and state["consumed"]["prefix"] + len(state["consumed"]["extra"]) == 8
    second = torchrun(3, SHARDS, tmp_path / "run2", "--workers", 3, "--resume", run1)  # restart, 3 workers
    per_rank = [a["keys"] + b["keys"] for a, b in zip(first, second)]
    for keys, r in zip(per_rank, second):
        assert len(keys) == len(set(keys)) == r["epoch_samples"]  # nothing lost, nothing twice on a rank
    got = [k for keys in per_rank for k in keys]
    assert Counter(got) == Counter(keys_of(names)) and len(got) == 89  # every sample reaches exactly one rank
