"""``harness rules``: the rule sets, and their export for MLPerf's own checker."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from compliance.check import normalise_ruleset
from compliance.engine import RULESETS, ruleset_names
from compliance.export import export_mlperf
from harness.rules.specs import load_benchmark


@click.group("rules")
def rules() -> None:
    """Versioned rule sets (compliance/rulesets/) and their export."""


@rules.command("list")
def list_rules() -> None:
    """List the rule sets and what each one is."""
    for name in ruleset_names():
        raw = yaml.safe_load(RULESETS.joinpath(name).joinpath("common.yaml").read_text())
        click.echo(f"{name:16s} {' '.join(raw['description'].split())}")


@rules.command("export-mlperf")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--ruleset", default=None, help="Rule set to export [default: that of --benchmark].")
@click.option("--benchmark", "-b", default="dlrm_synthetic", show_default=True,
              help="Benchmark whose rule set to export.")
def export(out_dir: Path, ruleset: str | None, benchmark: str) -> None:
    """Write a rule set as mlperf_logging compliance-checker configs into OUT_DIR."""
    name = normalise_ruleset(ruleset) if ruleset else load_benchmark(benchmark).compliance_ruleset
    written = export_mlperf(name, out_dir)
    click.echo(f"wrote {len(written)} mlperf_logging configs for rule set {name} to {out_dir}")
    click.echo("check a log with MLPerf's own checker:")
    # the official checker's --ruleset: the round exported, or for the harness's own rule set the
    # round it restates (harness_1.0.0 inherits 6.0.0)
    official = name.split("_", 1)[1] if name.startswith("training_") else "6.0.0"
    click.echo(f"  python -m mlperf_logging.compliance_checker --usage training --ruleset {official} "
               f"--config {(out_dir / 'common.yaml').resolve()} RESULT_LOG")

