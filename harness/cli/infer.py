"""``harness infer``: a benchmark's trained model served from memory and from the SSD tier
behind a DRAM cache, under MLPerf's LoadGen (Offline and Server); throughput, p99 latency
and the memory the SSD tier saves."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.hw_profiles.profiles import format_bytes
from harness.infer import (
    DEFAULT_SERVER_LATENCY_MS,
    InferConfig,
    InferReport,
    Scenario,
    ScenarioResult,
    run_inference,
)
from harness.reference.tiered import CachePolicy

DEFAULT_BENCHMARK = "dlrm_synthetic"
SCENARIOS = {"offline": (Scenario.OFFLINE,), "server": (Scenario.SERVER,), "both": (Scenario.OFFLINE, Scenario.SERVER)}


@click.command()
@click.option("--benchmark", "-b", default=DEFAULT_BENCHMARK, show_default=True, help="Benchmark spec name.")
@click.option("--scenario", type=click.Choice(list(SCENARIOS)), default="both", show_default=True,
              help="LoadGen scenario(s) to run, each for both variants.")
@click.option("--cache-fraction", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.05, show_default=True,
              help="Rows of the SSD variant's DRAM cache, as a fraction of all table rows.")
@click.option("--cache-policy", type=click.Choice([p.value for p in CachePolicy]), default="lru", show_default=True,
              help="The cache's eviction policy.")
@click.option("--duration", "duration_s", type=click.FloatRange(0.0, min_open=True), default=10.0, show_default=True,
              help="LoadGen's minimum duration of each run, in seconds.")
@click.option("--server-qps", type=click.FloatRange(0.0, min_open=True), default=None,
              help="Server scenario's target QPS [default: half the in-memory model's one-sample query rate].")
@click.option("--server-latency-ms", type=click.FloatRange(0.0, min_open=True), default=DEFAULT_SERVER_LATENCY_MS,
              show_default=True, help="Server scenario's p99 latency bound (MLPerf's DLRM-v2 bound).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Training seed of the model.")
@click.option("--train-steps", type=click.IntRange(min=1), default=None,
              help="Train this many steps [default: until the target AUC, evaluating at the benchmark's cadence].")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the trained model is kept and reused, and LoadGen logs "
                   "[default: results/.harness/models/<benchmark>-seed<N>].")
@click.option("--max-batch", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Most samples per model call, in both scenarios.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Torch intra-op threads (training and inference).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def infer(
    benchmark: str, scenario: str, cache_fraction: float, cache_policy: str, duration_s: float,
    server_qps: float | None, server_latency_ms: float, seed: int, train_steps: int | None, model_dir: Path | None,
    max_batch: int, threads: int, as_json: bool,
) -> None:
    """Serve a trained model from memory and from the SSD tier under MLPerf's LoadGen."""
    config = InferConfig(
        benchmark=benchmark, scenarios=SCENARIOS[scenario], cache_fraction=cache_fraction,
        cache_policy=CachePolicy(cache_policy), duration_s=duration_s, server_qps=server_qps,
        server_latency_ms=server_latency_ms, seed=seed, train_steps=train_steps, model_dir=model_dir,
        max_batch=max_batch, threads=threads,
    )
    report = run_inference(config, progress=lambda message: click.echo(message, err=True))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1))
    else:
        click.echo(render(report))


def _cell(result: ScenarioResult) -> tuple[str, str]:
    """The cache columns of one row: hit rate, and batches through the cache / bypassing it."""
    if result.cache is None:
        return "-", "-"
    c = result.cache
    rate = "-" if c.hit_rate is None else f"{c.hit_rate:.3f}"
    return rate, f"{c.batches_through_cache}/{c.batches_bypassing}"


def render(report: InferReport) -> str:
    """The report as text: the model, then a row per variant and scenario, then memory."""
    m, mem, c = report.model, report.memory, report.config
    how = "reused" if m.reused else f"trained in {m.train_s:.1f} s"
    target = "reached" if m.reached_target else "NOT reached"
    lines = [
        (f"model: {m.benchmark} seed {m.seed}, {m.steps} steps ({m.epochs:.3f} epoch), AUC {m.auc:.5f} "
         f"(target {m.target_auc} {target}); {how}: {m.path}"),
        f"predictions identical (memory vs ssd), bit for bit, on {report.identical_samples} eval samples",
        (f"loadgen {report.loadgen_version}; {c.duration_s:g} s min per run; batches of up to {c.max_batch}; "
         f"{c.threads} torch thread(s); ssd cache {mem.cache_rows} of {mem.rows} rows ({c.cache_fraction:g}, "
         f"{c.cache_policy.value})"),
    ]
    if report.server_target_qps is not None:
        lines.append(f"server: target {report.server_target_qps:,.0f} QPS ({report.server_qps_source}), "
                     f"p99 bound {c.server_latency_ms:g} ms")
    header = (f"{'VARIANT':<8} {'SCENARIO':<8} {'TARGET QPS':>11} {'SAMPLES/S':>11} {'P99 (ms)':>10} "
              f"{'RESULT':<8} {'CACHE HIT':>9} {'CACHED/BYPASS':>13}")
    lines += ["", header]
    for r in report.results:
        s = r.summary
        p99 = "-" if s.scenario is Scenario.OFFLINE else f"{s.p99_latency_ms:.2f}"
        hit, split = _cell(r)
        lines.append(f"{r.variant.value:<8} {s.scenario.value:<8} {r.target_qps:>11,.0f} {s.samples_per_s:>11,.0f} "
                     f"{p99:>10} {'VALID' if s.valid else 'INVALID':<8} {hit:>9} {split:>13}")
    if any(r.summary.scenario is Scenario.OFFLINE for r in report.results):
        lines.append("(offline: LoadGen issues one query of every sample, so its latency is the whole run: not shown)")
    lines += [
        "",
        (f"tables in memory: {format_bytes(mem.memory_bytes)} (memory variant) vs "
         f"{format_bytes(mem.ssd_resident_bytes)} (ssd variant: cached rows {format_bytes(mem.cache_slot_bytes)}, "
         f"row->slot map {format_bytes(mem.row_map_bytes)}, bookkeeping {format_bytes(mem.bookkeeping_bytes)}; "
         f"{format_bytes(mem.ssd_file_bytes)} on SSD)"),
        f"memory saved: {format_bytes(mem.saved_bytes)} ({mem.saved_fraction:.1%})",
        f"loadgen logs: {report.results[0].summary.path.parent.parent if report.results else '-'}",
        f"wall time: {report.wall_s:.1f} s",
    ]
    return "\n".join(lines)
