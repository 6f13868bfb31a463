"""``harness rcp``: generate Reference Convergence Points and check run sets against them."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.rules import rcp as rcps_lib


@click.group("rcp")
def rcp() -> None:
    """Reference Convergence Points, as MLPerf's rcp_checker does them."""


@rcp.command("generate")
@click.option("--benchmark", "-b", required=True, help="Benchmark whose target the reference runs are read against.")
@click.option("--logs", "logs_dir", type=click.Path(path_type=Path), default=None,
              help="Folder of reference result_*.txt logs [default: harness/rules/reference_runs/<benchmark>].")
@click.option("--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="RCP JSON file to write [default: print it].")
def generate(benchmark: str, logs_dir: Path | None, out_file: Path | None) -> None:
    """Generate the RCP record of a benchmark's reference runs, in MLPerf's JSON format."""
    logs_dir = logs_dir or Path(str(rcps_lib.RCP_DIR)).parent / "reference_runs" / benchmark
    record = rcps_lib.generate_rcp(benchmark, logs_dir)
    text = rcps_lib.rcp_file_json([record])
    if out_file is None:
        click.echo(text, nl=False)
        return
    out_file.write_text(text)
    click.echo(f"{record.name}: {len(record.epochs)} runs, mean {record.mean:.4f} {rcps_lib.convergence_unit(benchmark)}, "
               f"min acceptable mean {record.min_acceptable_mean:.4f}; wrote {out_file}")


@rcp.command("check")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--rcp-version", default=None, help="mlperf_logging RCP round [default: the benchmark's ruleset].")
@click.option("--full-rcps", is_flag=True, help="Check against all RCPs, not only the pruned ones.")
@click.pass_context
def check(ctx: click.Context, run_dir: Path, as_json: bool, rcp_version: str | None, full_rcps: bool) -> None:
    """Check the run set RUN_DIR (results/<system>/<benchmark>); exit 0 on pass, 1 otherwise."""
    result = rcps_lib.check_convergence(
        run_dir, version=rcp_version, rcp_pass=rcps_lib.RcpPass.FULL if full_rcps else rcps_lib.RcpPass.PRUNED
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        mean = f"{result.submission_mean:.4f}" if result.submission_mean is not None else "n/a"
        used = f"{result.rcp.name} (mean {result.rcp.mean:.4f}, min acceptable {result.rcp.min_acceptable_mean:.4f})" \
            if result.rcp else "none"
        click.echo(f"{result.verdict.value.upper()}: {result.message}")
        unit = rcps_lib.convergence_unit(result.benchmark)
        click.echo(f"  {result.benchmark}, batch size {result.batch_size}, submission mean {mean} {unit}")
        click.echo(f"  RCP: {used}; normalization factor {result.normalization_factor:.6f}")
    ctx.exit(0 if result.verdict is rcps_lib.Verdict.PASS else 1)
