"""The command line: ``main`` (argv -> one command, explicit imports, errors caught once; the console
script is ``vlmdata.cli.main:main``), ``console`` (progress, tables, exit codes), ``args`` (argument types,
parameter -> flag names), ``commands/`` (one thin module per subcommand: parse -> options -> one library
call -> print)."""
