"""The command line: ``main`` (argv -> one command, explicit imports, errors caught once), ``console``
(progress, tables, exit codes), ``args`` (argument types, parameter -> flag names), ``commands/`` (one
thin module per subcommand: parse -> options -> one library call -> print)."""

from vlmdata.cli.main import main

__all__ = ["main"]
