"""compliance.layout: the 8 real packages pass; each broken layout gives its rule, never an exception."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from compliance.findings import Severity
from compliance.layout import check_layout, iter_run_set_dirs

ROUNDS = ["v0.7", "v1.0", "v2.1", "v3.0", "v3.1", "v4.0", "v4.1", "v5.0"]

SMC_SYSTEM = "1xSMC-H100-SXM-80GB"


def real_package(shared_logs: Path, rnd: str) -> Path:
    found = sorted(p for p in (shared_logs / rnd).iterdir() if p.is_dir())
    assert len(found) == 1, found
    return found[0]


def pairs(findings) -> list[tuple[str, Severity]]:
    return sorted((f.rule, f.severity) for f in findings)


def errors(findings) -> list[str]:
    return sorted(f.rule for f in findings if f.is_error)


@pytest.fixture
def pkg(shared_logs: Path, tmp_path: Path) -> Path:
    """A writable copy of the v4.0 smc package (result_5755-..._01.txt names, scaling.json)."""
    dst = tmp_path / "smc"
    shutil.copytree(real_package(shared_logs, "v4.0"), dst, copy_function=shutil.copyfile)
    for root, dirs, _ in os.walk(dst):
        os.chmod(root, 0o755)
        for d in dirs:
            os.chmod(Path(root) / d, 0o755)
    return dst


@pytest.fixture
def bench(pkg: Path) -> Path:
    return pkg / "results" / SMC_SYSTEM / "dlrm_dcnv2"


# -- the real packages -------------------------------------------------------------------------


@pytest.mark.parametrize("rnd", ROUNDS)
def test_real_packages_have_no_findings(shared_logs, rnd):
    package = real_package(shared_logs, rnd)
    assert check_layout(package) == []
    run_sets = iter_run_set_dirs(package)
    assert len(run_sets) == 1
    system, benchmark, directory = run_sets[0]
    assert (package / "systems" / f"{system}.json").is_file()
    assert benchmark in ("dlrm", "dlrm_dcnv2")
    assert directory == package / "results" / system / benchmark
    assert list(directory.glob("result_*.txt"))


def test_copy_is_clean(pkg):
    assert check_layout(pkg) == []


# -- mutations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("top", ["results", "systems"])
def test_missing_top_dir_is_an_error(pkg, top):
    shutil.rmtree(pkg / top)
    findings = check_layout(pkg)
    assert ("layout.missing_dir", Severity.ERROR) in pairs(findings)
    assert [f.path for f in findings if f.rule == "layout.missing_dir"] == [pkg / top]


@pytest.mark.parametrize("top", ["results", "systems"])
def test_top_dir_as_a_file_is_an_error(pkg, top):
    shutil.rmtree(pkg / top)
    (pkg / top).write_text("not a directory\n")
    assert "layout.wrong_type" in errors(check_layout(pkg))


def test_missing_or_file_package(tmp_path):
    assert pairs(check_layout(tmp_path / "absent")) == [("layout.missing_dir", Severity.ERROR)]
    (tmp_path / "file").write_text("x")
    assert pairs(check_layout(tmp_path / "file")) == [("layout.wrong_type", Severity.ERROR)]
    assert iter_run_set_dirs(tmp_path / "absent") == []


def test_results_dir_without_system_json_is_an_error(pkg, bench):
    other = pkg / "results" / "other-system" / "dlrm_dcnv2"
    other.mkdir(parents=True)
    shutil.copyfile(next(bench.glob("result_*.txt")), other / "result_0.txt")
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.no_system_desc", Severity.ERROR)]
    assert findings[0].path == pkg / "results" / "other-system"


def test_system_json_without_results_is_a_warning(pkg):
    shutil.copyfile(pkg / "systems" / f"{SMC_SYSTEM}.json", pkg / "systems" / "spare.json")
    assert pairs(check_layout(pkg)) == [("layout.no_results", Severity.WARNING)]


@pytest.mark.parametrize("name", ["README.md", "notes", ".DS_Store", "train.py"])
def test_stray_file_is_a_warning(bench, pkg, name):
    (bench / name).write_text("x\n")
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.unexpected_file", Severity.WARNING)]
    assert "should it be named result_*.txt?" in findings[0].message


@pytest.mark.parametrize("name", ["results_0.txt", "result_0.log", "Result_0.txt", "result0.txt", "run_1.txt"])
def test_misnamed_result_file_is_a_warning(bench, pkg, name):
    (bench / name).write_text(":::MLLOG {}\n")
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.result_name", Severity.WARNING)]
    assert name in findings[0].message


@pytest.mark.parametrize("name", ["package_checker_params", "params.json"])
def test_params_files_and_power_dir_are_expected(bench, pkg, name):
    (bench / name).write_text("rcp-bypass" if "params" in name else "{}")
    (bench / "power").mkdir()
    assert check_layout(pkg) == []


def test_stray_files_outside_benchmark_dirs_are_warnings(pkg):
    (pkg / "results" / "README.md").write_text("x")
    (pkg / "results" / SMC_SYSTEM / "notes.txt").write_text("x")
    (pkg / "systems" / "notes.txt").write_text("x")
    (pkg / "results" / SMC_SYSTEM / "package_checker_params").write_text("rcp-bypass")
    assert pairs(check_layout(pkg)) == [("layout.unexpected_file", Severity.WARNING)] * 3


@pytest.mark.parametrize("name", ["result_10.txt", "scaling2.json", "package_checker_params"])
def test_directory_where_a_file_is_expected_is_an_error(bench, pkg, name):
    (bench / name).mkdir()
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.wrong_type", Severity.ERROR)]
    assert findings[0].path == bench / name


def test_system_json_that_is_a_directory_is_an_error(pkg):
    (pkg / "systems" / "ghost.json").mkdir()
    (pkg / "results" / "ghost" / "dlrm_dcnv2").mkdir(parents=True)
    # one error for the directory; no second one for results/ghost/ lacking its description
    assert pairs(check_layout(pkg)) == [("layout.wrong_type", Severity.ERROR)]


def test_fifo_named_like_a_result_is_an_error_and_does_not_block(bench, pkg):
    os.mkfifo(bench / "result_10.txt")
    assert pairs(check_layout(pkg)) == [("layout.wrong_type", Severity.ERROR)]


def test_symlink_loop_in_systems_is_an_error_and_does_not_hang(pkg):
    systems = pkg / "systems"
    (systems / "a.json").symlink_to("b.json")
    (systems / "b.json").symlink_to("a.json")
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.broken_symlink", Severity.ERROR)] * 2
    assert all("loop" in f.message for f in findings)
    assert sorted(f.path.name for f in findings) == ["a.json", "b.json"]


def test_dangling_symlink_is_an_error(bench, pkg):
    (bench / "result_10.txt").symlink_to("nowhere.txt")
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.broken_symlink", Severity.ERROR)]
    assert "nowhere.txt" in findings[0].message


def test_symlink_outside_the_package_is_a_warning(tmp_path, bench, pkg):
    outside = tmp_path / "outside.txt"
    outside.write_text(":::MLLOG {}\n")
    (bench / "result_10.txt").symlink_to(outside)
    assert pairs(check_layout(pkg)) == [("layout.symlink_outside", Severity.WARNING)]


def test_symlink_inside_the_package_is_fine(bench, pkg):
    (bench / "result_10.txt").symlink_to(next(bench.glob("result_*.txt")).name)
    assert check_layout(pkg) == []


def test_symlinked_system_dir_outside_the_package_is_followed_with_a_warning(tmp_path, pkg):
    results = pkg / "results"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(results / SMC_SYSTEM, elsewhere)
    (results / SMC_SYSTEM).symlink_to(elsewhere)
    assert pairs(check_layout(pkg)) == [("layout.symlink_outside", Severity.WARNING)]
    assert [(s, b) for s, b, _ in iter_run_set_dirs(pkg)] == [(SMC_SYSTEM, "dlrm_dcnv2")]


@pytest.mark.parametrize("where", ["results/loop", f"results/{SMC_SYSTEM}/up", "results/self"])
def test_directory_symlink_to_an_ancestor_is_a_cycle_error(pkg, where):
    link = pkg / where
    link.symlink_to({"loop": "..", "up": "..", "self": "."}[link.name])
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.symlink_cycle", Severity.ERROR)]
    assert [(s, b) for s, b, _ in iter_run_set_dirs(pkg)] == [(SMC_SYSTEM, "dlrm_dcnv2")]


def test_results_symlinked_to_the_package_itself(pkg):
    shutil.rmtree(pkg / "results")
    (pkg / "results").symlink_to(".")
    assert "layout.symlink_cycle" in errors(check_layout(pkg))
    assert iter_run_set_dirs(pkg) == []


def test_odd_names_do_not_crash(bench, pkg):
    odd = ["new\nline.txt", "caf\u00e9.md", "tab\there", "\udcff\udcfe.bin", " result_1.txt"]
    for name in odd:
        (bench / name).write_text("x")
    (pkg / "results" / "sys\ntem\udcff" / "dlrm_dcnv2").mkdir(parents=True)
    findings = check_layout(pkg)
    for f in findings:
        f.message.encode("utf-8")  # messages are printable even when names are not
        assert "\n" not in f.message
        json.dumps(f.as_json())
    assert errors(findings) == ["layout.no_system_desc"]
    assert len([f for f in findings if f.severity is Severity.WARNING]) == len(odd)
    assert [s for s, _, _ in iter_run_set_dirs(pkg)] == sorted([SMC_SYSTEM, "sys\ntem\udcff"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root can list any directory")
def test_unlistable_directory_is_an_error(bench, pkg):
    os.chmod(bench, 0)
    try:
        assert "layout.unreadable" in errors(check_layout(pkg))
    finally:
        os.chmod(bench, 0o755)


def test_listing_error_is_an_error_not_an_exception(bench, pkg, monkeypatch):
    real_scandir = os.scandir

    def scandir(path):
        if Path(path) == bench:
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    findings = check_layout(pkg)
    assert pairs(findings) == [("layout.unreadable", Severity.ERROR)]
    assert "Permission denied" in findings[0].message
    assert [b for _, b, _ in iter_run_set_dirs(pkg)] == ["dlrm_dcnv2"]


def test_iter_run_set_dirs_is_sorted_and_skips_files(pkg, bench):
    results = pkg / "results"
    (results / SMC_SYSTEM / "aaa_bench").mkdir()
    (results / SMC_SYSTEM / "zzz.txt").write_text("x")
    (results / "0-first" / "b").mkdir(parents=True)
    (results / "0-first" / "a").mkdir()
    (results / "loose.txt").write_text("x")
    assert [(s, b) for s, b, _ in iter_run_set_dirs(pkg)] == [
        ("0-first", "a"),
        ("0-first", "b"),
        (SMC_SYSTEM, "aaa_bench"),
        (SMC_SYSTEM, "dlrm_dcnv2"),
    ]
    assert all(d == results / s / b for s, b, d in iter_run_set_dirs(pkg))
