"""``harness check``: the verdict of the rules on one log, one run set, or a submitter package.

- **one log**: the rule set's per-run rules (``compliance.engine``);
- **one run set** (``results/<system>/<benchmark>/``): each log, then the set's rules: run
  count, distinct seeds, at most N non-converged runs, the same benchmark/division/system in
  every log, the olympic score and its spread (a coefficient of variation over the rule set's
  bound is flagged), the RCP check, and, when the logs claim a hyperparameter borrow, that
  the borrowed values equal the lender's logged ones;
- **a package** (``systems/`` + ``results/``): its layout, each system description, each set.

The rule set comes from ``--ruleset``, else from a round folder in the path (``.../v4.1/...``
is MLPerf Training 4.1.0), else from the benchmark each log names (its spec's rule set). An
input the checker cannot use at all (no such path, nothing to check, no rule set it can
tell, a file or a run set with no MLLOG line: no MLPerf log) raises :class:`HarnessError`;
anything else, however broken, becomes findings.

``harness check LOG`` imports only what one log's check needs (docs/performance.md, "Startup"):
the modules that import PyYAML, jsonschema or scipy are imported in the functions that need them.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from compliance.engine import (
    LogCheck,
    check_parsed,
    load_rule_file,
    ruleset_names,
    run_set_rules,
)
from compliance.findings import Finding, Severity
from compliance.layout import check_layout, iter_run_set_dirs
from compliance.tree import find_packages
from harness.errors import ErrorCategory, HarnessError
from harness.mllog import keys
from harness.mllog.reader import ParsedLog, parse_log
from harness.rules.results import read_run_log, run_set_stats, scaling_factor

RESULT_NAME = re.compile(r"^result_.*\.txt$")
_ROUND = re.compile(r"^v(\d+)\.(\d+)$")


# ---- choosing the rule set ----------------------------------------------------------------------

def normalise_ruleset(name: str) -> str:
    """``6.0.0`` -> ``training_6.0.0``; a known rule set name as is; else a clear error."""
    known = ruleset_names()
    for candidate in (name, f"training_{name}"):
        if candidate in known:
            return candidate
    raise HarnessError(f"unknown rule set {name!r} (known: {', '.join(known)})", ErrorCategory.NOT_FOUND)


def ruleset_from_path(path: Path) -> str | None:
    for part in reversed(Path(os.path.abspath(path)).parts):
        m = _ROUND.match(part)
        if m:
            name = f"training_{m.group(1)}.{m.group(2)}.0"
            return name if name in ruleset_names() else None
    return None


def ruleset_from_log(log: ParsedLog) -> str | None:
    from harness.rules.specs import load_benchmark  # PyYAML: see the module's docstring

    benchmark = log.first(keys.SUBMISSION_BENCHMARK)
    if not isinstance(benchmark, str) or not re.fullmatch(r"[A-Za-z0-9_]+", benchmark):
        return None
    try:
        spec = load_benchmark(benchmark)
    except HarnessError:
        return None
    return spec.compliance_ruleset


def choose_ruleset(path: Path, logs: list[ParsedLog], explicit: str | None) -> str:
    if explicit:
        return normalise_ruleset(explicit)
    found = ruleset_from_path(path)
    if found:
        return found
    for log in logs:
        found = ruleset_from_log(log)
        if found:
            return found
    raise HarnessError(
        f"{path}: cannot tell which rule set applies (no vNN.N round folder in the path, no benchmark the harness "
        "knows in the logs); give --ruleset", ErrorCategory.BAD_INPUT,
    )


def no_mllog_lines(log: ParsedLog) -> bool:
    """Whether ``log`` is no MLPerf log at all: read, and not one MLLOG line in it (an empty file, a
    binary file, any other text). A log with MLLOG lines that do not parse is a log, and broken."""
    return log.unreadable is None and not log.records and not log.problems


NOT_A_LOG = "no MLLOG lines (not an MLPerf log)"


def _mlperf_version(ruleset: str) -> str | None:
    """The MLPerf Training round a rule set follows (for system descriptions and RCPs)."""
    return ruleset.split("_", 1)[1] if ruleset.startswith("training_") else None


# ---- reports ------------------------------------------------------------------------------------

@dataclass
class CheckedLog:
    """One log of a run set and the checker's verdict on it."""

    path: Path
    check: LogCheck

    @property
    def passed(self) -> bool:
        return self.check.passed


