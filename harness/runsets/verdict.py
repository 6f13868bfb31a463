"""The verdict on a run set just written: what ``harness check`` says of it, how a set the user
asked to be short is judged, and whether ``harness run`` fails (exits 1) because of it.

The CLI prints these values and picks its exit code from them; the policy lives here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from compliance.check import check_run_set
from harness.errors import HarnessError
from harness.runsets.plan import RunSetPlan
from harness.runsets.score import RunSetOutcome

# An olympic mean drops the fastest and the slowest run: a set of fewer runs than this has no
# score by construction (``--runs 1``, ``--runs 2``), which is not a failure of the set.
MIN_RUNS_FOR_A_SCORE = 3


class SetVerdict(enum.Enum):
    PASS = "pass"
    INCOMPLETE = "incomplete"  # short as asked: its only errors are about the run count
    FAIL = "FAIL"
    NOT_CHECKED = "not checked"  # the checker could not judge it (see ``why_not_checked``)


@dataclass(frozen=True)
class ComplianceVerdict:
    """``harness check`` on the set's results directory, as ``harness run`` judges it."""

    verdict: SetVerdict
    ruleset: str = ""
    passing_logs: int = 0
    logs: int = 0
    first_error: str | None = None  # the message of the first error finding, if any
    why_not_checked: str | None = None
    accepted: str | None = None  # the set's non-compliant log accepted under olympic scoring, if any

    @property
    def acceptable(self) -> bool:
        """True unless the set fails: passed, short as asked, or not checked at all."""
        return self.verdict is not SetVerdict.FAIL


def short_by_request(plan: RunSetPlan) -> bool:
    """The user asked for fewer runs (``--runs``) than the benchmark requires."""
    runs = plan.request.runs
    return runs is not None and runs < plan.spec.required_runs


def compliance_verdict(results_dir: Path, *, short_by_request: bool) -> ComplianceVerdict:
    """What ``harness check`` says about the set in ``results_dir``.

    A set the user asked to be short (``--runs`` below the benchmark's requirement) is
    ``incomplete``, not failed, when its only error is the run count (every run passes: the
    acceptance of one failing log under olympic scoring is a full set's); ``harness check`` on it
    still says FAIL until the set is completed (``--resume``)."""
    try:
        rs = check_run_set(results_dir)
    except HarnessError as err:
        return ComplianceVerdict(SetVerdict.NOT_CHECKED, why_not_checked=str(err))
    passing = sum(r.passed for r in rs.runs)
    if short_by_request:
        # every error counts: olympic scoring's acceptance of one failing log is a full set's, and a
        # short set with a failing run is not merely incomplete
        errors = rs.errors
        incomplete = bool(errors) and all(f.rule.endswith("run_set:runs") for f in errors)
        verdict = SetVerdict.PASS if not errors else (SetVerdict.INCOMPLETE if incomplete else SetVerdict.FAIL)
    else:
        errors = rs.blocking_errors  # a set's one non-compliant log, accepted under olympic scoring, is not one
        verdict = SetVerdict.PASS if rs.passed else SetVerdict.FAIL
    accepted = next((f.message for f in rs.findings if f.rule.endswith("run_set:olympic_acceptance")
                     and not f.is_error), None)
    return ComplianceVerdict(verdict, rs.ruleset, passing, len(rs.runs), errors[0].message if errors else None,
                             accepted=accepted)


def run_set_fails(outcome: RunSetOutcome, compliance: ComplianceVerdict) -> bool:
    """Whether ``harness run`` exits 1: the set fails its compliance check (as ``harness check``
    says), or it has runs enough for a score and still none."""
    if outcome.score is None and len(outcome.runs) >= MIN_RUNS_FOR_A_SCORE:
        return True
    return not compliance.acceptable
