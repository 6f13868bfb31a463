"""The leaderboard model over real MLPerf trees and the harness's own runs; md/csv; the CLI."""

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compliance.schemas import validate
from harness.leaderboard.collect import build_leaderboard
from harness.leaderboard.tables import render_csv, render_markdown
from tests.rules.test_results import _expected_scores

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_benchmark.yaml"


def _entries(board):
    return [(g["benchmark"], e) for g in board["benchmarks"] for e in g["entries"]]


def test_real_mlperf_systems_are_ranked_with_their_expected_scores(shared_logs):
    board = build_leaderboard([shared_logs])
    validate(board, "leaderboard", what="board")
    by_source = {Path(e["source"]).resolve(): e for _, e in _entries(board)}
    expected = _expected_scores()
    assert len(by_source) == len(expected) == 8
    for run_set, runs, score, decimals in expected:
        e = by_source[run_set.resolve()]
        tolerance = 1e-9 if decimals >= 9 else 0.5 * 10**-decimals
        assert e["score_minutes"] == pytest.approx(score, abs=tolerance)
        assert e["ranked"] and e["compliance_verdict"] == "pass" and e["runs"] == runs
        assert all(c["points"] for c in e["curves"])
    dcn = next(g for g in board["benchmarks"] if g["benchmark"] == "dlrm_dcnv2")
    assert [e["rank"] for e in dcn["entries"]] == [1, 2, 3, 4, 5]
    assert dcn["target_auc"] == 0.80275
    assert {e["rcp_verdict"] for e in dcn["entries"]} == {"pass"}  # as mlperf_logging's rcp_checker says
    dlrm = next(g for g in board["benchmarks"] if g["benchmark"] == "dlrm")
    assert {e["rcp_verdict"] for e in dlrm["entries"]} == {"not checked"}
    # CPU systems read as CPUs: cores (per processor in the description) times processors, and the model
    hosts = {e["system"]: (e["accelerator_count"], e["host"]) for _, e in _entries(board)}
    assert hosts["1-node-8s-8380H-pytorch"] == (0, "224 cores, 8 x Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz")
    assert hosts["4-nodes-SPR-pytorch"] == (0, "4 nodes x 112 cores, 2 x Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz")


def test_baseline_gives_speedups(shared_logs):
    board = build_leaderboard([shared_logs], baseline="XE9680x8H200-SXM-141GB")
    dcn = next(g for g in board["benchmarks"] if g["benchmark"] == "dlrm_dcnv2")
    base = next(e for e in dcn["entries"] if e["system"] == "XE9680x8H200-SXM-141GB")
    assert base["speedup_vs_baseline"] == pytest.approx(1.0)
    for e in dcn["entries"]:
        assert e["speedup_vs_baseline"] == pytest.approx(base["score_minutes"] / e["score_minutes"])


def _package_copy(shared_logs, tmp_path, rnd="v4.1", submitter="Dell"):
    dst = tmp_path / rnd / submitter
    shutil.copytree(shared_logs / rnd / submitter, dst)
    return dst


def test_too_few_runs_emulated_and_broken_sets_are_kept_apart_with_reasons(shared_logs, tmp_path):
    pkg = _package_copy(shared_logs, tmp_path)
    run_set = next((pkg / "results").glob("*/dlrm_dcnv2"))
    for log in sorted(run_set.glob("result_*.txt"))[1:]:
        log.unlink()  # one run of the ten
    board = build_leaderboard([tmp_path])
    (_, e), = _entries(board)
    assert not e["ranked"] and e["rank"] is None and "1 run; the benchmark requires 10" in e["reasons"], e["reasons"]

    pkg2 = _package_copy(shared_logs, tmp_path / "b", "v5.0", "GigaComputing")
    system_json = next((pkg2 / "systems").glob("*.json"))
    desc = json.loads(system_json.read_text())
    desc["hw_notes"] = "EMULATED: profile zionex-8gpu run on a CPU with 8 gloo ranks"
    system_json.write_text(json.dumps(desc))
    log = min(next((pkg2 / "results").glob("*/dlrm_dcnv2")).glob("result_*.txt"))
    log.write_text(log.read_text() + ':::MLLOG {"key": broken\n')
    board = build_leaderboard([tmp_path / "b"])
    (_, e), = _entries(board)
    assert not e["ranked"] and e["emulated"]
    assert any(r.startswith("emulated") for r in e["reasons"])
    assert any("unreadable log" in r and "malformed MLLOG record" in r for r in e["reasons"])


