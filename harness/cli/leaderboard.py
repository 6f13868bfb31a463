"""``harness leaderboard``: compare every run set under some results trees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from compliance.tree import RunSetRef
from harness.leaderboard import write_leaderboard
from harness.leaderboard.collect import Projector, build_leaderboard
from harness.leaderboard.labels import plural, runs_phrase


def _projector() -> Projector:
    """Each run set's projection from its own system description and logs (docs/projection.md)."""
    # the projection imports harness.reference.planner: not for `harness leaderboard --help`
    from harness.cli.project import input_cost
    from harness.projection.against import ThisMachine, compare_run_set

    here = ThisMachine(input_cost=input_cost)

    def projection(ref: RunSetRef) -> dict[str, Any]:
        c = compare_run_set(ref, ref.package, here=here)
        return {"minutes": c.projected_minutes,
                "band_minutes": list(c.projection.band_minutes) if c.projection else None,
                "ratio": c.ratio, "note": c.reason if c.projection is None else None}

    return projection


@click.command()
@click.argument("roots", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--output", "-o", "out_dir", type=click.Path(path_type=Path), default=Path("site"), show_default=True,
              help="Folder for index.html, leaderboard.md, leaderboard.csv and leaderboard.json.")
@click.option("--baseline", default=None,
              help="System the speedups are relative to: its name, folder, label or round/submitter/system.")
def leaderboard(roots: tuple[Path, ...], out_dir: Path, baseline: str | None) -> None:
    """Score and compare every run set under ROOTS (results trees in the MLPerf layout)."""
    board = build_leaderboard(list(roots), baseline=baseline, projector=_projector())
    written = write_leaderboard(board, out_dir)
    sets = sum(len(g["entries"]) for g in board["benchmarks"])
    ranked = sum(e["ranked"] for g in board["benchmarks"] for e in g["entries"])
    click.echo(f"{plural(sets, 'run set')} in {plural(len(board['benchmarks']), 'benchmark')} "
               f"({ranked} ranked, {sets - ranked} not ranked)")
    for group in board["benchmarks"]:
        for e in group["entries"]:
            score = f"{e['score_minutes']:.4f} min" if e["score_minutes"] is not None else "no score"
            where = f"#{e['rank']}" if e["ranked"] else "not ranked"
            click.echo(f"  {group['benchmark']:<14} {where:<10} {e['submitter']} / {e['label']}: {score}"
                       f" ({runs_phrase(e)})")
            for reason in e["reasons"]:  # every reason, as the Markdown lists them
                click.echo(f"  {'':<14} {'':<10}   - {reason}")
    click.echo(f"leaderboard: {written['index.html']} (also .md, .csv, .json in {out_dir})")
