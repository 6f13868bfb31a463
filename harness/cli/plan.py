"""``harness plan``: the embedding sharding plan of a benchmark or model on a profile,
and its projected step time, without training."""

from __future__ import annotations

import json

import click

from harness.errors import HarnessError, unknown_name
from harness.hw_profiles import load_profile
from harness.hw_profiles.profiles import Profile, format_bytes
from harness.projection.constants import load_constants
from harness.projection.render import whole_step_line
from harness.projection.step import training_step
from harness.projection.system import system_for_profile
from harness.projection.workload import benchmark_workload
from harness.reference.planner import (
    CommPrecision,
    Plan,
    PlannerConfig,
    TableSpec,
    plan_tables,
)
from harness.reference.planner.models import (
    load_model,
    model_names,
    sequence_events,
    tables_for_benchmark,
)
from harness.reference.planner.types import TIERS
from harness.rules.specs import benchmark_names, load_benchmark

DEFAULT_BENCHMARK = "dlrm_synthetic"  # as `harness run`
DEFAULT_BATCH_SIZE = 65536
DEFAULT_CACHE_FRACTION = 0.05  # as `harness run --cache-fraction`: the plan shown is the plan a run executes


@click.command()
@click.option("--profile", "profile_name", required=True, help="Hardware profile name, or a profile .yaml path.")
@click.option("--benchmark", "benchmark", default=None,
              help=f"Plan the tables of this benchmark spec [default: {DEFAULT_BENCHMARK}, as harness run, "
                   "unless --model is given].")
@click.option("--model", "model", default=None,
              help="Plan the tables of this model (e.g. dlrm-12t, or a model .yaml file) instead of a benchmark's.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Global batch size (default: the benchmark's global batch size, else 65536).")
@click.option("--comm-precision", type=click.Choice([p.value for p in CommPrecision]), default="fp32",
              show_default=True, help="Precision of the embedding all-to-all on the wire.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--cache-fraction", type=click.FloatRange(0, 1), default=DEFAULT_CACHE_FRACTION, show_default=True,
              help="Shards in DDR under HBM, and on the SSD, are trained through a cache of this share of their "
                   "rows (never fewer than one batch looks up) in the fastest tier above them; 0: read in place.")
def plan(
    profile_name: str, benchmark: str | None, model: str | None, batch_size: int | None, comm_precision: str,
    as_json: bool, cache_fraction: float,
) -> None:
    """Plan the sharding of embedding tables over a profile's ranks and memory tiers."""
    if benchmark is not None and model is not None:
        raise HarnessError(f"give one of --benchmark ({', '.join(benchmark_names())}) and --model "
                           f"({', '.join(model_names())}, or a model .yaml file), not both")
    if model is None:
        benchmark = benchmark or DEFAULT_BENCHMARK
    elif not model.endswith((".yaml", ".yml")) and model not in model_names():
        raise unknown_name("model", model, model_names(), hint=" (or give the path of a model .yaml file)")
    tables, default_batch, notes = _tables(benchmark=benchmark, model=model)
    config = PlannerConfig(batch_size=batch_size or default_batch, comm_precision=CommPrecision(comm_precision),
                           ddr_cache_fraction=cache_fraction, ssd_cache_fraction=cache_fraction)
    profile = load_profile(profile_name)
    result = plan_tables(tables, profile, config)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(render(result, notes, whole_step=_whole_step(benchmark, profile, result)))


def _tables(*, benchmark: str | None, model: str | None) -> tuple[list[TableSpec], int, list[str]]:
    """The tables, the default global batch, and what the text output should say about how they are priced."""
    if model is not None:
        return load_model(model), DEFAULT_BATCH_SIZE, []
    assert benchmark is not None  # plan() takes exactly one of the two
    spec = load_benchmark(benchmark)
    batch = spec.reference_hyperparameters.get("global_batch_size", DEFAULT_BATCH_SIZE)
    tables = tables_for_benchmark(spec)
    notes = []
    if any(t.sequence for t in tables):
        events, source = sequence_events(spec)
        names = ", ".join(t.name for t in tables if t.sequence)
        notes.append(f"sequence tables ({names}) priced at {events:g} ids a sample: {source}")
    return tables, int(batch), notes


def _whole_step(benchmark: str | None, profile: Profile, result: Plan) -> str:
    """The line of the whole step's projection on this plan (``harness project``), or why there is none."""
    if benchmark is None:
        return "projected whole step: not projected (a model file names its tables only, not its dense layers)"
    try:
        workload = benchmark_workload(load_benchmark(benchmark))
        system = system_for_profile(profile)
    except HarnessError as err:
        return f"projected whole step: not projected ({err})"
    precision = system.native_precision()
    step = training_step(workload, system, result, precision, load_constants().of(system.device_class))
    return whole_step_line(step)


def render(result: Plan, notes: list[str] | None = None, *, whole_step: str | None = None) -> str:
    """The plan as text: per-rank bytes per tier and cost, then totals, where the tables are and
    projections (``notes``: lines on how the tables were priced; ``whole_step``: the line of the
    whole step's projection, beside the embeddings-only one)."""
    counts: dict[str, int] = {}
    for st in result.sharding_types:
        counts[st.value] = counts.get(st.value, 0) + 1
    lines = [
        (f"profile {result.profile}: {result.world_size} rank(s), batch {result.batch_size}, "
        f"comm {result.comm_precision.value}, {len(result.tables)} tables"),
        "sharding: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        f"{'RANK':>5}  {'HBM':>10}  {'DDR':>10}  {'SSD':>10}  {'COST (ms)':>10}",
    ]
    for rank, (storage, perf) in enumerate(zip(result.rank_storage, result.rank_perf)):
        lines.append(
            f"{rank:>5}  " + "  ".join(f"{format_bytes(storage.get(t)):>10}" for t in TIERS) + f"  {perf.total * 1e3:>10.3f}"
        )
    total, cap, where = result.total_storage, result.rank_capacity, result.tier_summary()
    lines += [
        "total: " + ", ".join(
            f"{t.value.upper()} {format_bytes(total.get(t))} of {format_bytes(cap.get(t) * result.world_size)}"
            for t in TIERS
        ),
        "tables: " + ", ".join([*(f"{n} wholly in {t.value.upper()}" for t, n in where.whole.items()),
                                *([f"{where.split} split over tiers"] if where.split else [])]),
        *(notes or []),
        f"imbalance (max/mean rank cost): {result.imbalance:.4f}",
        (f"projected step time: {result.step_time_s * 1e3:.3f} ms (embeddings only), "
        f"{result.samples_per_s:,.0f} samples/s"),
        *([whole_step] if whole_step else []),
        f"fingerprint: {result.fingerprint}",
    ]
    return "\n".join(lines)