@dataclass
class RunSetCheck:
    path: Path
    ruleset: str
    runs: list[CheckedLog]
    findings: list[Finding]  # the set's own findings (not the runs')
    summary: dict[str, Any] = field(default_factory=dict)
    # how many of its logs may fail and the set still pass (:func:`accepted_non_compliant`); 0 where
    # the rule set has no run-set rules for its benchmark
    accepted_failures: int = 0

    @property
    def failed_runs(self) -> list[CheckedLog]:
        return [r for r in self.runs if not r.passed]

    @property
    def errors(self) -> list[Finding]:
        """Every error: its runs', then its own."""
        return [f for r in self.failed_runs for f in r.check.errors] + [f for f in self.findings if f.is_error]

    @property
    def blocking_errors(self) -> list[Finding]:
        """The errors that fail the set: its own, and its runs' unless the failing runs are few
        enough to be accepted under olympic scoring."""
        if len(self.failed_runs) > self.accepted_failures:
            return self.errors
        return [f for f in self.findings if f.is_error]

    @property
    def passed(self) -> bool:
        return bool(self.runs) and not self.blocking_errors


# MLPerf's package checker (mlperf_logging 4.1.68, package_checker.py, check_training_result_files)
# accepts a benchmark's results directory in which one result file does not comply ("accepting
# this under olympic scoring"; up to four for unet3d, keyed by the directory's name as there):
# that log still fails, the set does not. The results summarizer then drops it as the slowest run.
_ACCEPTED_NON_COMPLIANT = {"unet3d": 4}


def accepted_non_compliant(benchmark_dir_name: str) -> int:
    """How many non-compliant logs MLPerf's package checker accepts in a run set whose folder is
    named ``benchmark_dir_name``."""
    return _ACCEPTED_NON_COMPLIANT.get(benchmark_dir_name, 1)


@dataclass
class Report:
    path: Path
    ruleset: str | None
    findings: list[Finding] = field(default_factory=list)  # package level: layout, systems
    run_sets: list[RunSetCheck] = field(default_factory=list)
    runs: list[CheckedLog] = field(default_factory=list)  # a single log checked alone

    @property
    def all_findings(self) -> list[Finding]:
        out = list(self.findings)
        for s in self.run_sets:
            for r in s.runs:
                out.extend(r.check.findings)
            out.extend(s.findings)
        for r in self.runs:
            out.extend(r.check.findings)
        return out

    @property
    def passed(self) -> bool:
        """No package-level error, every run set passes (one non-compliant log of a set may be
        accepted: :func:`accepted_non_compliant`), every log checked alone passes."""
        return (not any(f.is_error for f in self.findings) and all(s.passed for s in self.run_sets)
                and all(r.passed for r in self.runs))

    def as_json(self) -> dict[str, Any]:
        def run_json(r: CheckedLog) -> dict[str, Any]:
            return {"file": str(r.path), "ruleset": r.check.ruleset, "rule_files": r.check.levels,
                    "verdict": "pass" if r.passed else "fail", "findings": [f.as_json() for f in r.check.findings]}

        return {
            "path": str(self.path),
            "ruleset": self.ruleset,
            "verdict": "pass" if self.passed else "fail",
            "errors": sum(f.is_error for f in self.all_findings),
            "warnings": sum(not f.is_error for f in self.all_findings),
            "findings": [f.as_json() for f in self.findings],
            "runs": [run_json(r) for r in self.runs],
            "run_sets": [
                {"dir": str(s.path), "ruleset": s.ruleset, "verdict": "pass" if s.passed else "fail",
                 **s.summary, "findings": [f.as_json() for f in s.findings], "runs": [run_json(r) for r in s.runs]}
                for s in self.run_sets
            ],
        }


