"""``harness plan``: the embedding sharding plan of a benchmark or model on a profile,
and its projected step time, without training.

An MLPerf Inference benchmark (``dlrm-v3``) is planned as it is served: its tables' weights alone at
its table precision, the forward pass alone, a batch of its ``requests_per_batch`` a rank; each table's
placement is printed, and in place of the training step the Server QPS bound the placement implies
(:mod:`harness.projection.inference`).
"""

from __future__ import annotations

import json

import click

from harness.errors import HarnessError, unknown_name
from harness.hw_profiles import load_profile
from harness.hw_profiles.profiles import Profile, format_bytes
from harness.projection.constants import load_constants
from harness.projection.inference import HSTUShape, inference_bound
from harness.projection.render import inference_bound_lines, whole_step_line
from harness.projection.step import training_step
from harness.projection.system import system_for_profile
from harness.projection.workload import benchmark_workload
from harness.reference.planner import (
    CommPrecision,
    Plan,
    PlannerConfig,
    ShardEstimator,
    ShardingType,
    TableSpec,
    Topology,
    plan_tables,
)
from harness.reference.planner.models import (
    inference_request,
    load_model,
    model_names,
    sequence_events,
    table_bytes_per_element,
    tables_for_benchmark,
)
from harness.reference.planner.types import TIERS
from harness.rules.specs import BenchmarkSpec, Suite, benchmark_names, load_benchmark

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
              help="Global batch size (default: the benchmark's global batch size, else 65536; an inference "
                   "benchmark's requests_per_batch a rank, times the ranks).")
@click.option("--comm-precision", type=click.Choice([p.value for p in CommPrecision]), default=None,
              help="Precision of the embedding all-to-all on the wire [default: fp32; an inference benchmark's "
                   "table precision].")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--cache-fraction", type=click.FloatRange(0, 1), default=DEFAULT_CACHE_FRACTION, show_default=True,
              help="Shards in DDR under HBM, and on the SSD, are trained through a cache of this share of their "
                   "rows (never fewer than one batch looks up) in the fastest tier above them; 0: read in place.")