def test_one_non_compliant_log_is_accepted_under_olympic_scoring_two_are_not(shared_logs, tmp_path):
    """As MLPerf's package checker: one log of a set that fails the compliance checker leaves the set
    ranked, scored as the results summarizer scores it (that log dropped); two do not."""
    from compliance.summarize import summarize_run_set

    for count in (1, 2):
        pkg = _package_copy(shared_logs, tmp_path / str(count))
        run_set = next((pkg / "results").glob("*/dlrm_dcnv2"))
        for log in sorted(run_set.glob("result_*.txt"))[:count]:
            log.write_text(log.read_text().replace('"key": "opt_weight_decay", "value": 0',
                                                   '"key": "opt_weight_decay", "value": 0.1'))
        (_, e), = _entries(build_leaderboard([tmp_path / str(count)]))
        if count == 1:
            assert e["ranked"] and e["compliance_verdict"] == "pass", e["reasons"]
            summarized = summarize_run_set(run_set, "dlrm_dcnv2", "4.1.0", closed=True)
            assert summarized.dropped == 1 and e["score_minutes"] == pytest.approx(summarized.score, rel=1e-12)
        else:
            assert not e["ranked"] and e["compliance_verdict"] == "fail"
            assert any("MLPerf compliance checker (4.1.0) fails 2 logs:" in r for r in e["reasons"]), e["reasons"]


def test_markdown_and_csv_escape_user_values(shared_logs, tmp_path):
    pkg = _package_copy(shared_logs, tmp_path)
    system_json = next((pkg / "systems").glob("*.json"))
    desc = json.loads(system_json.read_text())
    desc["submitter"] = "<script>alert(1)</script>"
    desc["system_name"] = "=HYPERLINK(\"x\")|pipe"
    system_json.write_text(json.dumps(desc))
    board = build_leaderboard([tmp_path])
    md = render_markdown(board)
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md and "\\|pipe" in md
    rows = list(csv.reader(io.StringIO(render_csv(board))))
    assert rows[0][:3] == ["benchmark", "ranked", "Rank"]
    system_col = rows[0].index("System")
    assert rows[1][system_col].startswith("'=HYPERLINK")


def test_csv_and_json_hold_numbers_as_numbers_with_units_in_the_column_names(tmp_path):
    from harness.leaderboard import write_leaderboard
    from tests.leaderboard.support.board_fixture import sample_board

    board = sample_board()
    write_leaderboard(board, tmp_path)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "leaderboard.csv").read_text())))
    [dgx] = [r for r in rows if r["System"] == "dgx-h100-8gpu" and r["benchmark"] == "dlrm_dcnv2"]
    entry = board["benchmarks"][0]["entries"][0]
    raw = {"Throughput (samples/s)": 3_350_000.0, "CV (fraction of the mean)": entry["coefficient_of_variation"],
           "Score (min)": entry["score_minutes"], "95% interval low (min)": entry["score_interval_95"][0],
           "Speedup vs baseline (ratio)": entry["speedup_vs_baseline"], "Accelerators": 8, "Runs": 10,
           "Accelerator-minutes": entry["accelerator_minutes"], "Projected (min)": 4.46,
           "Projected / measured (ratio)": 1.17}
    for title, value in raw.items():
        assert float(dgx[title]) == value, (title, dgx[title])  # "3,350,000", "2.7%", "3.20x" do not parse
    numeric = [t for t in rows[0] if "(min)" in t or "(ratio)" in t or t in {"Rank", "Runs", "Accelerators"}]
    for row in rows:
        for title in numeric:
            assert row[title] == "" or float(row[title]) == float(row[title]), (title, row[title])
    written = json.loads((tmp_path / "leaderboard.json").read_text())
    for e in (e for b in written["benchmarks"] for e in b["entries"]):
        for key in ("score_minutes", "coefficient_of_variation", "throughput_samples_per_s", "accelerator_count"):
            assert e[key] is None or isinstance(e[key], (int, float)), (key, e[key])