@dataclass
class TreeReport:
    """Several packages checked at once (a round folder, a tree of rounds): each package's
    :class:`Report`, under its own round's rule set."""

    path: Path
    packages: list[Report]

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.packages)

    @property
    def all_findings(self) -> list[Finding]:
        return [f for p in self.packages for f in p.all_findings]

    def as_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "verdict": "pass" if self.passed else "fail",
                "packages_checked": len(self.packages), "packages_failed": sum(not p.passed for p in self.packages),
                "packages": [p.as_json() for p in self.packages]}


# ---- checking -----------------------------------------------------------------------------------

def check_path(path: Path, *, ruleset: str | None = None, lenders: list[Path] | None = None
               ) -> Report | TreeReport:
    """Check a log file, a run-set directory, a submitter package, or every package in or below a
    folder (a round folder of submitters, a tree of rounds)."""
    path = Path(path)
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError as err:  # e.g. a symlink loop: ELOOP
        raise HarnessError(f"{path}: cannot read ({err.strerror})", ErrorCategory.BAD_INPUT) from None
    if not is_file and not is_dir:
        if os.path.islink(path):
            try:
                os.stat(path)
                why = "cannot read"
            except OSError as err:
                why = f"cannot read ({err.strerror})"
            raise HarnessError(f"{path}: a symlink that leads nowhere readable: {why}", ErrorCategory.BAD_INPUT)
        raise HarnessError(f"{path} does not exist", ErrorCategory.NOT_FOUND)
    if is_file:
        log = parse_log(path)
        if no_mllog_lines(log):
            raise HarnessError(f"{path}: {NOT_A_LOG}", ErrorCategory.BAD_INPUT)
        name = choose_ruleset(path, [log], ruleset)
        return Report(path, name, runs=[CheckedLog(path, check_parsed(log, name))])
    if _is_package(path):
        return _check_package(path, ruleset, lenders or [])
    if _result_entries(path):
        report = Report(path, None)
        rs = check_run_set(path, ruleset=ruleset, lenders=lenders or [], search_root=path.parent.parent.parent)
        report.ruleset = rs.ruleset
        report.run_sets.append(rs)
        return report
    packages = find_packages(path)
    if packages:
        return TreeReport(path, [_check_package(p, ruleset, lenders or []) for p in packages])
    raise HarnessError(
        f"{path}: nothing to check here (no result_*.txt logs, no package with systems/ and results/ in it or "
        "below it)", ErrorCategory.BAD_INPUT,
    )


def _is_package(path: Path) -> bool:
    try:
        return (path / "results").is_dir() or (path / "systems").is_dir()
    except OSError:
        return False


def _result_entries(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if RESULT_NAME.match(p.name))
    except OSError:
        return []


def _check_package(path: Path, ruleset: str | None, lenders: list[Path]) -> Report:
    # PyYAML and jsonschema: see the module's docstring
    from compliance.systems import check_system_desc

    report = Report(path, None, findings=list(check_layout(path)))
    sets = iter_run_set_dirs(path)
    for _system, _benchmark, run_dir in sets:
        if not _result_entries(run_dir):
            continue
        try:
            rs = check_run_set(run_dir, ruleset=ruleset, lenders=lenders, search_root=path.parent)
        except HarnessError as err:
            report.findings.append(Finding("package.run_set", Severity.ERROR, str(err), run_dir))
            continue
        report.run_sets.append(rs)
    report.ruleset = report.run_sets[0].ruleset if report.run_sets else (
        normalise_ruleset(ruleset) if ruleset else ruleset_from_path(path))
    version = _mlperf_version(report.ruleset) if report.ruleset else None
    systems_dir = path / "systems"
    if systems_dir.is_dir():
        for desc in sorted(systems_dir.glob("*.json")):
            report.findings.extend(check_system_desc(desc, version))
    if not report.run_sets and not any(f.is_error for f in report.findings):
        report.findings.append(Finding("package.empty", Severity.ERROR, "the package has no run sets to check", path))
    return report


