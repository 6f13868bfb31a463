"""``harness report``: a run set seen from inside, as one HTML page and a terminal summary."""

from __future__ import annotations

from pathlib import Path

import click

from harness.report import write_report
from harness.report.collect import collect_report
from harness.report.text import summary_lines


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--output", "-o", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for index.html [default: report, in the working folder: never inside the results tree, "
                   "whose package check would flag a folder it does not expect].")
def report(path: Path, out_dir: Path | None) -> None:
    """One run set (or every one below a folder) seen from inside: one HTML page of where its time, bytes
    and memory went.

    The page shows the AUC curves, step time and its phases per rank, bytes per collective beside the
    planner's projection, memory per tier, cache hit rates and what the runs were; the terminal gets a
    summary. PATH is a run set (results/<submitter>/results/<system>/<benchmark>/) or a folder above run
    sets; a log without the harness's records (a real MLPerf log) shows what it has and names what it
    lacks; a result_*.txt without an MLLOG line is not a log, named in one line and left out. Exit 2 when
    PATH holds no result logs (nothing is written)."""
    collected = collect_report(path)
    index = write_report(collected, out_dir if out_dir is not None else Path("report"))
    for line in summary_lines(collected):
        click.echo(line)
    click.echo(f"report: {index}")
