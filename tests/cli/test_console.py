"""console.progress: plain lines off a terminal (count, rate, elapsed, ETA; a heartbeat), quiet, helpers."""

import io
import re
import time

import pytest

from vlmdata.cli.console import Advance, clock, counts, progress, table

LINE = re.compile(
    r"^(?P<desc>[^:]+(?:: [^:,]+)?): (?P<done>done, )?(?P<n>\d+)(?:/(?P<total>\d+))? (?P<unit>\w+)"
    r"(?: \((?P<pct>\d+)%\))?, (?P<rate>[\d.,]+|-) \w+/s, elapsed (?P<el>\d+:\d\d:\d\d)"
    r"(?:, ETA (?P<eta>\d+:\d\d:\d\d|-))?$"
)


def lines(buf):
    return buf.getvalue().splitlines()


def test_plain_lines_with_total():
    buf = io.StringIO()
    with progress("validate", total=4, unit="samples", bar=False, stream=buf, interval=0) as advance:
        for _ in range(4):
            advance()
    got = lines(buf)
    assert len(got) == 5  # one per advance (interval 0), then done
    parsed = [LINE.match(x) for x in got]
    assert all(parsed), got
    assert [int(m["n"]) for m in parsed] == [1, 2, 3, 4, 4]
    assert all(m["total"] == "4" and m["unit"] == "samples" and m["desc"] == "validate" for m in parsed)
    assert parsed[1]["pct"] == "50" and parsed[1]["eta"] is not None  # ETA while running
    assert parsed[-1]["done"] and parsed[-1]["eta"] is None and parsed[-1]["rate"] != "-"


def test_plain_lines_unknown_total_show_rate_and_elapsed():
    buf = io.StringIO()
    with progress("build", unit="samples", bar=False, stream=buf, interval=0) as advance:
        advance(3)
        advance.set_description("build: packing")
        advance(2)
    got = lines(buf)
    m = [LINE.match(x) for x in got]
    assert all(m), got
    assert m[0]["n"] == "3" and m[0]["total"] is None and m[0]["eta"] is None and m[0]["rate"] != "-"
    assert got[-1].startswith("build: packing: done, 5 samples, ")


def test_interval_limits_lines_and_set_total():
    buf = io.StringIO()
    with progress("synth", unit="samples", bar=False, stream=buf, interval=3600) as advance:
        for _ in range(100):
            advance()
    assert lines(buf) == []  # work shorter than the interval prints nothing
    with progress("synth", unit="samples", bar=False, stream=buf, interval=0) as advance:
        advance.set_total(100)
        advance(100)
    assert [x.split(",")[0] for x in lines(buf)] == [
        "synth: 0/100 samples (0%)",
        "synth: 100/100 samples (100%)",
        "synth: done",
    ]
    assert lines(buf)[-1].startswith("synth: done, 100/100 samples, ")


def test_no_line_after_an_error():
    """A command that fails prints its one error line, not a progress line (nor a 'done')."""
    buf = io.StringIO()
    with pytest.raises(ValueError):
        with progress("build", unit="inputs", bar=False, stream=buf, interval=0.5):
            raise ValueError("bad input")
    assert buf.getvalue() == ""
    with pytest.raises(ValueError):
        with progress("build", unit="inputs", bar=False, stream=buf, interval=0) as advance:
            advance()
            raise ValueError("bad input")
    assert [x.split(",")[0] for x in lines(buf)] == ["build: 1 inputs"]  # no "done" line


def test_heartbeat_while_nothing_advances():
    """A long step still produces lines (no dead air in CI logs)."""
    buf = io.StringIO()
    with progress("audit", total=2, unit="steps", bar=False, stream=buf, interval=0.05):
        deadline = time.monotonic() + 30
        while len(lines(buf)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    got = lines(buf)
    assert len(got) >= 4 and all(LINE.match(x) for x in got)
    assert got[0].startswith("audit: 0/2 steps (0%), - steps/s, elapsed ") and got[0].endswith("ETA -")
    assert got[-1].startswith("audit: done, 0/2 steps")


def test_quiet_prints_nothing_but_counts(capsys):
    with progress("x", total=3, quiet=True) as advance:
        advance(2)
    assert advance.n == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == ""


def test_default_stream_is_stderr_when_not_a_terminal(capsys, monkeypatch):
    monkeypatch.setenv("VLMDATA_PROGRESS_INTERVAL", "0")
    with progress("profile", total=1, unit="samples") as advance:  # pytest's capture is not a terminal
        advance()
    cap = capsys.readouterr()
    assert cap.out == "" and "profile: done, 1/1 samples" in cap.err


def test_line_eta_and_clock():
    a = Advance("x", 10, "items")
    a.start -= 20.0
    a(5)
    assert a.line().endswith("elapsed 0:00:20, ETA 0:00:20")
    assert clock(3725) == "1:02:05" and clock(-1) == "0:00:00"


@pytest.mark.parametrize(
    "mapping,text",
    [({"missing_file": 31, "bad_image": 2}, "missing_file 31, bad_image 2"), ({}, "none"), (None, "none")],
)
def test_counts(mapping, text):
    assert counts(mapping) == text


def test_table_columns():
    t = table("t", ["a", "b"], [["x", 1], ["y", 2]])
    assert [c.header for c in t.columns] == ["a", "b"] and t.row_count == 2
    assert [c.justify for c in t.columns] == ["left", "right"]