def check_run_set(run_dir: Path, *, ruleset: str | None = None, lenders: list[Path] | None = None,
                  search_root: Path | None = None) -> RunSetCheck:
    """Each log of ``results/<system>/<benchmark>/``, then the rules over the set."""
    entries = _result_entries(run_dir)
    findings: list[Finding] = []
    files = []
    for entry in entries:
        try:
            if entry.is_file():
                files.append(entry)
            else:
                findings.append(Finding("run_set.not_a_file", Severity.ERROR,
                                        f"{entry.name} is named like a result log but is not a file", entry))
        except OSError as err:
            findings.append(Finding("run_set.unreadable", Severity.ERROR, f"{entry.name}: {err.strerror}", entry))
    logs = [parse_log(p) for p in files]
    if logs and all(no_mllog_lines(log) for log in logs):  # nothing here is a log: one line, no rule set chosen
        raise HarnessError(f"{files[0]}: {NOT_A_LOG}" if len(files) == 1 else
                           f"{run_dir}: no MLLOG lines in any of its {len(files)} result_*.txt files (not MLPerf "
                           "logs)", ErrorCategory.BAD_INPUT)
    name = choose_ruleset(run_dir, logs, ruleset)
    runs = [CheckedLog(p, check_parsed(log, name)) for p, log in zip(files, logs)]
    report = RunSetCheck(run_dir, name, runs, findings)
    if runs:
        _set_rules(report, logs, lenders or [], search_root)
    else:
        findings.append(Finding("run_set.empty", Severity.ERROR, "no readable result_*.txt logs", run_dir))
    return report


def _olympic_acceptance(report: RunSetCheck) -> None:
    """The package checker's verdict on the set's non-compliant logs, as a finding: a warning when
    it accepts them under olympic scoring, an error when there are more than it accepts."""
    report.accepted_failures = allowed = accepted_non_compliant(report.path.name)
    failed = [r.path.name for r in report.failed_runs]
    if not failed:
        return
    names = ", ".join(failed)
    if len(failed) <= allowed:
        report.findings.append(Finding(
            f"{report.ruleset}/run_set:olympic_acceptance", Severity.WARNING,
            f"{len(failed)} log{'s do' if len(failed) > 1 else ' does'} not comply ({names}): accepted under olympic "
            f"scoring, as MLPerf's package checker accepts up to {allowed} in a {report.path.name} run set",
            report.path))
    else:
        report.findings.append(Finding(
            f"{report.ruleset}/run_set:olympic_acceptance", Severity.ERROR,
            f"{len(failed)} logs do not comply ({names}): the set cannot be accepted (MLPerf's package checker "
            f"accepts up to {allowed} in a {report.path.name} run set)", report.path))


