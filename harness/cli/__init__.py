"""The ``harness`` command line: thin click commands over the library.

Every user-facing failure is one line on stderr and a documented exit code:
0 success, 1 a run or check failed, 2 bad input or unknown name, 3 hardware not present,
4 not implemented, 130 interrupted.
"""

from __future__ import annotations

import sys

import click

from harness.errors import HarnessError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dlrm-harness")
def cli() -> None:
    """MLPerf-style DLRM training benchmark harness."""


def _register() -> None:
    from harness.cli import borrow as _borrow
    from harness.cli import check as _check
    from harness.cli import data as _dataset_cli
    from harness.cli import infer as _infer
    from harness.cli import leaderboard as _leaderboard
    from harness.cli import plan as _plan
    from harness.cli import profiles as _profiles
    from harness.cli import rcp as _rcp
    from harness.cli import rules as _rules
    from harness.cli import run as _run

    cli.add_command(_profiles.profiles)
    cli.add_command(_run.run)
    cli.add_command(_leaderboard.leaderboard)
    cli.add_command(_borrow.borrow)
    cli.add_command(_rcp.rcp)
    cli.add_command(_plan.plan)
    cli.add_command(_check.check)
    cli.add_command(_rules.rules)
    cli.add_command(_infer.infer)
    cli.add_command(_dataset_cli.data)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every HarnessError into one line and an exit code."""
    _register()
    try:
        code = cli.main(args=argv, prog_name="harness", standalone_mode=False)
    except HarnessError as err:
        click.echo(f"harness: error: {err}", err=True)
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("harness: interrupted", err=True)
        return 130
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except KeyboardInterrupt:
        click.echo("harness: interrupted", err=True)
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
