"""``harness plan`` as a new user meets it: the default benchmark, and one-line errors that list the
choices and name the closest one."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.hw_profiles import profile_names
from harness.reference.planner.models import model_names
from harness.rules.specs import benchmark_names


def _plan(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_without_a_benchmark_or_model_it_plans_harness_runs_default_benchmark(capsys):
    code, out, err = _plan(capsys, "--profile", "zionex-8gpu", "--json")
    assert code == 0, err
    assert _plan(capsys, "--profile", "zionex-8gpu", "--benchmark", "dlrm_synthetic", "--json") == (0, out, "")


def test_both_is_one_line_listing_the_choices(capsys):
    code, out, err = _plan(capsys, "--profile", "zionex-8gpu", "--benchmark", "dlrm", "--model", "dlrm-12t")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err == (f"harness: error: give one of --benchmark ({', '.join(benchmark_names())}) and --model "
                   f"({', '.join(model_names())}, or a model .yaml file), not both\n")


@pytest.mark.parametrize("argv, start, names", [
    (["--profile", "zionex8gpu"], "unknown profile 'zionex8gpu' (did you mean 'zionex-8gpu'?); known profiles: ",
     profile_names()),
    (["--profile", "zionex-8gpu", "--benchmark", "dlrm_dcnv3"],
     "unknown benchmark 'dlrm_dcnv3' (did you mean 'dlrm_dcnv2'?); known: ", benchmark_names()),
    (["--profile", "zionex-8gpu", "--model", "dlrm12t"], "unknown model 'dlrm12t' (did you mean 'dlrm-12t'?); known: ",
     model_names()),
])
def test_an_unknown_name_suggests_the_closest_and_lists_them_all(capsys, argv, start, names):
    code, out, err = _plan(capsys, *argv)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(f"harness: error: {start}{', '.join(names)}"), err
