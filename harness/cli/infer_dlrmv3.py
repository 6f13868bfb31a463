"""``harness infer --benchmark dlrm-v3``: the options of ``harness infer`` given to the dlrm-v3 pipeline
(:mod:`harness.inference.dlrmv3_serve`), its report printed and its verdict as the exit status.

MLPerf Inference's benchmark names select what ``harness infer`` serves: ``dlrm-v3`` (v6.0 on: the HSTU
ranker, its twin trained here) and ``dlrm-v2`` (up to v5.1: the DLRMv2 pipeline on the
``dlrm_synthetic`` spec, as ``harness infer`` serves by default).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.errors import ErrorCategory, HarnessError
from harness.inference.config import Scenario
from harness.process import interrupt_category, interrupt_reason
from harness.reference.planner.types import CachePolicy, RowReader

DLRM_V3 = "dlrm-v3"
DLRM_V2 = "dlrm-v2"
DLRM_V2_SPEC = "dlrm_synthetic"  # what `harness infer --benchmark dlrm-v2` serves
# dlrm-v3's defaults, chosen by measurement (docs/infer-dlrmv3.md, docs/performance.md): a request misses
# ~1,700 rows at once, read faster at a deeper queue; its item rows are drawn evenly over the catalogue, so a
# cache's hit rate is about its share of the rows, and the Server bound needs half of them cached
DLRMV3_QUEUE_DEPTH = 256
DLRMV3_CACHE_FRACTION = 0.5


def infer_dlrmv3(*, scenarios: tuple[Scenario, ...], quick: bool, results: Path, storage_latency_us: float,
                 storage_queue_depth: int, cache_fraction: float, cache_policy: str, offline_qps: float | None,
                 server_qps: float | None, variant_kinds: tuple[str, ...], cold_cache: bool, buffered: bool,
                 row_reader: str, seed: int, train_steps: int | None, model_dir: Path | None, threads: int,
                 precision: str, as_json: bool) -> None:
    """Serve the dlrm-v3 twin; raise a one-line HarnessError (exit 1) when a run was INVALID, missed the
    accuracy target or failed TEST08, after the report is printed."""
    if precision != "fp32":
        raise HarnessError(f"--precision {precision}: the dlrm-v3 twin is trained and served in fp32 (the accuracy "
                           f"reference), other precisions are not implemented for it", ErrorCategory.NOT_IMPLEMENTED)
    try:  # here: the pipeline loads torch, which `harness infer --help` must not
        from harness.inference.dlrmv3_serve import V3Config, run_dlrmv3
    except ModuleNotFoundError as err:
        raise HarnessError(f"harness infer is not available: it needs the module {err.name or str(err)!r}, which is "
                           f"not installed", ErrorCategory.NOT_IMPLEMENTED) from None
    config = V3Config(scenarios=scenarios, quick=quick, results=results, variant_kinds=variant_kinds,
                      storage_latency_us=storage_latency_us, storage_queue_depth=storage_queue_depth,
                      cache_fraction=cache_fraction, cache_policy=CachePolicy(cache_policy), warm_cache=not cold_cache,
                      offline_qps=offline_qps, server_qps=server_qps, seed=seed, train_steps=train_steps,
                      model_dir=model_dir, threads=threads, direct=not buffered, row_reader=RowReader(row_reader))
    try:
        report = run_dlrmv3(config, progress=lambda message: click.echo(message, err=True))
    except KeyboardInterrupt as err:
        raise HarnessError(f"{interrupt_reason(err)}: a model already trained is kept and reused by the same "
                           f"command; the results of the LoadGen run it stopped are incomplete",
                           interrupt_category(err)) from None
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1))
    else:
        click.echo(report.render())
    failure = report.failure()
    if failure is not None:
        raise HarnessError(failure, ErrorCategory.RUN_FAILED)
