"""Our checker against MLPerf's own (mlperf_logging 4.1.68) on generated v6.1 DLRMv4 logs.

There are no public v6.1 results, so ``dlrmv4_logs`` writes complete logs (closed and open,
several global batch sizes) and mutates each: every rule's violation, the learning-rate band's
edges just inside and just outside, evals off the grid, the first eval at the wrong position,
missing keys, a learning rate logged before the batch size its band derives from. The official
checker runs in a subprocess (``official_driver.py``); the per-run verdicts must agree but
for the documented differences (``dlrmv4_logs.DIFFERENCES``), each of which must occur.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from compliance.check import check_path
from compliance.engine import check_log
from tests.compliance.support.dlrmv4_logs import (
    DIFFERENCES,
    MUTATIONS,
    corpus_logs,
    dlrmv4_log,
    write_package,
)
from tests.compliance.test_agreement import official_verdicts

RULESET = "6.1.0"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[tuple[Path, str]]:
    """(file, mutation or "original") for every generated log and every applicable mutation."""
    root = tmp_path_factory.mktemp("dlrmv4")
    items = []
    for name, text in corpus_logs():
        path = root / name / "result_0.txt"
        path.parent.mkdir()
        path.write_text(text)
        items.append((path, "original"))
        for mutate in MUTATIONS:
            mutated = mutate(text.splitlines(keepends=True))
            if mutated is None:
                continue
            assert mutated != text, (name, mutate.__name__)
            path = root / f"{name}__{mutate.__name__}" / "result_0.txt"
            path.parent.mkdir()
            path.write_text(mutated)
            items.append((path, mutate.__name__))
    return items


@pytest.fixture(scope="module")
def official(corpus) -> list[dict]:
    return official_verdicts([{"file": str(p), "ruleset": RULESET} for p, _ in corpus])


def test_verdicts_agree_with_the_official_checker(corpus, official, capsys):
    counts: Counter[str] = Counter()
    disagreements = []
    verdicts: dict[str, Counter[str]] = {}
    for (path, mutation), theirs in zip(corpus, official):
        ours = "pass" if check_log(path, f"training_{RULESET}").passed else "fail"
        counts["mutations" if mutation != "original" else "logs"] += 1
        verdicts.setdefault(mutation, Counter())[theirs["verdict"]] += 1
        if mutation in DIFFERENCES:
            want_theirs, want_ours, _why = DIFFERENCES[mutation]
            if (theirs["verdict"], ours) == (want_theirs, want_ours):
                counts["documented differences"] += 1
                continue
        if theirs["verdict"] == ours:
            counts["agreements"] += 1
        else:
            disagreements.append((str(path), mutation, theirs, ours))
    with capsys.disabled():
        print(f"\ndlrmv4 checker agreement: {counts['logs']} logs, {counts['mutations']} mutations, "
              f"{counts['agreements']} agreements, {counts['documented differences']} documented differences, "
              f"{len(disagreements)} disagreements")
    assert not disagreements, disagreements[:5]
    # the generated logs are valid v6.1 logs: the official checker passes every one
    assert verdicts["original"] == Counter({"pass": counts["logs"]})
    # the corpus tells passing from failing: both verdicts occur, and the band's edges fall either side
    for inside in ("lr_just_inside_low", "lr_just_inside_high"):
        assert verdicts[inside] == Counter({"pass": verdicts[inside].total()}), inside
    for outside in ("lr_just_outside_low", "lr_just_outside_high", "lr_before_global_batch_size",
                    "first_eval_one_interval_late", "eval_off_grid_by_one_step"):
        assert verdicts[outside]["fail"] >= 1, outside
    # every documented difference was met at least once, so none of them is stale
    met = {m for (_, m), t in zip(corpus, official) if m in DIFFERENCES and t["verdict"] == DIFFERENCES[m][0]}
    assert met == set(DIFFERENCES)
    assert set(verdicts) - {"original"} == {m.__name__ for m in MUTATIONS}, "a mutation never applied"


def test_every_failure_of_ours_says_which_rule(corpus):
    for path, mutation in corpus:
        result = check_log(path, f"training_{RULESET}")
        assert all(f.rule and f.message for f in result.findings), (mutation, result.findings)
        if mutation == "original":
            assert result.passed, (path, [f.human() for f in result.errors])
            assert result.levels == ["common", f"{_division(path)}_common", f"{_division(path)}_dlrmv4"]


def _division(path: Path) -> str:
    return path.parent.name.split("_")[0]


def test_a_learning_rate_before_the_batch_size_fails_on_the_order(tmp_path):
    text = dlrmv4_log(gbs=16384)
    lines = text.splitlines(keepends=True)
    lr = next(i for i, line in enumerate(lines) if '"opt_base_learning_rate"' in line)
    gbs = next(i for i, line in enumerate(lines) if '"global_batch_size"' in line)
    lines.insert(gbs, lines.pop(lr))
    path = tmp_path / "result_0.txt"
    path.write_text("".join(lines))
    errors = check_log(path, f"training_{RULESET}").errors
    assert [f.key for f in errors] == ["opt_base_learning_rate"]
    assert "lr_low" in errors[0].message and "undefined" in errors[0].message


def test_a_dlrm_dcnv2_log_under_6_1_gets_one_finding(shared_logs, tmp_path):
    real = min(Path(shared_logs).glob("v5.0/*/results/*/dlrm_dcnv2/result_*.txt"))
    findings = check_log(real, f"training_{RULESET}").findings
    assert len(findings) == 1, [f.message for f in findings]
    assert findings[0].message.startswith("benchmark 'dlrm_dcnv2' is not part of ruleset training_6.1.0 "
                                          "(its benchmarks: ")
    assert "dlrmv4" in findings[0].message
    # a run set of them under a v6.1 folder: still one finding per log, none for the set
    run_dir = tmp_path / "v6.1" / "Org" / "results" / "sys" / "dlrm_dcnv2"
    run_dir.mkdir(parents=True)
    for n in range(2):
        (run_dir / f"result_{n}.txt").write_bytes(real.read_bytes())
    report = check_path(run_dir)
    assert report.ruleset == f"training_{RULESET}"
    assert [f.rule.rsplit(":", 1)[-1] for f in report.all_findings] == ["submission_benchmark.not_in_ruleset"] * 2


def test_harness_check_on_a_v6_1_package_uses_training_6_1_0(tmp_path):
    pkg = write_package(tmp_path)
    report = check_path(pkg)
    assert report.ruleset == "training_6.1.0"
    [run_set] = report.run_sets
    assert run_set.ruleset == "training_6.1.0" and len(run_set.runs) == 10
    assert all(r.check.levels == ["common", "closed_common", "closed_dlrmv4"] for r in run_set.runs)
    assert report.passed, [f.human() for f in report.all_findings if f.is_error]
    assert run_set.summary["rcp"]["verdict"] == "pass" and run_set.summary["target"] == 0.75
    # the same tree under v6.0 is checked as 6.0.0, which has no dlrmv4
    old = tmp_path / "v6.0"
    (tmp_path / "v6.1").rename(old)
    report = check_path(old / pkg.name)
    assert report.ruleset == "training_6.0.0" and not report.passed
    json.dumps(report.as_json())
