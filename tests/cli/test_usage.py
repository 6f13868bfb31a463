"""Click's usage errors in the harness's style: one line ``harness: error: <command>: <option>: <what>
(harness <command> --help)``, exit 2, for every command (``harness.cli.main``); ``--help`` as click
prints it."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.reference.planner import CommPrecision


@pytest.mark.parametrize("argv, line", [
    (["run", "--runs", "0"], "run: --runs: 0 is not in the range x>=1 (harness run --help)"),
    (["plan"], "plan: missing option '--profile' (harness plan --help)"),
    (["check"], "check: missing argument 'PATH' (harness check --help)"),
    (["plan", "--profile", "local", "--comm-precision", "fp64"], ("plan: --comm-precision: 'fp64' is not one of "
     f"{', '.join(repr(p.value) for p in CommPrecision)} (harness plan --help)")),
    (["plan", "--profile"], "plan: option '--profile' requires an argument (harness plan --help)"),  # no click ctx
    (["rules", "export-mlperf", "--ruleset"],
     "rules export-mlperf: option '--ruleset' requires an argument (harness rules export-mlperf --help)"),
    (["check", "--jsn", "x"], "check: no such option '--jsn'; did you mean '--json'? (harness check --help)"),
    (["chek", "x"], "no such command 'chek'; did you mean 'check'? (harness --help)"),  # a command not imported yet
])
def test_a_usage_error_is_one_line_naming_the_command_and_exit_2(capsys, argv, line):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"harness: error: {line}\n")


def test_help_is_still_clicks(capsys):
    assert main(["plan", "--help"]) == 0
    assert capsys.readouterr().out.startswith("Usage: harness plan [OPTIONS]\n")
    assert main([]) == 2  # bare: the command list, on stderr, as click shows it
    assert capsys.readouterr().err.startswith("Usage: harness [OPTIONS] COMMAND [ARGS]...\n")
    assert main(["plan", "--comm-precision", "fp64"]) == 2  # and an error beside it is one line
    assert capsys.readouterr().err.startswith("harness: error: plan: ")
