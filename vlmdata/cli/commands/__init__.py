"""One module per ``vlmdata`` subcommand: ``add_parser(subparsers)`` and ``run(args) -> exit code``."""