def plan(
    profile_name: str, benchmark: str | None, model: str | None, batch_size: int | None, comm_precision: str | None,
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
    spec = load_benchmark(benchmark) if benchmark is not None else None
    if spec is not None and spec.suite is Suite.INFERENCE:
        _plan_inference(spec, tables, notes, profile_name=profile_name, batch_size=batch_size,
                        comm_precision=comm_precision, as_json=as_json, cache_fraction=cache_fraction)
        return
    config = PlannerConfig(batch_size=batch_size or default_batch,
                           comm_precision=CommPrecision(comm_precision or CommPrecision.FP32.value),
                           ddr_cache_fraction=cache_fraction, ssd_cache_fraction=cache_fraction)
    profile = load_profile(profile_name)
    result = plan_tables(tables, profile, config)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(render(result, notes, whole_step=_whole_step(benchmark, profile, result)))


def _plan_inference(spec: BenchmarkSpec, tables: list[TableSpec], notes: list[str], *, profile_name: str,
                    batch_size: int | None, comm_precision: str | None, as_json: bool, cache_fraction: float) -> None:
    """Plan an inference benchmark's tables as they are served, and print the plan, each table's
    placement and the Server QPS bound (or the plan's JSON)."""
    settings = spec.inference
    profile = load_profile(profile_name)
    per_rank = int(settings["requests_per_batch"])
    config = PlannerConfig(batch_size=batch_size or per_rank * profile.world_size,
                           comm_precision=CommPrecision(comm_precision or settings["table_precision"]),
                           param_bytes_per_element=table_bytes_per_element(spec), inference=True,
                           ddr_cache_fraction=cache_fraction, ssd_cache_fraction=cache_fraction)
    result = plan_tables(tables, profile, config)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
        return
    estimator = ShardEstimator(Topology.from_profile(profile), config)
    batch = (f"{per_rank} requests a rank (the reference's batch) x {profile.world_size} rank(s)" if batch_size is None
             else "--batch-size")
    notes = [
        f"inference: the tables' weights alone in {settings['table_precision']} (no optimizer state), the forward "
        f"pass alone; batch {config.batch_size} = {batch}",
        *notes,
        *table_lines(result, estimator, settings["table_precision"]),
    ]
    a_rank = -(-config.batch_size // profile.world_size)  # the requests one rank answers at once
    click.echo(render(result, notes, whole_step=_inference_bound(spec, profile, result, config, a_rank),
                      unit="requests"))


def _inference_bound(spec: BenchmarkSpec, profile: Profile, result: Plan, config: PlannerConfig, batch: int) -> str:
    """The lines of the Server QPS bound the plan implies, or why there is none."""
    settings, model = spec.inference, spec.raw["model"]
    try:
        system = system_for_profile(profile)
    except HarnessError as err:
        return f"inference bound: not projected ({err})"
    shape = HSTUShape(layers=int(model["num_layers"]), width=int(model["embedding_dim"]), heads=int(model["num_heads"]),
                      attention_dim=int(model["attention_dim"]), linear_dim=int(model["linear_dim"]))
    bound = inference_bound(inference_request(spec), shape, system, result, config,
                            precision=system.device.compute_precision(settings["dense_precision"]), batch=batch,
                            latency_bound_s=float(settings["server_latency_ms"]) / 1e3)
    return "\n".join(inference_bound_lines(bound, system.device.name))


def table_lines(result: Plan, estimator: ShardEstimator, precision: str) -> list[str]:
    """A line per table: its size, its sharding, the bytes of its shards per tier (and on which ranks),
    and the caches in front of them."""
    lines = []
    for table, sharding, shards in zip(result.tables, result.sharding_types, result.table_shards()):
        stored = sum(s.storage_bytes for s in shards)
        where = []
        for tier in TIERS:
            here = [s for s in shards if s.tier is tier]
            if here:
                ranks = sorted({s.rank for s in here})
                on = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranges(ranks)}"
                where.append(f"{tier.value.upper()} {format_bytes(sum(s.storage_bytes for s in here))} ({on})")
        replica = sharding is ShardingType.DATA_PARALLEL
        caches = [c for s in shards if (c := estimator.placed_cache(table, s, replica=replica)) is not None]
        cached = ""
        if caches:
            share = sum(c.slots for c in caches) / sum(s.rows for s in shards if not replica)
            tiers = sorted({c.tier.value.upper() for c in caches})
            cached = (f"; caches of {share:.1%} of its rows in {' and '.join(tiers)}: "
                      f"{format_bytes(sum(c.nbytes for c in caches))}")
        rows, count = f"row{'s' if table.rows != 1 else ''}", f"shard{'s' if len(shards) != 1 else ''}"
        lines.append(f"  {table.name}: {table.rows:,} {rows} x {table.dim} {precision} ({format_bytes(stored)}), "
                     f"{sharding.value}, {len(shards)} {count}: {', '.join(where)}{cached}")
    return ["tables placed:", *lines]


def _ranges(ranks: list[int]) -> str:
    """``0-7``, ``0, 2-3``: sorted ranks as runs."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def _tables(*, benchmark: str | None, model: str | None) -> tuple[list[TableSpec], int, list[str]]:
    """The tables, the default global batch, and what the text output should say about how they are priced."""
    if model is not None:
        return load_model(model), DEFAULT_BATCH_SIZE, []
    assert benchmark is not None  # plan() takes exactly one of the two
    spec = load_benchmark(benchmark)
    inference = spec.suite is Suite.INFERENCE
    batch = DEFAULT_BATCH_SIZE if inference else spec.reference_hyperparameters.get("global_batch_size",
                                                                                     DEFAULT_BATCH_SIZE)
    tables = tables_for_benchmark(spec)
    notes = []
    if any(t.sequence for t in tables):
        events, source = sequence_events(spec)
        names = ", ".join(t.name for t in tables if t.sequence)
        notes.append(f"sequence tables ({names}) priced at {events:g} ids a {'request' if inference else 'sample'}: "
                     f"{source}")
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


def render(result: Plan, notes: list[str] | None = None, *, whole_step: str | None = None,
           unit: str = "samples") -> str:
    """The plan as text: per-rank bytes per tier and cost, then totals, where the tables are and
    projections (``notes``: lines on how the tables were priced; ``whole_step``: the line of the
    whole step's projection, beside the embeddings-only one; ``unit``: what a batch counts)."""
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
        f"{result.samples_per_s:,.0f} {unit}/s"),
        *([whole_step] if whole_step else []),
        f"fingerprint: {result.fingerprint}",
    ]
    return "\n".join(lines)
