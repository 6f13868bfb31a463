"""``harness plan``: the embedding sharding plan of a benchmark or model on a profile,
and its projected step time, without training."""

from __future__ import annotations

import json

import click

from harness.errors import HarnessError
from harness.hw_profiles import load_profile
from harness.hw_profiles.profiles import format_bytes
from harness.reference.planner import (
    CommPrecision,
    Plan,
    PlannerConfig,
    TableSpec,
    plan_tables,
)
from harness.reference.planner.models import load_model, tables_for_benchmark
from harness.reference.planner.types import TIERS

DEFAULT_BATCH_SIZE = 65536


@click.command()
@click.option("--profile", "profile_name", required=True, help="Hardware profile name, or a profile .yaml path.")
@click.option("--benchmark", "benchmark", default=None, help="Plan the tables of this benchmark spec.")
@click.option("--model", "model", default=None, help="Plan the tables of this model (e.g. dlrm-12t).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Global batch size (default: the benchmark's global batch size, else 65536).")
@click.option("--comm-precision", type=click.Choice([p.value for p in CommPrecision]), default="fp32",
              show_default=True, help="Precision of the embedding all-to-all on the wire.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(
    profile_name: str, benchmark: str | None, model: str | None, batch_size: int | None, comm_precision: str,
    as_json: bool,
) -> None:
    """Plan the sharding of embedding tables over a profile's ranks and memory tiers."""
    if (benchmark is None) == (model is None):
        raise HarnessError("give exactly one of --benchmark and --model")
    tables, default_batch = _tables(benchmark=benchmark, model=model)
    config = PlannerConfig(batch_size=batch_size or default_batch, comm_precision=CommPrecision(comm_precision))
    result = plan_tables(tables, load_profile(profile_name), config)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(render(result))


def _tables(*, benchmark: str | None, model: str | None) -> tuple[list[TableSpec], int]:
    if model is not None:
        return load_model(model), DEFAULT_BATCH_SIZE
    from harness.rules.specs import load_benchmark

    spec = load_benchmark(benchmark)  # type: ignore[arg-type]
    batch = spec.reference_hyperparameters.get("global_batch_size", DEFAULT_BATCH_SIZE)
    return tables_for_benchmark(spec), int(batch)


def render(result: Plan) -> str:
    """The plan as text: per-rank bytes per tier and cost, then totals and projections."""
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
    total, cap = result.total_storage, result.rank_capacity
    lines += [
        "total: " + ", ".join(
            f"{t.value.upper()} {format_bytes(total.get(t))} of {format_bytes(cap.get(t) * result.world_size)}"
            for t in TIERS
        ),
        f"imbalance (max/mean rank cost): {result.imbalance:.4f}",
        (f"projected step time: {result.step_time_s * 1e3:.3f} ms (embeddings only), "
        f"{result.samples_per_s:,.0f} samples/s"),
        f"fingerprint: {result.fingerprint}",
    ]
    return "\n".join(lines)
