"""`vlmdata --help` and every subcommand's `--help`: wall and CPU time, commands in rotating order.

    python bench/help_time.py [PATH/TO/vlmdata] [--rounds 5]

Prints a markdown table (min / median / max wall seconds, median CPU seconds of the child) and the load
average at the start and the end. The goal (issue 12) is < 0.5 s each.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import time

COMMANDS = [[]] + [[c] for c in "audit build profile synth compare validate inspect bench demo".split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exe", nargs="?", default=shutil.which("vlmdata") or "vlmdata")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    res: dict[tuple, list] = {tuple(c): [] for c in COMMANDS}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        k = r % len(COMMANDS)
        for c in COMMANDS[k:] + COMMANDS[:k]:
            t0, c0 = time.perf_counter(), os.times()
            subprocess.run([args.exe, *c, "--help"], stdout=subprocess.DEVNULL, check=True)
            c1, t1 = os.times(), time.perf_counter()
            cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
            res[tuple(c)].append((t1 - t0, cpu))
    print("| command | wall min / median / max s | CPU s median |\n|---|---|---|")
    for c, v in res.items():
        w = sorted(x[0] for x in v)
        cpu = statistics.median(x[1] for x in v)
        name = " ".join(("vlmdata", *c, "--help"))
        print(f"| {name} | {w[0]:.3f} / {statistics.median(w):.3f} / {w[-1]:.3f} | {cpu:.3f} |")
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}; {args.rounds} rounds, commands in rotating order")


if __name__ == "__main__":
    main()
