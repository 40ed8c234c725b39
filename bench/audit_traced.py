"""``vlmdata audit`` as the GPU bench scripts run it, with what the end of the command costs made visible:
``python3 bench/audit_traced.py audit ARGS...`` runs ``vlmdata.cli.main.main(ARGS)`` in this process, then prints
to stderr how long after the command's start ``main`` returned, dynamo's compile-time breakdown (which of
tracing, AOT autograd and inductor the compile seconds went to), and from then on every thread's stack every
2 s (``faulthandler``) until the process has exited: what the interpreter's exit waits for (loader workers,
inductor's compile pool, CUDA teardown). The bench's wall clock around the command counts all of it."""

import faulthandler
import sys
import time

from vlmdata.cli import STARTED
from vlmdata.cli.main import main

code = 1
try:
    code = main(sys.argv[1:])
finally:
    print(f"trace: main returned {time.perf_counter() - STARTED:.1f} s after the command began", file=sys.stderr)
    try:
        from torch._dynamo.utils import compile_times

        print(compile_times(repr="str", aggregate=True), file=sys.stderr)
    except Exception as e:  # noqa: BLE001  (a diagnostic: never the command's failure)
        print(f"trace: no compile times ({e})", file=sys.stderr)
    sys.stderr.flush()
    faulthandler.dump_traceback_later(2, repeat=True, file=sys.stderr)
sys.exit(code)