def _set_rules(report: RunSetCheck, logs: list[ParsedLog], lenders: list[Path], search_root: Path | None) -> None:
    f = report.findings
    d = report.path

    def add(rule: str, message: str, severity: Severity = Severity.ERROR) -> None:
        f.append(Finding(f"{report.ruleset}/run_set:{rule}", severity, message, d))

    # the same submission in every log
    for key in (keys.SUBMISSION_BENCHMARK, keys.SUBMISSION_DIVISION, keys.SUBMISSION_ORG, keys.SUBMISSION_PLATFORM):
        seen = {repr(log.first(key)) for log in logs}
        if len(seen) > 1:
            add(f"{key}.same", f"the logs disagree on {key}: {', '.join(sorted(seen))}")
    benchmark = logs[0].first(keys.SUBMISSION_BENCHMARK)
    division = logs[0].first(keys.SUBMISSION_DIVISION)
    levels = max((r.check.levels for r in report.runs), key=len)
    rules = run_set_rules(report.ruleset, levels)
    report.summary.update({"benchmark": benchmark, "division": division, "runs": len(logs)})
    if rules is None:
        if not all(any(f.rule.endswith(".not_in_ruleset") for f in r.check.findings) for r in report.runs):
            # (a benchmark the rule set lacks is said once per log already)
            add("rules", f"rule set {report.ruleset} has no run-set rules for benchmark {benchmark!r}")
        return
    _olympic_acceptance(report)
    n = len(logs)
    if division == "closed" and n != rules["runs"]:
        add("runs", f"a closed {benchmark} run set has exactly {rules['runs']} result logs; this one has {n}")
    elif n < rules["runs"]:
        add("runs", f"a {benchmark} run set has at least {rules['runs']} result logs; this one has {n}")
    seeds = [log.first(keys.SEED) for log in logs]
    if rules.get("seeds_required"):
        missing = [log.path.name for log, s in zip(logs, seeds) if s is None]
        if missing:
            add("seeds.required", f"no seed logged in {', '.join(missing)}")
    if rules.get("distinct_seeds"):
        dup = sorted(repr(s) for s, c in Counter(repr(s) for s in seeds if s is not None).items() if c > 1)
        if dup:
            add("seeds.distinct", f"runs share seeds {', '.join(dup)}; each run must use its own")
    _seed_checker(report, logs, division)
    target = _target(report.ruleset, levels)
    try:
        runs = [read_run_log(log.path) for log in logs]
        scaling = scaling_factor(d)
    except HarnessError as err:
        add("score", f"cannot score the set: {err}")
        return
    non_converged = [r.path.name for r in runs if not r.converged(target)]
    report.summary.update({"target": target, "converged": n - len(non_converged)})
    if len(non_converged) > rules["max_non_converged"]:
        add("convergence", f"{len(non_converged)} runs did not reach the target ({', '.join(non_converged)}); "
            f"at most {rules['max_non_converged']} may not")
    stats = run_set_stats(runs, scaling=scaling, target=target, max_dropped=rules["max_non_converged"],
                          non_compliant=frozenset(r.path for r in report.failed_runs))
    report.summary.update({
        "score_minutes": stats.score.minutes if stats.score else None,
        "score_error": stats.score_error,
        "scaling_factor": scaling,
        "mean_minutes": stats.mean_minutes,
        "stdev_minutes": stats.stdev_minutes,
        "coefficient_of_variation": stats.coefficient_of_variation,
        "bootstrap_95": list(stats.bootstrap_95) if stats.bootstrap_95 else None,
    })
    bound = rules.get("max_coefficient_of_variation")
    cv = stats.coefficient_of_variation
    if bound is not None and cv is not None and cv > bound:
        add("variation", f"the runs' time to train varies by CV {cv:.1%}, over the benchmark's bound of {bound:.0%}",
            Severity.WARNING)
    _rcp(report, add, division)
    _borrowing(report, logs, add, lenders, search_root)


# The rounds whose package checker runs its seed checker (mlperf_logging 4.1.68), closed division only.
SEED_CHECKER_ROUNDS = frozenset({"1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0",
                                 "5.1.0", "6.0.0", "6.1.0"})
SEEDS_ALWAYS_FROM = (4, 1, 0)  # the first round whose seed checker requires a seed in every run
SEED_BYPASS = "seed-checker-bypass"
_BYPASS_FILE = "package_checker_params"


