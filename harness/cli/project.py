"""``harness project``: a benchmark's step and time to train on a system, projected from the
system's figures, or held against the real results of a results tree (docs/projection.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import load_profile
from harness.hw_profiles.from_system import profile_from_system_file
from harness.hw_profiles.profiles import DEFAULT_PROFILE, LOCAL, profile_names
from harness.projection.against import Comparison, ThisMachine, compare_tree, summarize
from harness.projection.constants import load_constants
from harness.projection.render import render_comparisons, render_projection
from harness.projection.system import system_for_profile
from harness.projection.train_time import project as project_benchmark
from harness.rules.specs import BenchmarkSpec, load_benchmark

DEFAULT_BENCHMARK = "dlrm_synthetic"  # as `harness run`
PRECISIONS = ("fp32", "bf16", "fp16")


@click.command()
@click.option("--benchmark", default=None, help=f"Benchmark to project (default: {DEFAULT_BENCHMARK}, as harness run).")
@click.option("--profile", "profile_name", default=None,
              help=f"Hardware profile name or .yaml path (default: {DEFAULT_PROFILE}, this machine).")
@click.option("--system", "system_path", type=click.Path(path_type=Path), default=None,
              help="An MLPerf system description (systems/<system>.json): the system as it describes itself.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Global batch size (default: the benchmark's reference global batch size).")
@click.option("--precision", type=click.Choice(PRECISIONS), default=None,
              help="Precision of the dense layers (default: the lowest the device computes natively).")
@click.option("--against", "against", type=click.Path(path_type=Path), default=None,
              help="Project every run set of this results tree from its own system description and batch size, "
                   "beside the score its logs measure.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def project(benchmark: str | None, profile_name: str | None, system_path: Path | None, batch_size: int | None,
            precision: str | None, against: Path | None, as_json: bool) -> None:
    """Project a benchmark's training step, phase by phase, and its time to train on a system; or,
    with --against, every run set of a results tree beside its real score."""
    if against is not None:
        if benchmark or profile_name or system_path or batch_size or precision:
            raise HarnessError("--against projects each run set from its own logs and system description: give it "
                               "alone (with --json at most)")
        _against(against, as_json=as_json)
        return
    if profile_name and system_path:
        raise HarnessError(f"give one of --profile ({', '.join(profile_names())}, or a profile .yaml file) and "
                           "--system (an MLPerf systems/<system>.json), not both")
    if system_path is not None:
        profile = profile_from_system_file(system_path)
    else:
        profile = load_profile(profile_name or DEFAULT_PROFILE)
    spec = load_benchmark(benchmark or DEFAULT_BENCHMARK).for_training("harness project")
    generation = input_cost(spec) if profile.name == LOCAL else 0.0
    result = project_benchmark(spec, system_for_profile(profile), batch_size=batch_size, precision=precision,
                               input_seconds_per_sample=generation)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(render_projection(result, load_constants()))


def input_cost(spec: BenchmarkSpec) -> float:
    """One core's seconds to generate a sample of a synthetic benchmark on this machine, measured
    (``harness run`` generates it beside the step, on the same cores); 0 for data read from files."""
    if spec.dataset["kind"] != "synthetic":
        return 0.0
    from harness.reference.data.datasets import generation_seconds_per_sample  # loads torch: only when asked

    return generation_seconds_per_sample(spec.dataset)


def _against(root: Path, *, as_json: bool) -> None:
    if not root.exists():
        raise HarnessError(f"{root} does not exist", ErrorCategory.NOT_FOUND)
    comparisons: list[Comparison] = compare_tree(root, here=ThisMachine(input_cost=input_cost))
    if not comparisons:
        raise HarnessError(f"{root}: no run sets (no <package>/results/<system>/<benchmark>/result_*.txt below it)",
                           ErrorCategory.NOT_FOUND)
    summary = summarize(comparisons)
    if as_json:
        click.echo(json.dumps({"run_sets": [c.to_dict() for c in comparisons], "summary": summary.to_dict(),
                               "line": summary.line()}, indent=1))
    else:
        click.echo(render_comparisons(comparisons))
        click.echo(summary.line())
