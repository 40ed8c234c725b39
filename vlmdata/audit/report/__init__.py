"""The audit report: one dict with every figure, written as report.json, report.md and report.html.

``build_report(result, ...)`` turns the runner's result (or several ranks' results) into
``{"schema", "kind", "config", "environment", "workload", "sources": {name: {"summary", "loader",
"records", "per_rank"?}}, "verdict", "stragglers"}``.  ``write_report(report, dir)`` writes the three
files; the HTML is self-contained (plots as base64 PNGs, matplotlib Agg).

One module per job: ``build`` (the report dict), ``tables`` (the tables every rendering shares: terminal,
markdown, HTML; the run's own tables are ``vlmdata.audit.report.run_tables``), ``plots`` (the PNGs), ``writers``
(markdown, HTML, the three files). No torch: ``vlmdata audit compare`` writes a report of two logs without it.
"""

from vlmdata.audit.report.build import SCHEMA, build_report
from vlmdata.audit.report.plots import STAGE_COLOURS, plots
from vlmdata.audit.report.tables import (
    RATE_COLUMNS,
    decision_rows,
    gap_rows,
    measured,
    measurement_rows,
    rank_rows,
    report_tables,
    shape_rows,
    source_rows,
    stage_rows,
    sweep_rows,
)
from vlmdata.audit.report.writers import html_page, markdown, write_report

__all__ = [
    "SCHEMA",
    "build_report",
    "write_report",
    "markdown",
    "html_page",
    "plots",
    "report_tables",
    "STAGE_COLOURS",
    "RATE_COLUMNS",
    "measured",
    "source_rows",
    "shape_rows",
    "measurement_rows",
    "stage_rows",
    "gap_rows",
    "rank_rows",
    "sweep_rows",
    "decision_rows",
]
