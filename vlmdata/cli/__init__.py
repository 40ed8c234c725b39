"""The command line: ``main`` (argv -> one command, explicit imports, errors caught once; the console
script is ``vlmdata.cli.main:main``), ``console`` (progress, tables, exit codes), ``args`` (argument types,
parameter -> flag names), ``commands/`` (one thin module per subcommand: parse -> options -> one library
call -> print). ``STARTED``: the ``time.perf_counter()`` reading when the command began (this package is the
first thing the console script imports): ``vlmdata audit --budget-s`` bounds the whole command from it, the
imports of torch and transformers included."""

import time

STARTED = time.perf_counter()
