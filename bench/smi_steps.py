"""The GPU's clocks and power during each source's measured steps: power or thermal throttling vs host noise.

    python3 bench/smi_steps.py SMI.csv REPORT_DIR_OR_JSON...

SMI.csv is what ``bench/gpu_fidelity.sh`` logs (``nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,
power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 250``;
timestamps in the machine's local time, UTC on the lent machine). Each report's records carry
``started_unix`` and ``step_ms``; the samples inside a step's window are that step's. Per source it prints the
SM clock (min / median), the power (median / max), the GPU utilisation (median) and the throttle reasons seen
(a bitmask: 0x4 software power cap, 0x20 software thermal, 0x40 hardware thermal, 0x80 hardware power brake),
and per step its time beside its median clock, so a slow step can be told apart: a low clock is the GPU, a
full clock at low utilisation is the host.
"""

from __future__ import annotations

import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path


def read_smi(path: Path) -> list[tuple[float, float, float, float, int]]:
    """(unix time, SM MHz, watts, utilisation %, reasons bitmask) per logged line."""
    rows = []
    for line in path.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 7:
            continue
        try:
            t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
            num = [float(x.split()[0]) for x in (f[1], f[3], f[5])]
            rows.append((t, num[0], num[1], num[2], int(f[6], 16)))
        except ValueError:
            continue
    return rows


def reports(args: list[str]) -> list[Path]:
    out = []
    for a in args:
        p = Path(a)
        out += sorted(p.glob("*.json")) if p.is_dir() else [p]
    return [p for p in out if p.name != "compose_check.json"]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    smi = read_smi(Path(argv[0]))
    if not smi:
        print(f"{argv[0]}: no nvidia-smi samples")
        return 1
    for rp in reports(argv[1:]):
        d = json.loads(rp.read_text())
        print(f"== {rp}")
        for name, s in (d.get("sources") or {}).items():
            clocks, watts, util, reasons, per_step = [], [], [], 0, []
            for r in s.get("records") or []:
                t0 = r.get("started_unix")
                if t0 is None:
                    continue
                t1 = t0 + r["step_ms"] / 1e3
                inside = [x for x in smi if t0 <= x[0] <= t1]
                if not inside:
                    continue
                clocks += [x[1] for x in inside]
                watts += [x[2] for x in inside]
                util += [x[3] for x in inside]
                for x in inside:
                    reasons |= x[4]
                per_step.append(f"{r['step_ms']:.0f}ms@{statistics.median(x[1] for x in inside):.0f}MHz")
            if not clocks:
                print(f"  {name}: no samples inside its steps (no started_unix, or another clock)")
                continue
            print(
                f"  {name}: SM clock min {min(clocks):.0f} median {statistics.median(clocks):.0f} MHz;"
                f" power median {statistics.median(watts):.0f} max {max(watts):.0f} W;"
                f" util median {statistics.median(util):.0f}%; reasons seen {reasons:#x}"
            )
            print("    steps: " + " ".join(per_step))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
