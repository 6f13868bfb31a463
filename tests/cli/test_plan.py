"""``harness plan`` as a new user meets it: the default benchmark, and one-line errors that list the
choices and name the closest one."""

from __future__ import annotations

import json

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


def test_dlrm_v3_is_planned_as_served_with_its_item_table_below_hbm(capsys):
    """MLPerf Inference's dlrm-v3 on a DGX H100: the 1.024 TB item table fits no 8 x 80 GB of HBM, so the
    planner puts it below (a cache of it in HBM); weights alone, fp16; the Server QPS bound is printed."""
    code, out, err = _plan(capsys, "--profile", "dgx-h100-8gpu", "--benchmark", "dlrm-v3", "--json")
    assert (code, err) == (0, "")
    plan = json.loads(out)
    tables = {t["name"]: t for t in plan["tables"]}
    assert list(tables) == ["item", "artist", "album", "uid"]
    item = tables["item"]
    assert {s["tier"] for s in item["shards"]} <= {"ddr", "ssd"}
    assert sum(s["storage_bytes"] for s in item["shards"]) == 10**9 * 512 * 2  # fp16 weights, no optimizer state
    assert all(t["optimizer_state_factor"] == 0 for t in plan["tables"])
    assert plan["config"]["inference"] is True and plan["batch_size"] == 8 * 10
    code, out, err = _plan(capsys, "--profile", "dgx-h100-8gpu", "--benchmark", "dlrm-v3")
    assert (code, err) == (0, "")
    assert "  item: 1,000,000,000 rows x 512 fp16 (1.024 TB)" in out and "caches of 5.0% of its rows in HBM" in out
    (bound,) = [line for line in out.splitlines() if line.startswith("inference bound")]
    assert bound.endswith("requests/s over 8 x NVIDIA H100-SXM5-80GB, compute-bound"), bound
