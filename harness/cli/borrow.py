"""``harness borrow``: take another submission's hyperparameters as a group (MLPerf rules)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.submitters.borrowing import borrow as borrow_hyperparameters


@click.command()
@click.option("--from", "source", required=True, type=click.Path(path_type=Path),
              help="The lender: a results/<system>/<benchmark> run set, or a submitter config YAML.")
@click.option("--to", "to", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The borrower's submitter config (harness/submitters/<org>/<benchmark>.yaml).")
@click.option("--submitter", default=None, help="The borrower's name, when --to does not exist yet.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="The borrower's global batch size (the one value that may differ).")
def borrow(source: Path, to: Path, submitter: str | None, batch_size: int | None) -> None:
    """Copy a lender's hyperparameters into a submitter config, with their provenance."""
    config = borrow_hyperparameters(source=source, to=to, submitter=submitter, batch_size=batch_size)
    b = config["borrowed_from"]
    click.echo(f"{to}: {config['submitter']} borrows {len(b['hyperparameters'])} hyperparameters of "
               f"{config['benchmark']} from {b['lender']} ({b['lender_fingerprint'][:19]}...)")
    click.echo(f"global_batch_size: {config['hyperparameters'].get('global_batch_size')}")
