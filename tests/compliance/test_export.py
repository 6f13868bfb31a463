"""`harness rules export-mlperf`: our rule sets as mlperf_logging configs give our verdicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compliance.engine import check_log, ruleset_names
from compliance.export import export_mlperf
from harness.errors import HarnessError
from tests.compliance.mutations import MUTATIONS
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
