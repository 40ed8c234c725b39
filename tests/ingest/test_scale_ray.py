"""``vlmdata build --engine ray``: same bytes as the local engine, retried tasks, interrupted builds resumed."""

import filecmp
import functools
import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'vlmdata[ray]'); the Ray engine is untested")

from vlmdata.dataset.shards import Planner  # noqa: E402
from vlmdata.ingest import BuildOptions, build, run_build_pipeline  # noqa: E402
from vlmdata.ingest.engines.ray_engine import RayEngine  # noqa: E402
from vlmdata.ingest.writer import write_local  # noqa: E402
from vlmdata.sources import open_source  # noqa: E402


def shard_files(out):
    return sorted(f for f in os.listdir(out) if f.endswith(".tar"))


def same_shards(a, b):
    assert shard_files(a) == shard_files(b)
    for f in shard_files(a):
        assert filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False), f


@pytest.fixture(scope="module")
def ray_2cpu():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the flaky writer below runs in Ray workers
    yield
    ray.shutdown()


def test_ray_matches_local_bytes_and_manifest(llava_source, tmp_path, ray_2cpu):
    a, b = str(tmp_path / "local"), str(tmp_path / "ray")
    ma = build(llava_source, a, BuildOptions(max_count=4, workers=2))
    mb = build(llava_source, b, BuildOptions(max_count=4, workers=2), engine="ray")
    same_shards(a, b)
    assert ma == mb  # same workers: the whole manifest is identical
    assert sorted(os.listdir(os.path.join(a, ".nv-meta"))) == sorted(os.listdir(os.path.join(b, ".nv-meta")))


def test_synth_on_ray_matches_inline(tmp_path, ray_2cpu):
    from vlmdata.cli.main import main

    a, b = str(tmp_path / "inline"), str(tmp_path / "ray")
    assert main(["synth", "--mock", "bridge-noise", "-n", "24", "-o", a, "--max-count", "5", "-q"]) == 0
    assert (
        main(
            [
                "synth",
                "--mock",
                "bridge-noise",
                "-n",
                "24",
                "-o",
                b,
                "--max-count",
                "5",
                "-q",
                "--engine",
                "ray",
                "--workers",
                "2",
            ]
        )
        == 0
    )
    same_shards(a, b)


def flaky(plan, *, inner, marker_dir):
    """Kill the worker process on shard 1's first attempt, raise OSError on shard 2's: Ray retries both."""
    marker = os.path.join(marker_dir, f"tried-{plan.no}")
    if plan.no in (1, 2) and not os.path.exists(marker):
        open(marker, "w").close()
        if plan.no == 1:
            os._exit(1)
        raise OSError("transient storage error")
    return inner(plan)


def test_failed_tasks_are_retried(llava_source, tmp_path, ray_2cpu):
    clean = str(tmp_path / "clean")
    mc = build(llava_source, clean, BuildOptions(max_count=3, workers=1))
    out, markers = str(tmp_path / "out"), str(tmp_path / "markers")
    os.makedirs(out), os.makedirs(markers)
    opts = BuildOptions(max_count=3)
    _, items = open_source(llava_source)
    writer = functools.partial(flaky, inner=functools.partial(write_local, out=out, state=None), marker_dir=markers)
    with RayEngine(max_retries=2) as eng:
        records, seen, _ = run_build_pipeline(items, opts, Planner("shard", 3, opts.max_size), writer, eng)
    assert sorted(os.listdir(markers)) == ["tried-1", "tried-2"]
    assert [r.sha256 for r in records] == [s["sha256"] for s in mc["shards"]] and seen == 17
    for r in records:
        assert filecmp.cmp(os.path.join(clean, r.name), os.path.join(out, r.name), shallow=False)


KILL_MIDWAY = """
import os, signal, sys
from vlmdata.ingest import build, BuildOptions
n = [0]
def progress(k):
    n[0] += k
    if n[0] >= int(sys.argv[3]) and any(f.endswith('.json') and f[0].isdigit() for f in os.listdir(os.path.join(sys.argv[2], '.vlmdata-build'))):
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the driver and the local Ray processes, mid-build
build(sys.argv[1], sys.argv[2], BuildOptions(max_count=2, workers=int(sys.argv[4])), engine='ray', progress=progress)
"""


def test_interrupted_ray_build_resumes_with_other_worker_counts(llava_source, tmp_path):
    clean, broken = str(tmp_path / "clean"), str(tmp_path / "broken")
    mc = build(llava_source, clean, BuildOptions(max_count=2, workers=1))
    r = subprocess.run([sys.executable, "-c", KILL_MIDWAY, llava_source, broken, "9", "2"], start_new_session=True)
    assert r.returncode == -9
    assert not os.path.exists(os.path.join(broken, "manifest.json"))
    assert 0 < len(shard_files(broken)) < len(shard_files(clean))
    time.sleep(1)
    mr = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlmdata",
            "build",
            llava_source,
            "-o",
            broken,
            "--max-count",
            "2",
            "--workers",
            "1",
            "--engine",
            "ray",
            "--resume",
            "-q",
        ],
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    assert mr.returncode == 0, mr.stderr
    same_shards(clean, broken)
    from vlmdata.dataset.manifest import load_manifest

    m = load_manifest(broken)
    mc["options"].pop("workers"), m["options"].pop("workers")
    assert m == mc
    assert not os.path.exists(os.path.join(broken, ".vlmdata-build"))