@pytest.mark.slow
def test_cli_builds_the_site_from_our_runs_beside_the_real_ones(shared_logs, tmp_path):
    env_run = [sys.executable, "-m", "harness"]
    run = subprocess.run([*env_run, "run", "--benchmark", str(FIXTURE), "--threads", "1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith("leaderboard: harness leaderboard results -o site")
    roots = [str(p) for p in sorted(shared_logs.glob("v*/*"))]
    proc = subprocess.run([*env_run, "leaderboard", "results", *roots, "-o", "site"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    site = tmp_path / "site"
    assert {p.name for p in site.iterdir()} >= {"index.html", "leaderboard.md", "leaderboard.csv", "leaderboard.json"}
    board = json.loads((site / "leaderboard.json").read_text())
    validate(board, "leaderboard", what="written board")
    ours = [e for g, e in _entries(board) if g == "tiny_synthetic"]
    assert len(ours) == 1 and ours[0]["ranked"] and ours[0]["compliance_verdict"] == "unchecked"
    assert ours[0]["profile"] == "local"
    real = {Path(e["source"]).resolve(): e["score_minutes"] for g, e in _entries(board) if g != "tiny_synthetic"}
    for run_set, _, score, decimals in _expected_scores():
        assert real[run_set.resolve()] == pytest.approx(score, abs=1e-9 if decimals >= 9 else 0.5 * 10**-decimals)
    html = (site / "index.html").read_text()
    assert "tiny_synthetic" in html and "http://" not in html.replace("http://www.w3.org", "")


def test_a_missing_root_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "leaderboard", "nope", "-o", "site"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "nope is not a directory" in proc.stderr
    assert not (tmp_path / "site").exists()


# ---- labels and the baseline -------------------------------------------------------------

def test_colliding_system_names_get_unique_labels_with_round_and_size(shared_logs, tmp_path):
    from tests.leaderboard.support.colliding_tree import COLLIDING_SYSTEM, colliding_tree

    board = build_leaderboard([colliding_tree(shared_logs, tmp_path / "root")])
    entries = [e for _, e in _entries(board)]
    labels = [e["label"] for e in entries]
    assert len(set(labels)) == len(labels) == 10
    same = sorted(e["label"] for e in entries if e["system"] == COLLIDING_SYSTEM)
    assert same == [f"{COLLIDING_SYSTEM} (v4.0)", f"{COLLIDING_SYSTEM} (v4.1)", f"{COLLIDING_SYSTEM} (v5.0)"]
    # a name that collides with nothing stays bare
    assert {e["label"] for e in entries if e["system"] == "G893-SD1"} == {"G893-SD1"}
    validate(board, "leaderboard", what="board")


def test_labels_add_the_size_then_the_submitter_while_names_still_collide_and_nothing_they_share():
    from harness.leaderboard.labels import assign_labels

    def entry(pkg, submitter, count, nodes=1):
        return {"system": "Theia", "round": "v6.0", "submitter": submitter, "accelerator_count": count,
                "nodes": nodes, "source": f"{pkg}/results/theia/dlrmv4"}
    entries = [entry("a/NVIDIA", "NVIDIA", 8), entry("b/NVIDIA", "NVIDIA", 64, nodes=8),
               entry("c/Partner", "Partner", 8)]
    assign_labels(entries)
    assert [e["label"] for e in entries] == [  # all three are v6.0: the round tells none apart
        "Theia (8 accelerators, NVIDIA)", "Theia (8x8 accelerators)", "Theia (8 accelerators, Partner)"]


def test_our_runs_of_one_cpu_system_are_told_apart_by_what_differs(tmp_path):
    """A bf16 and an fp32 set of one machine, in two results folders: the precision tells them apart
    (not the shared "no accelerators", submitter and folder); alone in its benchmark, the name."""
    from tests.leaderboard.support.cpu_tree import SYSTEM, cpu_tree

    root = cpu_tree(tmp_path)
    board = build_leaderboard([root / "results-bf16", root / "results-fp32"])
    labels = {(g, e["label"]) for g, e in _entries(board)}
    assert labels == {("tiny_synthetic", f"{SYSTEM} (bf16)"), ("tiny_synthetic", f"{SYSTEM} (fp32)"),
                      ("solo_synthetic", SYSTEM)}
    validate(board, "leaderboard", what="board")


def test_labels_name_the_profile_results_folder_and_date_only_where_they_differ():
    from harness.leaderboard.labels import assign_labels

    def entry(pkg, profile="local", run_set="b"):
        return {"system": "local-cpu-2c", "round": None, "submitter": "reference", "accelerator_count": 0, "nodes": 1,
                "host": "2 cores, Xeon", "profile": profile, "source": f"/w/{pkg}/results/local-cpu-2c/{run_set}"}
    entries = [entry("runs/a/reference"), entry("runs/b/reference"), entry("old/reference", profile="zionex-8gpu")]
    assign_labels(entries, lambda e: {"precision": "bf16", "date": "2025-01-15"})
    assert [e["label"] for e in entries] == [
        "local-cpu-2c (profile local, a)", "local-cpu-2c (profile local, b)", "local-cpu-2c (profile zionex-8gpu)"]
    # one package, two folders of one benchmark: the date, and the time where the date is the same
    started = {"b1": ("2025-01-15", "2025-01-15 09:00 UTC"), "b2": ("2025-01-16", "2025-01-16 09:00 UTC"),
               "b3": ("2025-01-16", "2025-01-16 17:30 UTC")}
    entries = [entry("runs/a/reference", run_set=name) for name in started]
    assign_labels(entries, lambda e: dict(zip(("date", "started"), started[e["source"][-2:]])))
    assert [e["label"] for e in entries] == ["local-cpu-2c (2025-01-15 09:00 UTC)",
                                             "local-cpu-2c (2025-01-16 09:00 UTC)",
                                             "local-cpu-2c (2025-01-16 17:30 UTC)"]
    assign_labels(entries[:2], lambda e: dict(zip(("date", "started"), started[e["source"][-2:]])))
    assert [e["label"] for e in entries[:2]] == ["local-cpu-2c (2025-01-15)", "local-cpu-2c (2025-01-16)"]


def test_an_unknown_baseline_is_one_line_with_close_names_and_exit_2(shared_logs, tmp_path):
    from harness.errors import HarnessError

    with pytest.raises(HarnessError) as err:
        build_leaderboard([shared_logs], baseline="XE9680x8H200")
    assert err.value.exit_code == 2
    assert "names no system" in err.value.message and "'XE9680x8H200-SXM-141GB'" in err.value.message
    proc = subprocess.run([sys.executable, "-m", "harness", "leaderboard", str(shared_logs), "-o",
                           str(tmp_path / "site"), "--baseline", "NoSuchSystem"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "names no system on the leaderboard" in proc.stderr
    assert not (tmp_path / "site").exists()  # nothing written


def test_an_ambiguous_baseline_lists_the_matches_and_how_to_pick_one(shared_logs, tmp_path):
    from harness.errors import HarnessError
    from tests.leaderboard.support.colliding_tree import COLLIDING_SYSTEM, colliding_tree

    root = colliding_tree(shared_logs, tmp_path / "root")
    with pytest.raises(HarnessError) as err:
        build_leaderboard([root], baseline=COLLIDING_SYSTEM)
    assert err.value.exit_code == 2
    message = err.value.message
    assert "names 3 systems" in message and "pick one as round/submitter/system" in message
    for name in ("v4.0/Dell/", "v4.1/Dell/", "v5.0/Dell/"):
        assert name + COLLIDING_SYSTEM in message
    board = build_leaderboard([root], baseline=f"v5.0/Dell/{COLLIDING_SYSTEM}")
    [base] = [e for _, e in _entries(board) if e["baseline"]]
    assert base["label"] == f"{COLLIDING_SYSTEM} (v5.0)" and base["speedup_vs_baseline"] == pytest.approx(1.0)


def test_the_terminal_summary_lists_every_reason_an_entry_is_not_ranked(shared_logs, tmp_path):
    package = tmp_path / "root" / "v4.1" / "Dell"
    shutil.copytree(shared_logs / "v4.1" / "Dell", package)
    [run_set] = package.glob("results/*/dlrm_dcnv2")
    for log in sorted(run_set.glob("result_*.txt"))[3:]:
        log.unlink()  # 3 of the 10 runs left
    for desc in (package / "systems").glob("*.json"):
        desc.unlink()  # and no system description
    proc = subprocess.run([sys.executable, "-m", "harness", "leaderboard", str(tmp_path / "root"), "-o",
                           str(tmp_path / "site")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    board = json.loads((tmp_path / "site" / "leaderboard.json").read_text())
    [entry] = [e for _, e in _entries(board)]
    assert len(entry["reasons"]) >= 2 and not entry["ranked"]
    for reason in entry["reasons"]:
        assert f"- {reason}" in proc.stdout
    assert "(3/3 of 10 required runs)" in proc.stdout
