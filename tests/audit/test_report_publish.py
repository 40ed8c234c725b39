"""Report sets written as a whole (vlmdata.audit.report.publish, issue 32): temporary names renamed into place
under the folder's lock, so concurrent writers never mix their files, a full disk names the file and leaves the
previous set whole, an interrupted write is recognised and replaced; an interrupted synthetic twin does not lock
out the rerun."""

import json
import multiprocessing as mp
import os
import resource
import signal

import pytest

from vlmdata.audit.report.publish import is_leftover, publish
from vlmdata.audit.settings.guard import check_out_dir
from vlmdata.audit.sources.registry import TWIN_DIR, AuditError

NAMES = ("report.json", "report.md", "report.html")


def _set(tag: str, size: int = 64) -> dict[str, bytes]:
    return {n: (json.dumps({"schema": "vlmdata.audit/2", "tag": tag}) + " " * size).encode() for n in NAMES}


def _writer(out: str, tag: str, rounds: int) -> None:
    for _ in range(rounds):
        publish(out, _set(tag, 20_000))


def test_concurrent_writers_never_mix_their_files(tmp_path):
    out = str(tmp_path / "o")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(out, f"w{i}", 15)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    tags = {json.loads(open(os.path.join(out, n)).read())["tag"] for n in NAMES}
    assert len(tags) == 1 and sorted(os.listdir(out)) == sorted(NAMES)  # no temporary file, no lock file left


def _full_disk(out: str, q) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
    try:
        publish(out, _set("new", 200_000))
        q.put("written")
    except AuditError as e:
        q.put(str(e))


def test_a_full_disk_names_the_file_and_keeps_the_previous_set(tmp_path):
    out = str(tmp_path / "o")
    publish(out, _set("old"))
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_full_disk, args=(out, q))
    p.start()
    msg = q.get(timeout=60)
    p.join(60)
    assert "report.json: cannot be written (File too large)" in msg and "unchanged" in msg
    assert {json.loads(open(os.path.join(out, n)).read())["tag"] for n in NAMES} == {"old"}
    assert sorted(os.listdir(out)) == sorted(NAMES)


def test_leftovers_of_an_interrupted_write_are_replaced(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / ".report.json.tmp-12345").write_text("{half")
    assert is_leftover(".report.json.tmp-12345") and not is_leftover("report.json")
    publish(str(out), _set("new"))
    assert sorted(os.listdir(out)) == sorted(NAMES)


def test_an_interrupted_twin_does_not_lock_out_the_rerun(tmp_path):
    twin = tmp_path / "o" / TWIN_DIR
    (twin / ".vlmdata-build").mkdir(parents=True)
    (twin / ".vlmdata-build" / "options.json").write_text('{"kind": "twin", "seed": 0}')
    (twin / "twin-000000.tar").write_bytes(b"\0" * 1024)
    check_out_dir(str(tmp_path / "o"))  # vlmdata's own interrupted write: replaced by the rerun
    (twin / ".vlmdata-build" / "options.json").write_text('{"kind": "build"}')
    with pytest.raises(AuditError, match="synthetic-twin"):
        check_out_dir(str(tmp_path / "o"))


def test_write_twin_marks_its_folder_while_writing(tmp_path, monkeypatch):
    """The twin's writer records its state before the first shard: an interruption leaves the marker."""
    import vlmdata
    from vlmdata.synthetic import twin as twin_mod

    seen = {}

    def boom(*a, **k):
        seen["state"] = os.listdir(tmp_path / "t" / ".vlmdata-build")
        raise KeyboardInterrupt

    monkeypatch.setattr(twin_mod, "_write_shards", boom)
    shard = os.path.join(vlmdata.sample_data_path(), "shard-000000.tar")
    with pytest.raises(KeyboardInterrupt):
        twin_mod.write_twin([shard], str(tmp_path / "t"))
    assert "options.json" in seen["state"]
    check_out_dir(str(tmp_path))  # tmp_path/t is not the twin folder; the marker alone is read below
    from vlmdata.audit.settings.guard import _is_generated_dataset

    assert _is_generated_dataset(str(tmp_path / "t"))
