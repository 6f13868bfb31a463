"""``harness summarize ROOT``: the MLPerf result summarizer's table for a package or a folder of packages.

Torch-free: the work is :mod:`compliance.summarize`.
"""

from __future__ import annotations

from pathlib import Path

import click

from compliance.summarize import NOT_REPRODUCED, format_table, write_csv, write_json
from compliance.summarize import summarize as run_summary


@click.command()
@click.argument("root", type=click.Path(path_type=Path))
@click.option("--ruleset", default=None,
              help="MLPerf Training round (e.g. 4.1.0) [default: from a vNN.N folder in ROOT's path].")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the summary CSV here, and the detailed one beside it as <stem>_detailed.csv "
                   "(the official summarizer's --csv files).")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the summary JSON records here, and the detailed ones as <stem>_detailed.json.")
@click.option("--quiet", is_flag=True, help="Do not print the summarizer's notices (dropped runs, skipped systems).")
def summarize(root: Path, ruleset: str | None, csv_path: Path | None, json_path: Path | None, quiet: bool) -> None:
    """Scores of a results tree as MLPerf's result summarizer writes them (CSV and JSON).

    As mlperf_logging.result_summarizer does: scores in minutes.

    ROOT is a submitter package (systems/ + results/) or a folder of packages of one round.
    Without --csv or --json, prints a table. Exit status: 0 done, 2 unusable input.
    """
    summary = run_summary(root, ruleset=ruleset)
    if not quiet:
        for note in summary.notes:
            click.echo(note, err=True)
    written: list[Path] = []
    if csv_path is not None:
        written += write_csv(summary, csv_path)
    if json_path is not None:
        written += write_json(summary, json_path)
    if written:
        for path in written:
            click.echo(f"wrote {path}")
        if not quiet:
            click.echo("not reproduced: " + "; ".join(f"{k}: {v}" for k, v in NOT_REPRODUCED.items()), err=True)
    else:
        click.echo(format_table(summary))
