"""Reference Convergence Points: ours against mlperf_logging's rcp_checker, on real run sets.

The official checker runs as ``python -m mlperf_logging.rcp_checker DIR --rcp_version V
--log_output LOG`` on a copy of each run set (it may write and delete ``scaling.json``). Its
verdict is the exit code; its normalisation factor is the ``= F`` of its "Score should be
normalized by factor of A / B = F" line, 1.0 when it logs none.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.stats
from click.testing import CliRunner

from harness.cli.rcp import rcp as rcp_cli
from harness.errors import ErrorCategory, HarnessError
from harness.rules import rcp
from harness.rules.results import RunLog
from harness.rules.specs import load_benchmark

RCP_VERSION = "6.0.0"  # the issue's; every round's set gets the same verdict with its own version too
REFERENCE_RUNS = Path(rcp.RCP_DIR.joinpath("..", "reference_runs", "dlrm_synthetic").__fspath__())
SETS = {
    "v3.0": "v3.0/GIGABYTE/results/G593-SD0_hugectr/dlrm_dcnv2",
    "v3.1": "v3.1/Intel/results/4-nodes-SPR-pytorch/dlrm_dcnv2",
    "v4.0": "v4.0/smc/results/1xSMC-H100-SXM-80GB/dlrm_dcnv2",
    "v4.1": "v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2",
    "v5.0": "v5.0/GigaComputing/results/G893-SD1_hugectr/dlrm_dcnv2",
}


# --- perturbations of a real set, to reach the checker's other branches --------------------


def _rewrite(run_dir: Path, change, files: int | None = None) -> None:
    """Apply ``change(record)`` to every MLLOG record of the first ``files`` logs (all by default)."""
    for path in sorted(run_dir.glob("result_*.txt"))[:files]:
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            at = line.find(":::MLLOG ")
            if at >= 0:
                record = json.loads(line[at + 9 :])
                change(record)
                line = line[: at + 9] + json.dumps(record) + "\n"
            lines.append(line)
        path.write_text("".join(lines), encoding="utf-8")


def _batch_size(value: int):
    def change(record: dict) -> None:
        if record["key"] == "global_batch_size":
            record["value"] = value
    return change


def _fast(record: dict) -> None:
    if record["key"] in ("eval_accuracy", "run_stop"):
        record["metadata"]["epoch_num"] = 0.5


def _aborted(record: dict) -> None:
    if record["key"] == "run_stop":
        record["metadata"]["status"] = "aborted"


PERTURBED = {  # name: (real set, change, how many logs)
    "v4.1-too-fast": ("v4.1", _fast, None),
    "v4.1-bs-40000-interpolated": ("v4.1", _batch_size(40000), None),
    "v4.1-bs-16384-below-range": ("v4.1", _batch_size(16384), None),
    "v4.1-bs-300000-above-range": ("v4.1", _batch_size(300000), None),
    "v5.0-one-aborted": ("v5.0", _aborted, 1),
    "v5.0-two-aborted": ("v5.0", _aborted, 2),
}


@pytest.fixture(scope="module")
def run_sets(shared_logs, tmp_path_factory) -> dict[str, Path]:
    """Copies of the real dlrm_dcnv2 run sets and of their perturbations."""
    root = tmp_path_factory.mktemp("sets")
    out = {}
    for name, rel in SETS.items():
        out[name] = Path(shutil.copytree(shared_logs / rel, root / name / "dlrm_dcnv2"))
    for name, (base, change, files) in PERTURBED.items():
        out[name] = Path(shutil.copytree(shared_logs / SETS[base], root / name / "dlrm_dcnv2"))
        _rewrite(out[name], change, files)
    return out


@pytest.fixture(scope="module")
def official(run_sets, tmp_path_factory) -> dict[str, tuple[bool, str, float | None, float]]:
    """The official checker: (passed, message, mean, factor) per set.

    The real sets go through its command line, run concurrently; the perturbed ones through
    its ``check_directory`` in-process (the same code, without an interpreter start each).
    """
    from mlperf_logging.rcp_checker.rcp_checker import check_directory

    logs = tmp_path_factory.mktemp("official")
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "mlperf_logging.rcp_checker", str(run_sets[name]), "--rcp_version", RCP_VERSION,
             "--log_output", str(logs / f"{name}.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for name in SETS
    }
    out = {}
    for name in PERTURBED:
        passed, message, factor = check_directory(str(run_sets[name]), "training", RCP_VERSION, False, False,
                                                  rcp_pass="pruned_rcps")
        out[name] = (passed, message, None, float(factor))
    for name, proc in procs.items():
        out[name] = _parse_official(proc.wait(timeout=60), (logs / f"{name}.log").read_text())
    return out


def _parse_official(rc: int, log: str) -> tuple[bool, str, float | None, float]:
    verdict = re.search(r"^(?:INFO|ERROR) - (.*), RCP test (PASSED|FAILED)", log, re.MULTILINE)
    assert verdict, log
    mean = re.search(r"Submission mean epochs: ([0-9.]+)", log)
    factor = re.search(r"normalized by factor of .* = ([0-9.e+-]+)", log)
    assert (rc == 0) == (verdict.group(2) == "PASSED")
    return rc == 0, verdict.group(1), float(mean.group(1)) if mean else None, float(factor.group(1)) if factor else 1.0


@pytest.mark.parametrize("name", [*SETS, *PERTURBED])
def test_verdict_and_factor_equal_the_official_checkers(name, run_sets, official):
    passed, message, mean, factor = official[name]
    ours = rcp.check_convergence(run_sets[name], version=RCP_VERSION)
    assert (ours.verdict is rcp.Verdict.PASS) == passed
    assert ours.message == message
    if mean is not None:
        assert f"{ours.submission_mean:.4f}" == f"{mean:.4f}"
    if passed or name in PERTURBED:
        assert ours.normalization_factor == pytest.approx(factor, rel=1e-12)


def test_the_official_branches_are_all_reached(official):
    messages = {name: m for name, (_, m, _, _) in official.items()}
    assert messages["v3.1"] == "RCP Interpolation"
    assert messages["v4.1-too-fast"] == "RCP found" and not official["v4.1-too-fast"][0]
    assert messages["v4.1-bs-300000-above-range"].startswith("Missing RCP")
    assert messages["v5.0-two-aborted"] == "Insufficient convergence"
    assert official["v5.0-one-aborted"][0]
    assert official["v3.0"][3] > 1.0


def test_perturbed_verdicts(run_sets):
    assert rcp.check_convergence(run_sets["v4.1-bs-300000-above-range"]).verdict is rcp.Verdict.MISSING_RCP
    assert rcp.check_convergence(run_sets["v4.1-too-fast"]).verdict is rcp.Verdict.FAIL
    assert rcp.check_convergence(run_sets["v5.0-one-aborted"]).epochs[-1] == math.inf


@pytest.mark.parametrize("version", ["3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0", "6.0.0"])
def test_rcp_statistics_and_pruning_equal_the_official_checkers(version):
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    checker = RCP_Checker("training", version, "dlrm_dcnv2", False)
    ours = rcp.load_rcps(rcp.rcp_file("dlrm_dcnv2", version=version), benchmark="dlrm_dcnv2")
    assert [r.name for r in ours] == list(checker.rcp_data)
    for r in ours:
        theirs = checker.rcp_data[r.name]
        assert (r.mean, r.stdev, r.min_acceptable_mean) == (theirs["RCP Mean"], theirs["RCP Stdev"], theirs["Min Epochs"])
        assert r.max_speedup == theirs["Max Speedup"]
    pruned = rcp.prune(ours, submission_runs=10)
    assert [r.name for r in pruned] == list(checker.pruned_rcp_data)


# --- the generated dlrm_synthetic RCP ------------------------------------------------------


def test_shipped_synthetic_rcp_is_what_the_library_generates():
    shipped = Path(str(rcp.RCP_DIR.joinpath("rcps_dlrm_synthetic.json")))
    generated = rcp.generate_rcp("dlrm_synthetic", REFERENCE_RUNS)
    assert shipped.read_text() == rcp.rcp_file_json([generated])
    assert generated.batch_size == 2048 and len(generated.epochs) == 10
    assert load_benchmark("dlrm_synthetic").target_auc == 0.7475


def test_synthetic_epochs_are_the_first_evaluation_reaching_the_target():
    generated = rcp.generate_rcp("dlrm_synthetic", REFERENCE_RUNS)
    assert generated.epochs == (0.65, 0.699, 0.6, 0.801, 0.85, 0.75, 0.6, 0.6, 0.699, 0.699)
    loaded = rcp.load_rcps(Path(str(rcp.RCP_DIR.joinpath("rcps_dlrm_synthetic.json"))))
    assert loaded == [generated]
    record = json.loads(rcp.rcp_file_json([generated]))["dlrm_synthetic_ref_2048"]
    assert record["RCP Mean"] == generated.mean and record["Min Epochs"] == generated.min_acceptable_mean


def test_the_official_checker_computes_the_same_statistics_from_our_file():
    """Our file is MLPerf's format: the official checker's loader reads it (dlrm's run count)."""
    from mlperf_logging.rcp_checker import rcp_checker as official

    generated = rcp.generate_rcp("dlrm_synthetic", REFERENCE_RUNS)
    raw = json.loads(rcp.rcp_file_json([generated]))
    checker = object.__new__(official.RCP_Checker)
    checker.alpha, checker.tolerance, checker.verbose, checker.benchmark = 0.05, 0.0001, False, "dlrm_synthetic"
    checker.submission_runs = load_benchmark("dlrm_synthetic").required_runs
    checker.rcp_data = checker._process_raw_rcp_data(raw)
    checker.compute_rcp_stats()
    theirs = checker.rcp_data["dlrm_synthetic_ref_2048"]
    assert (theirs["RCP Mean"], theirs["RCP Stdev"], theirs["Min Epochs"]) == \
        (generated.mean, generated.stdev, generated.min_acceptable_mean)


def test_a_reference_run_short_of_the_target_is_an_error():
    with pytest.raises(HarnessError, match="never reach the target"):
        rcp.generate_rcp("dlrm_synthetic", REFERENCE_RUNS, target=0.99)


# --- statistics ----------------------------------------------------------------------------


@pytest.mark.parametrize("mean,stdev,ref_n,runs", [(0.76, 0.05, 48, 10), (1.0, 0.2, 8, 5), (30.0, 3.0, 18, 10)])
def test_min_acceptable_mean_is_where_the_one_sided_t_test_reaches_p_005(mean, stdev, ref_n, runs):
    found = rcp.min_acceptable_mean(mean, stdev, ref_samples=ref_n, submission_runs=runs)
    df = ref_n + runs - 2 - 2
    expected = mean - scipy.stats.t.ppf(0.95, df) * stdev * math.sqrt(1 / ref_n + 1 / (runs - 2))
    assert found == pytest.approx(expected, abs=rcp.TOLERANCE)
    t = (found - mean) / (stdev * math.sqrt(1 / ref_n + 1 / (runs - 2)))
    assert scipy.stats.t.cdf(t, df) == pytest.approx(0.05, abs=1e-3)


def test_min_acceptable_mean_without_spread_is_the_mean():
    assert rcp.min_acceptable_mean(0.7, 0.0, ref_samples=8, submission_runs=10) == 0.7


def test_one_sided_p_value_is_half_the_two_sided_one_below():
    p = rcp.one_sided_p_value(0.7, 0.05, 10, 0.75, 0.05, 8)
    two = scipy.stats.ttest_ind_from_stats(0.7, 0.05, 10, 0.75, 0.05, 8).pvalue
    assert p == pytest.approx(two / 2)
    assert rcp.one_sided_p_value(0.8, 0.05, 10, 0.75, 0.05, 8) == pytest.approx(1 - two / 2)


def _rcp(bs: int, epochs: list[float]) -> rcp.Rcp:
    return rcp.make_rcp(f"b_ref_{bs}", "b", bs, epochs, hyperparams={}, submission_runs=10)


def test_olympic_mean_and_population_stdev():
    r = _rcp(100, [1.0, 2.0, 3.0, 4.0, 10.0])
    assert r.mean == 3.0
    assert r.stdev == pytest.approx(math.sqrt(sum((x - 4.0) ** 2 for x in [1, 2, 3, 4, 10]) / 5))


def test_interpolation_between_two_batch_sizes():
    low, high = _rcp(100, [1.0] * 5 + [1.2] * 5), _rcp(300, [2.0] * 5 + [2.6] * 5)
    mid = rcp.interpolate(200, low, high, submission_runs=10)
    assert mid.interpolated and mid.name == "b_interp_200"
    assert mid.mean == pytest.approx((low.mean + high.mean) / 2)
    assert mid.stdev == pytest.approx((low.stdev + high.stdev) / 2)
    assert mid.min_acceptable_mean == rcp.min_acceptable_mean(mid.mean, mid.stdev, ref_samples=20, submission_runs=10)
    check = rcp.evaluate("b", 200, [mid.mean] * 10, [low, high], submission_runs=10)
    assert check.message == "RCP Interpolation" and check.rcp == mid and check.verdict is rcp.Verdict.PASS


def test_pruning_drops_slow_middles_and_batch_sizes_below_the_fastest():
    small_slow = _rcp(50, [3.0] * 10)  # below the fastest: pruned
    fastest = _rcp(100, [1.0] * 10)
    slow_middle = _rcp(200, [5.0] * 10)  # slower than the 100..300 interpolation (2.0): pruned
    high = _rcp(300, [3.0] * 10)
    assert rcp.prune([small_slow, fastest, slow_middle, high], submission_runs=10) == [fastest, high]
    convex = _rcp(200, [1.5] * 10)
    assert rcp.prune([fastest, convex, high], submission_runs=10) == [fastest, convex, high]


def test_normalization_factor_scales_only_faster_sets():
    r = _rcp(100, [1.0] * 5 + [1.1] * 5)
    fast = rcp.evaluate("b", 100, [1.02] * 10, [r], submission_runs=10)
    assert fast.verdict is rcp.Verdict.PASS and fast.normalization_factor == pytest.approx(r.mean / 1.02)
    slow = rcp.evaluate("b", 100, [1.5] * 10, [r], submission_runs=10)
    assert slow.verdict is rcp.Verdict.PASS and slow.normalization_factor == 1.0
    too_fast = rcp.evaluate("b", 100, [0.5] * 10, [r], submission_runs=10)
    assert too_fast.verdict is rcp.Verdict.FAIL


def _run(status: str | None, evals: list[tuple[float, float]]) -> RunLog:
    return RunLog(Path("result_0.txt"), "b", 0.0, 1.0, status, tuple(evals), None)


def test_a_non_converged_run():
    assert rcp.submission_epochs(_run("aborted", [(0.5, 0.9)]), 0.8) == math.inf
    assert rcp.submission_epochs(_run("success", [(0.5, 0.7), (0.6, 0.81), (0.7, 0.82)]), 0.8) == 0.6
    assert rcp.submission_epochs(_run("success", [(0.5, 0.7), (0.70001, 0.75)]), None) == 0.7
    r = _rcp(100, [1.0] * 5 + [1.1] * 5)
    one = rcp.evaluate("b", 100, [1.05] * 9 + [math.inf], [r], submission_runs=10)
    assert one.verdict is rcp.Verdict.PASS and one.submission_mean == pytest.approx(1.05)
    two = rcp.evaluate("b", 100, [1.05] * 8 + [math.inf] * 2, [r], submission_runs=10)
    assert two.verdict is rcp.Verdict.FAIL and two.message == "Insufficient convergence"


def test_missing_rcp_outside_the_range():
    rcps = [_rcp(100, [1.0] * 5 + [1.1] * 5), _rcp(200, [1.5] * 5 + [1.6] * 5)]
    above = rcp.evaluate("b", 400, [1.0] * 10, rcps, submission_runs=10)
    assert above.verdict is rcp.Verdict.MISSING_RCP and above.rcp is None
    assert above.message == "Missing RCP, please submit RCP with BS = 400"
    below_slow = rcp.evaluate("b", 50, [1.2] * 10, rcps, submission_runs=10)
    assert below_slow.verdict is rcp.Verdict.PASS and below_slow.rcp == rcps[0]
    below_fast = rcp.evaluate("b", 50, [0.5] * 10, rcps, submission_runs=10)
    assert below_fast.verdict is rcp.Verdict.MISSING_RCP
    assert rcp.evaluate("b", 100, [1.0] * 10, [], submission_runs=10).verdict is rcp.Verdict.MISSING_RCP


def test_unknown_benchmark_has_no_rcp_file():
    with pytest.raises(HarnessError) as err:
        rcp.rcp_file("resnet_tiny", version="6.0.0")
    assert err.value.category is ErrorCategory.NOT_FOUND


def test_write_scaling_as_the_checker_does(run_sets):
    check = rcp.check_convergence(run_sets["v3.0"], version=RCP_VERSION)
    written = rcp.write_scaling(run_sets["v3.0"], check)
    assert json.loads(written.read_text()) == {"scaling_factor": check.normalization_factor}
    slow = rcp.check_convergence(run_sets["v4.1"], version=RCP_VERSION)
    assert rcp.write_scaling(run_sets["v4.1"], slow) is None and not (run_sets["v4.1"] / "scaling.json").exists()


# --- CLI -----------------------------------------------------------------------------------


def test_cli_check_exit_codes_and_json(run_sets):
    ok = CliRunner().invoke(rcp_cli, ["check", str(run_sets["v3.0"])])
    assert ok.exit_code == 0 and ok.output.startswith("PASS: RCP found")
    bad = CliRunner().invoke(rcp_cli, ["check", "--json", str(run_sets["v4.1-too-fast"])])
    assert bad.exit_code == 1 and json.loads(bad.output)["verdict"] == "fail"


def test_cli_generate_writes_the_shipped_file(tmp_path):
    out = tmp_path / "rcps.json"
    result = CliRunner().invoke(rcp_cli, ["generate", "--benchmark", "dlrm_synthetic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == Path(str(rcp.RCP_DIR.joinpath("rcps_dlrm_synthetic.json"))).read_text()


def test_cli_errors_are_one_line_and_exit_2(tmp_path):
    from harness.cli import cli, main

    cli.add_command(rcp_cli)
    code = main(["rcp", "check", str(tmp_path)])
    assert code == 2


# --- dlrmv4 (v6.1): convergence counted in samples ----------------------------------------

DLRMV4_VERSION = "6.1.0"


def _with_epoch_num(record: dict) -> None:
    """Also log epoch_num (the checker ignores it for a benchmark counted in samples)."""
    if record["key"] in ("eval_accuracy", "run_stop"):
        record["metadata"]["epoch_num"] = 0.03


def _eval_after_stop(run_dir: Path) -> None:
    """An eval_accuracy after run_stop: not part of the run's convergence."""
    for path in sorted(run_dir.glob("result_*.txt")):
        last = [line for line in path.read_text().splitlines(keepends=True) if '"eval_accuracy"' in line][-1]
        record = json.loads(last[last.find("{"):])
        record["metadata"]["samples_count"] *= 3
        path.write_text(path.read_text() + "0: :::MLLOG " + json.dumps(record) + "\n")


DLRMV4_SETS = {  # name: (global batch size, evals per run, runs converged, extra change)
    "8192-found": (8192, [5, 6, 6, 7, 5, 6, 8, 6, 7, 6], None, None),
    "8192-faster-within-bound": (8192, [5] * 10, None, None),
    "8192-too-fast": (8192, [2] * 10, None, None),
    "12288-interpolated": (12288, [7, 8, 8, 9, 7, 8, 10, 8, 9, 8], None, None),
    "4096-below-range": (4096, [9] * 10, None, None),
    "65536-above-range": (65536, [6] * 10, None, None),
    "16384-one-aborted": (16384, [7] * 10, [False] + [True] * 9, None),
    "16384-two-aborted": (16384, [7] * 10, [False, False] + [True] * 8, None),
    "32768-epoch-num-too": (32768, [9] * 10, None, "epoch_num"),
    "8192-eval-after-stop": (8192, [2] * 10, None, "eval_after_stop"),
}


@pytest.fixture(scope="module")
def dlrmv4_sets(tmp_path_factory) -> dict[str, Path]:
    from tests.compliance.support.dlrmv4_logs import write_run_set

    root = tmp_path_factory.mktemp("dlrmv4")
    out = {}
    for name, (gbs, evals, converged, extra) in DLRMV4_SETS.items():
        run_dir = root / name / "dlrmv4"
        write_run_set(run_dir, gbs=gbs, evals=evals, converged=converged)
        if extra == "epoch_num":
            _rewrite(run_dir, _with_epoch_num)
        elif extra == "eval_after_stop":
            _eval_after_stop(run_dir)
        out[name] = run_dir
    return out


@pytest.fixture(scope="module")
def dlrmv4_official(dlrmv4_sets, tmp_path_factory) -> dict[str, tuple[bool, str, float | None, float]]:
    """``python -m mlperf_logging.rcp_checker DIR --rcp_version 6.1.0`` on each generated set."""
    logs = tmp_path_factory.mktemp("dlrmv4_official")
    out = {}
    names = list(dlrmv4_sets)
    for batch in (names[0::2], names[1::2]):  # two at a time: this machine has 2 cores
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "mlperf_logging.rcp_checker", str(dlrmv4_sets[name]), "--rcp_version",
                 DLRMV4_VERSION, "--log_output", str(logs / f"{name}.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for name in batch
        }
        for name, proc in procs.items():
            out[name] = _parse_official(proc.wait(timeout=120), (logs / f"{name}.log").read_text())
    return out


@pytest.mark.parametrize("name", list(DLRMV4_SETS))
def test_dlrmv4_verdict_and_factor_equal_the_official_checkers(name, dlrmv4_sets, dlrmv4_official):
    passed, message, mean, factor = dlrmv4_official[name]
    ours = rcp.check_convergence(dlrmv4_sets[name], version=DLRMV4_VERSION)
    assert (ours.verdict is rcp.Verdict.PASS) == passed
    assert ours.message == message
    if mean is not None:
        assert f"{ours.submission_mean:.4f}" == f"{mean:.4f}"
    if passed:  # (it logs a factor only for a passing set that it scales)
        assert ours.normalization_factor == pytest.approx(factor, rel=1e-12)


def test_dlrmv4_sets_reach_the_official_branches(dlrmv4_sets, dlrmv4_official):
    got = {name: (passed, message) for name, (passed, message, _, _) in dlrmv4_official.items()}
    assert got["8192-found"] == (True, "RCP found")
    assert got["8192-too-fast"] == (False, "RCP found")
    assert got["12288-interpolated"][1] == "RCP Interpolation"
    assert got["65536-above-range"] == (False, "Missing RCP, please submit RCP with BS = 65536")
    assert got["16384-one-aborted"][0] and got["16384-two-aborted"] == (False, "Insufficient convergence")
    assert dlrmv4_official["8192-faster-within-bound"][3] > 1.0
    # samples, as logged: the first eval is on the reference's grid, in samples
    ours = rcp.check_convergence(dlrmv4_sets["8192-found"], version=DLRMV4_VERSION)
    assert ours.epochs[0] == 66519040 and ours.rcp.name == "dlrmv4_ref_8192"


def test_dlrmv4_statistics_equal_the_official_checkers():
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    checker = RCP_Checker("training", DLRMV4_VERSION, "dlrmv4", False)
    ours = rcp.load_rcps(rcp.rcp_file("dlrmv4", version=DLRMV4_VERSION), benchmark="dlrmv4")
    assert [r.name for r in ours] == list(checker.rcp_data)
    for r in ours:
        theirs = checker.rcp_data[r.name]
        assert (r.mean, r.stdev, r.min_acceptable_mean) == (theirs["RCP Mean"], theirs["RCP Stdev"], theirs["Min Epochs"])
    assert [r.name for r in rcp.prune(ours, submission_runs=10)] == list(checker.pruned_rcp_data)


def test_a_dlrmv4_run_without_samples_count_is_an_error(tmp_path):
    from tests.compliance.support.dlrmv4_logs import write_run_set

    run_dir = tmp_path / "dlrmv4"
    write_run_set(run_dir)

    def drop(record: dict) -> None:
        if record["key"] == "eval_accuracy":
            record["metadata"].pop("samples_count")
    _rewrite(run_dir, drop, 1)
    with pytest.raises(HarnessError, match="no samples_count"):
        rcp.check_convergence(run_dir, version=DLRMV4_VERSION)


def test_shipped_dlrmv4_synthetic_rcp_counts_samples_to_the_first_eval_reaching_the_target():
    """Its reference runs' RCP in samples (the samples_count of each run's first evaluation at or
    above the calibrated target, which every reference run reaches); at a higher target that one
    run never reaches, that run is left out, and said; two are too many."""
    runs = REFERENCE_RUNS.parent / "dlrmv4_synthetic"
    generated = rcp.generate_rcp("dlrmv4_synthetic", runs)
    assert Path(str(rcp.RCP_DIR.joinpath("rcps_dlrmv4_synthetic.json"))).read_text() == rcp.rcp_file_json([generated])
    spec = load_benchmark("dlrmv4_synthetic")
    gbs = spec.reference_hyperparameters["global_batch_size"]
    assert generated.batch_size == gbs and len(generated.epochs) == 20 and "left out" not in generated.to_json()["When"]
    expected = []
    for path in sorted(runs.glob("result_*.txt")):
        evals = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in path.read_text().splitlines()
                 if '"key": "eval_accuracy"' in line]
        first = next((e["metadata"]["samples_count"] for e in evals if e["value"] >= spec.target_auc), None)
        assert first is not None, path.name
        assert first % spec.eval_interval_samples(gbs) == 0 and first >= spec.first_eval_samples(gbs)
        expected.append(float(first))
    assert list(generated.epochs) == expected
    one_short = rcp.generate_rcp("dlrmv4_synthetic", runs, target=0.590)  # result_17's best is 0.589431
    assert len(one_short.epochs) == 19 and "19 reached it, 1 left out" in one_short.to_json()["When"]
    with pytest.raises(HarnessError, match="never reach the target"):  # result_16 (0.590805) as well
        rcp.generate_rcp("dlrmv4_synthetic", runs, target=0.591)
