"""``harness check PATH``: the compliance verdict on a log, a run set or a submitter package."""

from __future__ import annotations

import json
from pathlib import Path

import click

from compliance.check import Report, TreeReport, check_path
from compliance.findings import Finding


def _fmt(x: float | None, spec: str = ".6f") -> str:
    return "-" if x is None else format(x, spec)


def _print_findings(findings: list[Finding], indent: str) -> None:
    for f in findings:
        click.echo(f"{indent}{f.human()}")


def _human(report: Report) -> None:
    click.echo(f"checking {report.path} under rule set {report.ruleset or '?'}")
    _print_findings(report.findings, "  ")
    for run in report.runs:
        click.echo(f"  {run.path.name}: {'pass' if run.passed else 'FAIL'}  (rule files: {', '.join(run.check.levels)})")
        _print_findings(run.check.findings, "    ")
    for rs in report.run_sets:
        s = rs.summary
        click.echo(f"  run set {rs.path}: {'pass' if rs.passed else 'FAIL'}")
        for run in rs.runs:
            errors = len(run.check.errors)
            click.echo(f"    {run.path.name}: {'pass' if run.passed else f'FAIL ({errors} errors)'}")
            _print_findings(run.check.findings, "      ")
        if "converged" in s:
            click.echo(f"    {s['runs']} runs, {s['converged']} reached the target {s.get('target')}; "
                       f"score {_fmt(s.get('score_minutes'))} min"
                       + (f" (x scaling {s['scaling_factor']:g})" if s.get("scaling_factor", 1.0) != 1.0 else "")
                       + (f" [{s['score_error']}]" if s.get("score_error") else ""))
            if s.get("coefficient_of_variation") is not None:
                ci = s.get("bootstrap_95") or [None, None]
                click.echo(f"    spread: mean {_fmt(s['mean_minutes'])} min, sd {_fmt(s['stdev_minutes'])} min, "
                           f"CV {s['coefficient_of_variation']:.1%}, bootstrap 95% [{_fmt(ci[0])}, {_fmt(ci[1])}] min")
        if "rcp" in s:
            rcp = s["rcp"]
            extra = (f", normalisation factor {rcp['normalization_factor']:.6f}"
                     if isinstance(rcp.get("normalization_factor"), float) else "")
            click.echo(f"    RCP: {rcp.get('verdict')}{' - ' + rcp['message'] if rcp.get('message') else ''}{extra}")
        _print_findings(rs.findings, "    ")
    findings = report.all_findings
    errors = sum(f.is_error for f in findings)
    click.echo(f"verdict: {'PASS' if report.passed else 'FAIL'} ({errors} errors, {len(findings) - errors} warnings)")


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--ruleset", default=None,
              help="Rule set (e.g. 6.0.0, training_4.1.0, harness_1.0.0) [default: from the path's vNN.N round "
                   "folder, else from the logs' benchmark].")
@click.option("--lender", "lenders", type=click.Path(path_type=Path), multiple=True,
              help="Results directory of a lender whose hyperparameters the checked logs claim to borrow.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(path: Path, ruleset: str | None, lenders: tuple[Path, ...], as_json: bool) -> None:
    """Check a result log, a results/<system>/<benchmark> run set, a package (systems/ + results/),
    or every package in or below a folder (a round folder, a tree of rounds: one line each).

    Exit status: 0 pass, 1 fail (any package), 2 unusable input (no such path, nothing to check,
    no MLLOG line: not an MLPerf log).
    """
    report = check_path(path, ruleset=ruleset, lenders=list(lenders))
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=1, default=str))
    elif isinstance(report, TreeReport):
        _tree(report)
    else:
        _human(report)
    if not report.passed:
        raise click.exceptions.Exit(1)


def _tree(tree: TreeReport) -> None:
    """One line per package (verdict, errors, warnings, each run set's score), then the total."""
    for report in tree.packages:
        findings = report.all_findings
        errors = sum(f.is_error for f in findings)
        scores = ", ".join(f"{rs.path.parent.name}/{rs.path.name} {_fmt(rs.summary.get('score_minutes'), '.3f')} min"
                           for rs in report.run_sets) or "no run set"
        click.echo(f"{'PASS' if report.passed else 'FAIL'}  {report.path}  ({report.ruleset or '?'}; {errors} errors, "
                   f"{len(findings) - errors} warnings)  {scores}")
    failed = sum(not r.passed for r in tree.packages)
    click.echo(f"{len(tree.packages)} package(s) checked under {tree.path}: {len(tree.packages) - failed} pass, "
               f"{failed} fail; verdict: {'PASS' if tree.passed else 'FAIL'}")
