"""``harness data``: export the synthetic benchmark in Criteo's formats, inspect a dataset.

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

from harness.errors import HarnessError, interrupt_category, interrupt_reason


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


@click.group("data")
def data() -> None:
    """Datasets: write the synthetic benchmark as Criteo files, inspect Criteo files."""


@data.command("export")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--benchmark", "-b", required=True, help="Synthetic benchmark (name or spec file) to write.")
@click.option("--format", "fmt", type=click.Choice(["criteo-tsv", "mlperf-npy"]), required=True,
              help="criteo-tsv: Terabyte day_0..day_{D-1}; mlperf-npy: MLPerf's day_<d>_*.npy/.npz.")
@click.option("--days", type=click.IntRange(min=2), default=24, show_default=True,
              help="Days: the train split in days 0..D-2, the eval split in the first half of the last.")
@click.option("--gzip", "gz", is_flag=True, help="Compress the TSV days (day_N.gz; such a copy reads one epoch only).")
def export(out_dir: Path, benchmark: str, fmt: str, days: int, gz: bool) -> None:
    """Write a synthetic benchmark's samples into the new folder OUT_DIR, so that training on it
    (`harness run --data OUT_DIR`) sees exactly the generator's batches.

    Exit status: 0 written, 2 bad input (then nothing is written; an interrupted export leaves
    nothing under OUT_DIR either).
    """
    from harness.reference.data.export import export_dataset
    from harness.rules.specs import load_benchmark

    spec = load_benchmark(benchmark)
    try:
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
def inspect(path: Path, as_json: bool) -> None:
    """Read a Criteo dataset (TSV days or train.txt, plain or gzip; MLPerf npy) once and report its
    days, splits, label rates, distinct values and pooling per feature, and its first malformed record.

    Exit status: 0 well-formed, 2 a malformed record (after the report) or nothing found at PATH.
    """
    from harness.reference.data.inspect import format_report, inspect_dataset

    report = inspect_dataset(path, progress=None if as_json else lambda line: click.echo(f"  read {line}", err=True))
    click.echo(json.dumps(report.as_json(), indent=1) if as_json else format_report(report))
    if not report.well_formed:
        raise click.exceptions.Exit(2)