def _seed_checker(report: RunSetCheck, logs: list[ParsedLog], log_division: Any) -> None:
    """``mlperf_logging.package_checker.seed_checker``'s rule, as findings ``<ruleset>/run_set:seeds_*``.

    As the package checker runs it: for a round in :data:`SEED_CHECKER_ROUNDS` whose system
    description (``systems/<system>.json`` beside ``results/``; the logs' submission_division
    when the set is checked outside a package) says ``closed``, unless a ``package_checker_params``
    file in the system or benchmark folder has the line ``seed-checker-bypass``. Then every log
    must parse (``seeds_readable``), log at least one seed through mllog, each with metadata file
    and lineno and an integer value (``seeds_logged``, ``seeds_readable``), and no two logs may log
    the same seed from the same file and line (``seeds_unique``). A log with more than one seed
    record is a warning (``seeds_count``), as there.

    One divergence, by round (as the system description's status vocabulary): "every run logs a
    seed" arrived in mlcommons/logging ac0096c (September 2024, first released in 4.1.0-rc4);
    before it a set in which *no* run logs a seed passed. 4.1.68 applies it to every round, and
    so fails three published real packages (v2.1 Azure, v3.0 GIGABYTE, v4.0 smc log no seed).
    Here, for rounds before :data:`SEEDS_ALWAYS_FROM`, a set that logs no seed at all is one
    WARNING (``seeds_logged``); from 4.1.0 on, or when some runs of the set log seeds, each run
    without one is an ERROR.
    """
    version = _mlperf_version(report.ruleset)
    if version not in SEED_CHECKER_ROUNDS:
        return
    d = report.path
    division = log_division
    desc = d.parent.parent.parent / "systems" / f"{d.parent.name}.json"
    if d.parent.parent.name == "results" and desc.is_file():
        try:
            division = json.loads(desc.read_text(encoding="utf-8")).get("division")
        except (OSError, ValueError, AttributeError):
            pass  # the system description's own findings say what is wrong with it
    if division != "closed":
        return

    def add(rule: str, message: str, path: Path, line: int | None = None, severity: Severity = Severity.ERROR) -> None:
        report.findings.append(Finding(f"{report.ruleset}/run_set:seeds_{rule}", severity, message, path, line))

    for folder in (d.parent, d):
        params = folder / _BYPASS_FILE
        try:
            lines = params.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True) \
                if params.is_file() else []
        except OSError:
            lines = []
        if SEED_BYPASS in lines:  # compared with its line ending, as there: only a last line without one counts
            add("bypass", f"the seed checker is bypassed by {params}", params, severity=Severity.WARNING)
            return
        if any(line.strip() == SEED_BYPASS for line in lines):
            add("bypass", f"{params} asks to bypass the seed checker, but the official package checker compares "
                "each line with its newline and ignores it; write it as the last line without one", params,
                severity=Severity.WARNING)
    seen: dict[tuple[Any, Any, int], Path] = {}
    unseeded: list[Path] = []
    seeded = 0
    for log in sorted(logs, key=lambda lg: str(lg.path)):
        if log.unreadable or log.problems:
            why = log.unreadable or f"line {log.problems[0].lineno}: {log.problems[0].message}"
            add("readable", f"cannot read the seeds of {log.path.name}: {why}", log.path,
                log.problems[0].lineno if log.problems else None)
            continue
        records = [r for r in log.records if r.key == keys.SEED]
        seeds = []
        try:
            for r in records:
                meta = r.metadata
                if not isinstance(meta, dict) or "file" not in meta or "lineno" not in meta:
                    raise ValueError(f"line {r.lineno}: the seed record's metadata has no file and lineno")
                try:
                    seed = int(r.value)
                except (TypeError, ValueError, OverflowError):
                    raise ValueError(f"line {r.lineno}: seed {r.value!r} is not an integer") from None
                where = (meta["file"], meta["lineno"], seed)
                hash(where)
                seeds.append((where, r.lineno))
        except (ValueError, TypeError) as err:
            add("readable", f"cannot read the seeds of {log.path.name}: {err}", log.path)
            continue
        if not seeds:
            unseeded.append(log.path)
        else:
            seeded += 1
        if len(seeds) > 1:
            add("count", f"{log.path.name} logs {len(seeds)} seeds; one is expected", log.path,
                severity=Severity.WARNING)
        for (src, src_line, seed), lineno in seeds:
            first = seen.setdefault((src, src_line, seed), log.path)
            if first != log.path:
                add("unique", f"{log.path.name} logs seed {seed} from {src}:{src_line}, as {first.name} already does; "
                    "each run must draw its own seed", log.path, lineno)
    if unseeded and not seeded and tuple(int(x) for x in version.split(".")) < SEEDS_ALWAYS_FROM:
        add("logged", f"no run of the set logs a seed (through mllog): accepted in round {version}, whose seed "
            "checker required seeds only once some run logged one; mlperf_logging 4.1.68 requires one in every run "
            "for every round", d, severity=Severity.WARNING)
        return
    for path in unseeded:
        add("logged", f"{path.name} logs no seed (through mllog)", path)


