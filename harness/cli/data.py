"""``harness data``: export a synthetic benchmark in its real data's formats (Criteo's; Yambda's parquet
for event streams), inspect a dataset (Criteo files or a Yambda folder).

Exit status: 0 success (``inspect``: the dataset is well-formed); 2 bad input (``inspect``: a
malformed record, after the report is printed; ``export``: an existing non-empty folder, a
benchmark that is not synthetic, a format it does not accept) or nothing found at the path; 5 an
I/O fault (a full disk, a folder that cannot be written); 130 or 143 interrupted by Ctrl-C or
SIGTERM (the partial export removed).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.errors import ErrorCategory, HarnessError
from harness.process import interrupt_category, interrupt_reason
from harness.rules.specs import load_benchmark


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


@click.group("data")
def data() -> None:
    """Datasets: write a synthetic benchmark as Criteo or Yambda files, inspect such files."""


@data.command("export")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--benchmark", "-b", required=True, help="Synthetic benchmark (name or spec file) to write.")
@click.option("--format", "fmt", type=click.Choice(["criteo-tsv", "mlperf-npy", "yambda-parquet"]), default=None,
              help="criteo-tsv: Terabyte day_0..day_{D-1}; mlperf-npy: MLPerf's day_<d>_*.npy/.npz (both for a "
                   "tabular benchmark, which needs one); yambda-parquet: Yambda's flat multi_event.parquet and "
                   "mappings (an event-stream benchmark's, its default).")
@click.option("--days", type=click.IntRange(min=2), default=24, show_default=True,
              help="Criteo days: the train split in days 0..D-2, the eval split in the first half of the last.")
@click.option("--gzip", "gz", is_flag=True, help="Compress the TSV days (day_N.gz; such a copy reads one epoch only).")
def export(out_dir: Path, benchmark: str, fmt: str | None, days: int, gz: bool) -> None:
    """Write a synthetic benchmark's samples (or event streams) into the new folder OUT_DIR, so that
    training on it (`harness run --data OUT_DIR`) sees exactly the generator's batches.

    Exit status: 0 written, 2 bad input (then nothing is written; an interrupted export leaves
    nothing under OUT_DIR either).
    """
    # the reference's data stack: only when the command runs, not for `harness data --help`
    from harness.reference.data.export import export_dataset, export_event_streams

    spec = load_benchmark(benchmark).for_training("harness data export")
    events = spec.dataset.get("kind") == "event_streams"
    if events and fmt not in (None, "yambda-parquet"):
        raise HarnessError(f"benchmark {spec.name} is event streams: they export as yambda-parquet, not {fmt}",
                           ErrorCategory.BAD_INPUT)
    if not events and fmt in (None, "yambda-parquet"):
        raise HarnessError(f"benchmark {spec.name} is tabular: give --format criteo-tsv or mlperf-npy"
                           + (" (yambda-parquet holds event streams)" if fmt else ""), ErrorCategory.BAD_INPUT)
    try:
        if events:
            ev = export_event_streams(spec, out_dir, progress=click.echo)
            click.echo(f"wrote {len(ev.files)} files, {_size(ev.total_bytes)}, to {ev.out_dir}: {ev.listens:,} "
                       f"listens and {ev.likes:,} likes of {ev.users:,} users in Yambda's flat layout")
            return
        assert fmt is not None  # a tabular benchmark: refused above without a format
        result = export_dataset(spec, fmt, out_dir, days=days, gzip=gz, progress=click.echo)
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: the partial export has been removed
        raise HarnessError(f"{interrupt_reason(err)}: nothing was exported to {out_dir} (the partial copy is "
                           f"removed); run the same command again", interrupt_category(err)) from None
    click.echo(f"wrote {len(result.files)} files, {_size(result.total_bytes)}, to {result.out_dir}: "
               f"{spec.dataset['train_samples']} train samples in days 0-{days - 2}, "
               f"{spec.dataset['eval_samples']} eval samples in the first half of day {days - 1}")


@data.command("inspect")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--benchmark", "-b", default=None,
              help="A Yambda folder only: also report what this benchmark's spec cuts from it (its splits).")
@click.option("--data-cache", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              envvar="HARNESS_DATA_CACHE", show_envvar=True,
              help="With --benchmark: where the Yambda columns the run reads are cached [default: "
                   "~/.cache/harness/yambda].")
@click.option("--scale", type=click.Choice(["50m", "500m", "5b"], case_sensitive=False), default=None,
              help="A Yambda dataset root only: the scale to read (flat/<scale>/, sequential/<scale>/ or "
                   "raw/<scale>/) [default: the benchmark's dataset.scale, else the only one there].")
def inspect(path: Path, as_json: bool, benchmark: str | None, data_cache: Path | None, scale: str | None) -> None:
    """Read a dataset once and report on it: Criteo (TSV days or train.txt, plain or gzip; MLPerf npy):
    its days, splits, label rates, distinct values and pooling per feature; a Yambda folder
    (multi_event.parquet or listens.parquet, ..., and the mappings): its events per type, users, items,
    time span and the reference's split into windows. Either way its first malformed record.

    Exit status: 0 well-formed (and, with --benchmark, the data can serve that benchmark), 2 a malformed
    record or data the benchmark cannot be served from (after the report, the reason in one line) or
    nothing found at PATH.
    """
    # the reference's data stack (it loads torch): only when the command runs, as each import below
    from harness.reference.data.yambda_store import is_yambda_folder

    log = None if as_json else (lambda line: click.echo(f"  read {line}", err=True))
    if is_yambda_folder(path):
        from harness.reference.data.yambda_inspect import (
            format_yambda_report,
            inspect_yambda,
        )

        dataset = load_benchmark(benchmark).dataset if benchmark else None
        yambda = inspect_yambda(path, dataset=dataset, scale=scale, cache_dir=data_cache, progress=log)
        click.echo(json.dumps(yambda.as_json(), indent=1) if as_json else format_yambda_report(yambda))
        if yambda.problem is not None:  # malformed, or the benchmark cannot be served: the reason, exit 2
            raise HarnessError(yambda.problem, ErrorCategory.BAD_INPUT)
        well_formed = yambda.well_formed
    else:
        from harness.reference.data.inspect import format_report, inspect_dataset

        if benchmark or scale:
            raise HarnessError(f"{'--benchmark' if benchmark else '--scale'} applies to a Yambda folder only")
        report = inspect_dataset(path, progress=log)
        click.echo(json.dumps(report.as_json(), indent=1) if as_json else format_report(report))
        well_formed = report.well_formed
    if not well_formed:
        raise click.exceptions.Exit(2)
