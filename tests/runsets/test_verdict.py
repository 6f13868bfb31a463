"""The verdict on a run set just written, and when ``harness run`` fails (exits 1) because of it."""

from __future__ import annotations

from tests.support.runs import _reference_set


def test_harness_run_exits_1_when_the_set_fails_its_check_or_has_runs_enough_and_no_score(tmp_path):
    from harness.rules.scoring import Score
    from harness.rules.seeds import Seed, SeedSource
    from harness.runsets.score import RunOutcome, RunSetOutcome
    from harness.runsets.verdict import ComplianceVerdict, SetVerdict, compliance_verdict, run_set_fails

    short = _reference_set(tmp_path / "short" / "dlrm_synthetic", runs=2)
    v = compliance_verdict(short, short_by_request=True)
    assert (v.verdict, v.passing_logs, v.logs) == (SetVerdict.INCOMPLETE, 2, 2) and "run set" in v.first_error
    assert compliance_verdict(short, short_by_request=False).verdict is SetVerdict.FAIL
    assert compliance_verdict(tmp_path / "nothing here", short_by_request=False).verdict is SetVerdict.NOT_CHECKED

    def outcome(runs: int, scored: bool) -> RunSetOutcome:
        return RunSetOutcome(runs=[RunOutcome(i, Seed(i, SeedSource.USER), tmp_path, 1.0, True, 0.8)
                                   for i in range(runs)],
                             score=Score(1.0, (1.0,), runs, 0) if scored else None)

    for verdict in (SetVerdict.PASS, SetVerdict.INCOMPLETE, SetVerdict.NOT_CHECKED):
        ok = ComplianceVerdict(verdict)
        assert not run_set_fails(outcome(5, True), ok)
        assert not run_set_fails(outcome(2, False), ok)  # too few runs for an olympic mean: no score, as expected
        assert run_set_fails(outcome(3, False), ok)  # runs enough, and still no score
    failed = ComplianceVerdict(SetVerdict.FAIL)
    assert run_set_fails(outcome(5, True), failed) and run_set_fails(outcome(1, False), failed)
