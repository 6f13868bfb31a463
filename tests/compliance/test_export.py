"""`harness rules export-mlperf`: our rule sets as mlperf_logging configs give our verdicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compliance.engine import check_log, ruleset_names
from compliance.export import export_mlperf
from harness.errors import HarnessError
from tests.compliance.support.mutations import MUTATIONS
from tests.compliance.test_agreement import official_verdicts, round_ruleset

REFERENCE_RUNS = Path(__file__).resolve().parents[2] / "harness" / "rules" / "reference_runs" / "dlrm_synthetic"
# The official checker crashes, rather than failing, on these whatever the config says.
CRASH_IS_FAIL = {"division_unknown", "record_without_metadata"}


def _mutated(log: Path, out: Path, tag: str) -> list[tuple[Path, str]]:
    items = [(log, "original")]
    text = log.read_bytes().decode("latin-1")
    for mutate in MUTATIONS:
        mutated = mutate(text.splitlines(keepends=True))
        if mutated is not None:
            path = out / f"{tag}_{mutate.__name__}" / log.name
            path.parent.mkdir(parents=True)
            path.write_bytes(mutated.encode("latin-1"))
            items.append((path, mutate.__name__))
    return items


def test_exported_configs_give_the_engine_verdict_under_mlperf_logging(shared_logs, tmp_path):
    jobs, expected = [], []
    exported = {}
    for name in ruleset_names():
        exported[name] = tmp_path / "export" / name
        export_mlperf(name, exported[name])
    corpus: list[tuple[Path, str, str]] = []
    for n, run_set in enumerate(sorted(Path(shared_logs).glob("*/*/results/*/*"))):
        log = sorted(run_set.glob("result_*"))[0]
        corpus += [(p, f"training_{round_ruleset(log)}", m) for p, m in _mutated(log, tmp_path / "m", f"r{n}")]
    log = sorted(REFERENCE_RUNS.glob("result_*.txt"))[0]
    corpus += [(p, "harness_1.0.0", m) for p, m in _mutated(log, tmp_path / "m", "harness")]
    for path, ruleset, mutation in corpus:
        jobs.append({"file": str(path), "ruleset": "6.0.0", "config": str(exported[ruleset] / "common.yaml")})
        expected.append("pass" if check_log(path, ruleset).passed else "fail")
    got = official_verdicts(jobs)
    mismatches = []
    for (path, ruleset, mutation), want, theirs in zip(corpus, expected, got):
        verdict = theirs["verdict"]
        if verdict == "crash" and mutation in CRASH_IS_FAIL:
            verdict = "fail"
        if verdict != want:
            mismatches.append((ruleset, mutation, want, theirs))
    print(f"\nexported rule sets under mlperf_logging: {len(corpus)} logs, {len(corpus) - len(mismatches)} same verdicts")
    assert not mismatches, mismatches[:5]
    assert expected.count("pass") >= 9 and expected.count("fail") >= 100


def test_export_cli_writes_configs_the_official_cli_accepts(tmp_path):
    out = tmp_path / "rules"
    proc = subprocess.run([sys.executable, "-m", "harness", "rules", "export-mlperf", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} >= {"common.yaml", "closed_common.yaml", "closed_dlrm_synthetic.yaml"}
    log = sorted(REFERENCE_RUNS.glob("result_*.txt"))[0]
    bad = tmp_path / "result_bad.txt"
    bad.write_text(log.read_text().replace('"key": "opt_adagrad_epsilon", "value": 1e-08',
                                           '"key": "opt_adagrad_epsilon", "value": 1e-07'))
    assert bad.read_text() != log.read_text()
    for path, want in ((log, 0), (bad, 1)):
        official = subprocess.run(
            [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", "6.0.0",
             "--config", str((out / "common.yaml").resolve()), "--log_output", str(tmp_path / "cc.log"), str(path)],
            capture_output=True, text=True, cwd=tmp_path, timeout=120,
        )
        assert official.returncode == want, official.stderr[-1500:]


def test_export_refuses_an_unknown_rule_set(tmp_path):
    with pytest.raises(HarnessError, match="no rule set"):
        export_mlperf("training_9.9.9", tmp_path / "x")


def test_exported_6_1_0_gives_the_engine_verdict_on_generated_dlrmv4_logs(tmp_path):
    """The derived quantities, FIRST_CHECK and the grid/band predicates survive the export."""
    from tests.compliance.support.dlrmv4_logs import MUTATIONS as DLRMV4_MUTATIONS
    from tests.compliance.support.dlrmv4_logs import corpus_logs

    out = tmp_path / "export"
    export_mlperf("training_6.1.0", out)
    corpus: list[tuple[Path, str]] = []
    for name, text in corpus_logs():
        for mutate in [None, *DLRMV4_MUTATIONS]:
            mutated = text if mutate is None else mutate(text.splitlines(keepends=True))
            if mutated is None:
                continue
            path = tmp_path / "logs" / f"{name}_{mutate.__name__ if mutate else 'original'}" / "result_0.txt"
            path.parent.mkdir(parents=True)
            path.write_text(mutated)
            corpus.append((path, mutate.__name__ if mutate else "original"))
    expected = ["pass" if check_log(p, "training_6.1.0").passed else "fail" for p, _ in corpus]
    got = official_verdicts([{"file": str(p), "ruleset": "6.1.0", "config": str(out / "common.yaml")}
                             for p, _ in corpus])
    mismatches = [(m, want, theirs) for (_, m), want, theirs in zip(corpus, expected, got)
                  if theirs["verdict"] != want]
    print(f"\nexported training_6.1.0 under mlperf_logging: {len(corpus)} dlrmv4 logs, "
          f"{len(corpus) - len(mismatches)} same verdicts")
    assert not mismatches, mismatches[:5]
    assert expected.count("pass") >= 16 and expected.count("fail") >= 500


def test_exported_derivations_refuse_what_the_engine_refuses(tmp_path, monkeypatch):
    """Python would double a string; the engine's arithmetic takes numbers only, and so does the export."""
    import json

    from compliance import engine, export

    root = tmp_path / "rulesets"
    (root / "toy_1.0.0").mkdir(parents=True)
    (root / "toy_1.0.0" / "common.yaml").write_text(
        "description: toy\n"
        "derive:\n  doubled: {from: k, expr: {mul: [2, value]}}\n"
        "keys:\n  k: {occurs: exactly_one}\n"
        "  k2: {occurs: exactly_one, checks: [{value: {equals: {derived: doubled}}}]}\n")
    monkeypatch.setattr(engine, "RULESETS", root)
    monkeypatch.setattr(export, "RULESETS", root)
    engine.load_rule_file.cache_clear()
    try:
        export_mlperf("toy_1.0.0", tmp_path / "out")
        cases = [((2, 4), "pass"), (("ab", "abab"), "fail"), ((True, 2), "pass"), ((2, 5), "fail"),
                 (([1], [1, 1]), "fail")]
        paths = []
        for n, ((k, k2), _) in enumerate(cases):
            path = tmp_path / f"case{n}" / "result_0.txt"
            path.parent.mkdir()
            path.write_text("".join(":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME",
                                                              "key": key, "value": v, "metadata": {}}) + "\n"
                                    for t, (key, v) in enumerate((("k", k), ("k2", k2)))))
            paths.append(path)
        ours = ["pass" if check_log(p, "toy_1.0.0").passed else "fail" for p in paths]
    finally:
        engine.load_rule_file.cache_clear()
    theirs = [r["verdict"] for r in official_verdicts(
        [{"file": str(p), "ruleset": "6.1.0", "config": str(tmp_path / "out" / "common.yaml")} for p in paths])]
    assert ours == theirs == [want for _, want in cases]


def test_export_cli_writes_6_1_0_configs_the_official_cli_accepts_on_dlrmv4(tmp_path):
    from tests.compliance.support.dlrmv4_logs import dlrmv4_log

    out = tmp_path / "rules"
    proc = subprocess.run([sys.executable, "-m", "harness", "rules", "export-mlperf", "--ruleset", "6.1.0", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {"common.yaml", "closed_common.yaml", "open_common.yaml",
                                               "closed_dlrmv4.yaml", "open_dlrmv4.yaml"}
    good, bad = tmp_path / "result_0.txt", tmp_path / "result_1.txt"
    good.write_text(dlrmv4_log(gbs=32768))
    bad.write_text(dlrmv4_log(gbs=32768, lr=1.5e-6 * 32768 / 8192 * (1 + 3e-9)))  # just over the band
    for path, want in ((good, 0), (bad, 1)):
        official = subprocess.run(
            [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", "6.1.0",
             "--config", str((out / "common.yaml").resolve()), "--log_output", str(tmp_path / "cc.log"), str(path)],
            capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        )
        assert official.returncode == want, official.stderr[-1500:]
        assert check_log(path, "training_6.1.0").passed == (want == 0)