def _target(ruleset: str, levels: list[str]) -> float | None:
    """The quality target: the ``min`` of the most specific eval_accuracy ``at_least_one`` rule."""
    for level in reversed(levels):
        rules = load_rule_file(ruleset, level)
        rule = rules["keys"].get(keys.EVAL_ACCURACY) if rules else None
        if rule and "at_least_one" in rule:
            return rule["at_least_one"].get("min")
    return None


class _AddFinding(Protocol):
    """How a run set's rule adds a finding (:func:`_set_rules`'s ``add``)."""

    def __call__(self, rule: str, message: str, severity: Severity = Severity.ERROR) -> None: ...


def _rcp(report: RunSetCheck, add: _AddFinding, division: Any) -> None:
    # scipy and PyYAML: see the module's docstring
    from harness.rules.rcp import Verdict, check_convergence
    from harness.rules.specs import load_benchmark

    benchmark = report.summary.get("benchmark")
    if division != "closed" or not isinstance(benchmark, str):
        report.summary["rcp"] = {"verdict": "not applicable (open division)" if division == "open" else "not checked"}
        return
    try:
        spec = load_benchmark(benchmark)
    except HarnessError:
        spec = None
    if spec is not None and not spec.raw.get("rcp_checked", True):
        report.summary["rcp"] = {"verdict": "not checked", "why": "the benchmark spec has rcp_checked: false"}
        return
    try:
        result = check_convergence(report.path, version=_mlperf_version(report.ruleset))
    except HarnessError as err:
        report.summary["rcp"] = {"verdict": "not checked", "why": str(err)}
        add("rcp", f"the RCP check could not run: {err}", Severity.WARNING)
        return
    report.summary["rcp"] = result.to_json()
    if result.verdict is Verdict.FAIL:
        add("rcp", f"RCP check failed: {result.message} (mean epochs {result.submission_mean})")
    elif result.verdict is Verdict.MISSING_RCP:
        add("rcp", f"no RCP for batch size {result.batch_size}: {result.message}", Severity.WARNING)


def _borrowing(report: RunSetCheck, logs: list[ParsedLog], add: _AddFinding, lenders: list[Path],
               search_root: Path | None) -> None:
    claims = [log.first(keys.HARNESS_BORROWED_FROM) for log in logs]
    if all(c is None for c in claims):
        return
    if any(c != claims[0] for c in claims) or not isinstance(claims[0], dict):
        add("borrow.same", "the logs disagree on their harness_borrowed_from provenance")
        return
    claim = claims[0]
    from compliance.borrowing import verify_borrow  # PyYAML: see the module's docstring

    for message in verify_borrow(claim, logs, lenders=lenders, search_root=search_root):
        add("borrow", message)
    report.summary["borrowed_from"] = claim

