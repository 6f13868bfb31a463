"""The ``harness`` command line: thin click commands over the library.

Every user-facing failure is one line on stderr and a documented exit code:
0 success, 1 a run or check failed, 2 bad input or unknown name, 3 hardware not present,
4 not implemented, 5 an I/O fault of the machine (a full disk, a folder that cannot be written, an
I/O error), 130 interrupted (SIGINT), 143 stopped by SIGTERM.

A command's module is imported only when that command runs (or its ``--help`` is asked for):
``harness --help`` lists the commands from :data:`COMMANDS` alone, so ``harness check`` never
loads the training stack (torch) that ``harness run`` needs.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Mapping
from typing import Any

import click

from harness.errors import ErrorCategory, HarnessError, closest, io_fault
from harness.process import exit_now, interrupt_reason, signal_of, stop_on_signals

#: name -> ("module:attribute" of the click command, the one-line help ``harness --help`` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "borrow": ("harness.cli.borrow:borrow", "Copy a lender's hyperparameters into a submitter config, with their provenance."),
    "check": ("harness.cli.check:check",
              "Check a result log, a results/<system>/<benchmark> run set, a package (systems/ + results/), or "
              "every package in or below a folder (a round folder, a tree of rounds: one line each)."),
    "data": ("harness.cli.data:data", "Datasets: write a synthetic benchmark as Criteo or Yambda files, inspect such files."),
    "infer": ("harness.cli.infer:infer", "Serve a trained model from memory and from the SSD tier as MLPerf Inference runs it."),
    "leaderboard": ("harness.cli.leaderboard:leaderboard",
                    "Score and compare every run set under ROOTS (results trees in the MLPerf layout)."),
    "plan": ("harness.cli.plan:plan", "Plan the sharding of embedding tables over a profile's ranks and memory tiers."),
    "project": ("harness.cli.project:project",
                "Project a benchmark's training step, phase by phase, and its time to train on a system; or, "
                "with --against, every run set of a results tree beside its real score."),
    "profiles": ("harness.cli.profiles:profiles",
                 "List the hardware profiles (``local``, the default, is this machine as detected)."),
    "rcp": ("harness.cli.rcp:rcp", "Reference Convergence Points, as MLPerf's rcp_checker does them."),
    "report": ("harness.cli.report:report",
               "One run set (or every one below a folder) seen from inside: one HTML page of where its time, bytes "
               "and memory went."),
    "rules": ("harness.cli.rules:rules", "Versioned rule sets (compliance/rulesets/) and their export."),
    "run": ("harness.cli.run:run", "Train the reference DLRM N times to the target AUC; write MLPerf logs; print the score."),
    "summarize": ("harness.cli.summarize:summarize",
                  "Scores of a results tree as MLPerf's result summarizer writes them (CSV and JSON)."),
}


class LazyGroup(click.Group):
    """A group whose commands are ``"module:attribute"`` strings, imported on first use.

    Listing (``--help``, completion of names) reads only the table; :meth:`get_command` imports
    the one module asked for. A command whose module is not there is one HarnessError (exit 4)
    when it is invoked, never when the commands are listed.
    """

    def __init__(self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        target, _ = self.lazy_commands[cmd_name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            missing = err.name or str(err)
            what = f"its module {module_name} is not in this installation" if missing == module_name else \
                f"it needs the module {missing!r}, which is not installed"
            raise HarnessError(f"harness {cmd_name} is not available: {what}", ErrorCategory.NOT_IMPLEMENTED) from None
        command = getattr(module, attr, None)
        if not isinstance(command, click.Command):
            raise HarnessError(f"harness {cmd_name} is not available: {target} is not a command",
                               ErrorCategory.NOT_IMPLEMENTED)
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, from the table's help strings for the commands not imported yet."""
        names = [n for n in self.list_commands(ctx) if n not in self.commands or not self.commands[n].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            # a command not imported yet: shortened from the table as click shortens a command's help
            command = self.commands.get(name) or click.Command(name, help=self.lazy_commands[name][1])
            rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _param_name(err: click.BadParameter) -> str | None:
    """The option (its long name) or argument (``PATH``) a bad-parameter error is about."""
    hint = err.param_hint
    if hint is not None:
        names = [hint] if isinstance(hint, str) else list(hint)
        return " / ".join(n.strip("'\"") for n in names)
    param = err.param
    if isinstance(param, click.Option) and param.opts:
        return max(param.opts, key=len)
    return param.human_readable_name if param is not None else None


def _sentence(text: str) -> str:
    """Click's message as a clause of one line: whitespace (its newlines and tabs) collapsed, the
    first letter in lower case (unless a word in capitals starts it), no full stop at the end."""
    text = " ".join(text.split()).rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _command_path(argv: list[str]) -> str:
    """``harness`` and the (sub)commands ``argv`` names, for an error click raised without its
    context (a parser error: an option without its value, a flag given one)."""
    command: click.Command = cli
    names = ["harness"]
    for word in argv:
        if word.startswith("-") or not isinstance(command, click.Group):
            break
        try:
            found = command.get_command(click.Context(command), word)
        except HarnessError:  # its module is not there: named, as the command was
            found = None
        if found is None:
            break
        command = found
        names.append(word)
    return " ".join(names)


def click_error_line(err: click.ClickException, argv: list[str]) -> str:
    """A click usage error (or other click exception) in the harness's one-line style, without the
    ``harness: error:`` prefix: ``run: --runs: 0 is not in the range x>=1 (harness run --help)``.

    The command (its path below ``harness``), the option or argument, what is wrong, and the
    command's ``--help`` to read; an unknown command or option names the closest ones."""
    ctx = err.ctx if isinstance(err, click.UsageError) else None
    path = ctx.command_path if ctx is not None else _command_path(argv)
    where = path.split(" ", 1)[1] + ": " if " " in path else ""
    if isinstance(err, click.BadParameter) and not isinstance(err, click.MissingParameter):
        name = _param_name(err)
        what = f"{name}: {_sentence(err.message)}" if name else _sentence(err.message)
    elif isinstance(err, (click.NoSuchOption, click.exceptions.NoSuchCommand)):
        possibilities = err.possibilities or []
        if isinstance(err, click.exceptions.NoSuchCommand) and ctx is not None and isinstance(ctx.command, click.Group):
            near = closest(err.command_name, ctx.command.list_commands(ctx))  # the lazy ones too
            possibilities = [near] if near else []
        guess = " or ".join(repr(p) for p in possibilities)
        what = _sentence(err.message) + (f"; did you mean {guess}?" if guess else "")
    else:
        what = _sentence(err.format_message())
    return f"{where}{what}" + (f" ({path} --help)" if path else "")


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dlrm-harness")
def cli() -> None:
    """MLPerf-style DLRM training benchmark harness."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every HarnessError into one line and an exit code.
    SIGTERM (a batch scheduler, ``timeout``, a container stop) interrupts as Ctrl-C does, with
    exit code 143."""
    stop_on_signals(signal.SIGINT, signal.SIGTERM)
    try:
        code = cli.main(args=argv, prog_name="harness", standalone_mode=False)
    except HarnessError as err:
        click.echo(f"harness: error: {err}", err=True)
        return err.exit_code
    except click.exceptions.Abort as err:  # click's word for a KeyboardInterrupt it caught (or Ctrl-D at a prompt)
        cause = err.__cause__ or err.__context__
        signum = signal_of(cause) if isinstance(cause, KeyboardInterrupt) else signal.SIGINT
        click.echo(f"harness: {interrupt_reason(cause) if isinstance(cause, KeyboardInterrupt) else 'interrupted'}",
                   err=True)
        return 128 + signum
    except click.exceptions.NoArgsIsHelpError as err:  # a group called bare: its help, as click shows it
        err.show()
        return err.exit_code
    except click.ClickException as err:  # a usage error (exit 2) or click's own failure: one line, as ours
        click.echo(f"harness: error: {click_error_line(err, sys.argv[1:] if argv is None else argv)}", err=True)
        return err.exit_code
    except KeyboardInterrupt as err:
        click.echo(f"harness: {interrupt_reason(err)}", err=True)
        return 128 + signal_of(err)
    except OSError as err:  # the machine's own fault where no command caught it: still one line
        fault = io_fault(err)
        click.echo(f"harness: error: {fault}", err=True)
        return fault.exit_code
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    exit_now(main())


def entry() -> None:
    """Console-script entry point (``python -m harness`` too): the process ends at once when
    the command is done (:func:`harness.process.exit_now`)."""
    exit_now(main())
