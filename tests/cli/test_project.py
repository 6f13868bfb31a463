"""``harness project``: the step phase by phase and the score with its band, from a profile or a system
description; ``--against`` a results tree ending with the summary line; errors in one line."""

from __future__ import annotations

import json

import pytest

from harness.cli import main


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(["project", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_benchmark_on_a_profile(capsys):
    code, out, err = _run(capsys, ["--benchmark", "dlrm_dcnv2", "--profile", "dgx-h100-8gpu"])
    assert code == 0, err
    for phrase in ("dense forward GEMMs", "embedding update", "vector all-to-all", "dense all-reduce",
                   "embeddings only (harness plan", "evaluation step (batch 65,536)", "the RCP of batch 55296",
                   "projected score:", "band", "constants (accelerator"):
        assert phrase in out, phrase
    score = float(out.split("projected score: ")[1].split()[0])
    assert 1 < score < 20  # 8 x H100 train dlrm_dcnv2 in about 4 minutes (MLPerf v3.0-v4.0)


def test_the_same_system_from_its_description(capsys, shared_logs):
    system = shared_logs / "v4.0/smc/systems/1xSMC-H100-SXM-80GB.json"
    code, out, err = _run(capsys, ["--benchmark", "dlrm_dcnv2", "--system", str(system), "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["device"] == "NVIDIA H100-SXM5-80GB" and data["batch_size"] == 55296 and data["precision"] == "bf16"
    assert data["band_minutes"][0] < data["minutes"] < data["band_minutes"][1]
    assert [p["name"] for p in data["step"]["phases"]][0] == "dense forward GEMMs"


def test_against_the_shared_logs_ends_with_the_summary(capsys, shared_logs):
    code, out, err = _run(capsys, ["--against", str(shared_logs)])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["RUN", "SET"] and len(lines) == 10
    assert lines[-1].startswith("projected / measured: median |error| ") and lines[-1].endswith(
        "over 8 run sets (0 not projected)")


@pytest.mark.parametrize("argv, code, words", [
    (["--benchmark", "dlrmv4", "--profile", "dgx-h100-8gpu"], 4, "not implemented"),
    (["--benchmark", "dlrm-v3", "--profile", "dgx-h100-8gpu"], 2,  # an inference benchmark: harness plan bounds it
     "harness project is for MLPerf Training benchmarks; dlrm-v3 is an MLPerf Inference benchmark"),
    (["--benchmark", "nope", "--profile", "dgx-h100-8gpu"], 2, "unknown benchmark"),
    (["--benchmark", "dlrm_dcnv", "--profile", "dgx-h100-8gpu"], 2,
     "unknown benchmark 'dlrm_dcnv' (did you mean 'dlrm_dcnv2'?); known: dlrm, dlrm-v3, dlrm_dcnv2, "),
    (["--profile", "dgx-h100"], 2,
     "unknown profile 'dgx-h100' (did you mean 'dgx-h100-8gpu'?); known profiles: local, "),
    (["--against", "no/such/tree"], 2, "does not exist"),
    (["--against", ".", "--benchmark", "dlrm"], 2, "give it alone"),
    (["--profile", "dgx-h100-8gpu", "--system", "x.json"], 2,
     "give one of --profile (local, bigbasin-8gpu, dgx-a100-8gpu, dgx-h100-8gpu, "),
    (["--system", "no-such-system.json", "--benchmark", "dlrm"], 2, "does not exist"),
])
def test_errors_are_one_line_and_an_exit_code(capsys, argv, code, words):
    got, out, err = _run(capsys, argv)
    assert got == code and words in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_accelerator_not_in_the_table_names_the_known_ones(capsys, tmp_path):
    system = tmp_path / "x.json"
    system.write_text(json.dumps({"system_name": "x", "number_of_nodes": "1", "accelerators_per_node": "8",
                                  "accelerator_model_name": "Acme TensorBrick 7"}))
    code, _, err = _run(capsys, ["--benchmark", "dlrm_dcnv2", "--system", str(system)])
    assert code == 2 and "Acme TensorBrick 7" in err and "NVIDIA B200-SXM-180GB" in err and err.count("\n") == 1


def test_plan_shows_the_whole_step_beside_the_embeddings_only_one(capsys):
    code = main(["plan", "--benchmark", "dlrm_dcnv2", "--profile", "dgx-h100-8gpu"])
    out = capsys.readouterr().out
    assert code == 0
    embeddings = float(out.split("projected step time: ")[1].split(" ms (embeddings only)")[0])
    whole = float(out.split("projected whole step (harness project: ")[1].split("): ")[1].split(" ms")[0])
    assert whole > embeddings  # the dense part, the all-reduce and the operations are in it too
    assert main(["plan", "--model", "dlrm-12t", "--profile", "zionex-16x8gpu", "--cache-fraction", "0"]) == 0
    assert "projected whole step: not projected (a model file names its tables only" in capsys.readouterr().out


def test_the_leaderboard_shows_each_run_sets_projection(capsys, shared_logs, tmp_path):
    import csv
    import shutil

    shutil.copytree(shared_logs / "v4.1", tmp_path / "tree" / "v4.1")
    assert main(["leaderboard", str(tmp_path / "tree"), "-o", str(tmp_path / "site")]) == 0
    capsys.readouterr()
    (entry,) = json.loads((tmp_path / "site" / "leaderboard.json").read_text())["benchmarks"][0]["entries"]
    projection = entry["projection"]
    assert projection["note"] is None
    assert projection["ratio"] == pytest.approx(projection["minutes"] / entry["score_minutes"])
    low, high = projection["band_minutes"]
    assert low < projection["minutes"] < high and 0.8 < projection["ratio"] < 1.25
    (row,) = csv.DictReader((tmp_path / "site" / "leaderboard.csv").read_text().splitlines())
    assert float(row["Projected (min)"]) == pytest.approx(projection["minutes"], abs=1e-4)
    assert 'class="chart chart-projection"' in (tmp_path / "site" / "index.html").read_text()
