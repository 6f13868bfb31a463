"""The directory layout of an MLPerf Training submitter package.

A package is laid out as MLPerf's package checker (``mlperf_logging.package_checker``) reads it::

    <package>/systems/<system>.json
    <package>/results/<system>/<benchmark>/result_*.txt     (+ scaling.json, other *.json params,
                                                              package_checker_params, power/)

:func:`check_layout` reports what would make that checker crash, miss a file or read the wrong
one, as findings, and never raises. The walk has a fixed depth (results/system/benchmark/file),
so a symlink is followed at most one level and a loop can never make it spin. Rules:

- ``layout.missing_dir`` (ERROR): the package, ``results/`` or ``systems/`` is missing;
- ``layout.wrong_type`` (ERROR): a directory where a file is read (``systems/x.json``,
  ``result_0.txt``, ``scaling.json``...) or a file where a directory is read (``results``,
  ``systems``), or a FIFO/device there: the official checker would crash or hang on it;
- ``layout.no_system_desc`` (ERROR): ``results/<system>/`` without ``systems/<system>.json``
  (the package checker opens that file for every benchmark directory and crashes without it);
- ``layout.no_results`` (WARNING): ``systems/<system>.json`` with no ``results/<system>/``;
- ``layout.result_name`` (WARNING): a file that looks like a result (``results_0.txt``,
  ``result_0.log``, ``Result_0.txt``) but does not match ``result_*.txt``, so is not counted;
- ``layout.unexpected_file`` (WARNING): any other file or directory the checker ignores;
- ``layout.broken_symlink`` (ERROR): a dangling symlink or a symlink loop (``a -> b -> a``);
- ``layout.symlink_cycle`` (ERROR): a directory symlink to one of its own ancestors (not walked);
- ``layout.symlink_outside`` (WARNING): a symlink whose target lies outside the package (it is
  still followed: the package is not self-contained, but it is readable);
- ``layout.unreadable`` (ERROR): a directory that cannot be listed.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from compliance.findings import Finding, Severity

RESULT_PATTERN = "result_*.txt"  # the glob MLPerf's package checker counts runs with
PARAMS_FILE = "package_checker_params"  # read by the package checker in a system or benchmark directory
POWER_DIR = "power"  # power measurements, read by the package checker's power checker


@dataclass(frozen=True)
class _Entry:
    """One directory entry: what it is once symlinks are followed, and what the link says."""

    name: str
    path: Path
    kind: str  # "dir", "file", "other" (FIFO, socket, device), "broken" (dangling or looping link), "missing"
    is_link: bool = False
    real: str | None = None  # the resolved path, when it resolves
    loop: bool = False  # a broken link that loops


def check_layout(package: Path) -> list[Finding]:
    """Every finding about the layout of the submitter package directory ``package``."""
    package = Path(package)
    findings: list[Finding] = []
    root = _describe(package, package.name)
    if root.kind == "missing":
        return [Finding("layout.missing_dir", Severity.ERROR, "the package directory does not exist", package)]
    if root.kind != "dir":
        return [_kind_finding(root, "the package", expected="dir")]
    root_real = os.path.realpath(package)
    walker = _Walker(root_real, findings)

    systems_dir = walker.top(package, "systems")
    results_dir = walker.top(package, "results")

    good_systems: set[str] = set()  # stems of systems/<stem>.json files
    bad_systems: set[str] = set()  # stems named by a systems/<stem>.json that is not a readable file
    if systems_dir is not None:
        for e in walker.entries(systems_dir, "systems"):
            rel = f"systems/{_show(e.name)}"
            if e.name.endswith(".json") and not e.name.startswith("."):
                stem = e.name[: -len(".json")]
                if walker.usable(e, rel, expected="file"):
                    good_systems.add(stem)
                else:
                    bad_systems.add(stem)
            elif walker.usable(e, rel, expected=None):
                walker.unexpected(e, rel, "is not a system description (systems/<system>.json)")

    result_systems: set[str] = set()
    if results_dir is not None:
        for e in walker.entries(results_dir, "results"):
            rel = f"results/{_show(e.name)}"
            if not walker.usable(e, rel, expected=None, parent=results_dir):
                continue
            if e.kind != "dir":
                walker.unexpected(e, rel, "is not a system's results directory (results/<system>/)")
                continue
            result_systems.add(e.name)
            if e.name not in good_systems and e.name not in bad_systems:
                findings.append(
                    Finding(
                        "layout.no_system_desc",
                        Severity.ERROR,
                        f"{rel}/ has no system description systems/{_show(e.name)}.json",
                        e.path,
                    )
                )
            _check_system_dir(walker, e.path, rel)

    for stem in sorted(good_systems - result_systems):
        findings.append(
            Finding(
                "layout.no_results",
                Severity.WARNING,
                f"systems/{_show(stem)}.json has no results directory results/{_show(stem)}/",
                package / "systems" / f"{stem}.json",
            )
        )
    return findings


def iter_run_set_dirs(package: Path) -> list[tuple[str, str, Path]]:
    """``(system, benchmark, directory)`` for each ``results/<system>/<benchmark>/`` directory, sorted.

    Entries that are not directories (after following symlinks) are skipped, as are broken
    symlinks and directory symlinks to their own ancestors. Never raises.
    """
    out: list[tuple[str, str, Path]] = []
    walker = _Walker(os.path.realpath(package), [])
    results = Path(package) / "results"
    top = _describe(results, "results")
    if top.kind != "dir" or walker.is_cycle(top, Path(package)):
        return out
    for system in _scan(results)[0]:
        if system.kind != "dir" or walker.is_cycle(system, results):
            continue
        for bench in _scan(system.path)[0]:
            if bench.kind == "dir" and not walker.is_cycle(bench, system.path):
                out.append((system.name, bench.name, bench.path))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _check_system_dir(walker: _Walker, system_dir: Path, rel_system: str) -> None:
    for e in walker.entries(system_dir, rel_system):
        rel = f"{rel_system}/{_show(e.name)}"
        if e.name == PARAMS_FILE:
            walker.usable(e, rel, expected="file")
            continue
        if not walker.usable(e, rel, expected=None, parent=system_dir):
            continue
        if e.kind == "dir":
            _check_benchmark_dir(walker, e.path, rel)
        else:
            walker.unexpected(e, rel, "is not a benchmark directory (results/<system>/<benchmark>/)")


def _check_benchmark_dir(walker: _Walker, bench_dir: Path, rel_bench: str) -> None:
    for e in walker.entries(bench_dir, rel_bench):
        rel = f"{rel_bench}/{_show(e.name)}"
        name = e.name
        if fnmatch.fnmatchcase(name, RESULT_PATTERN):
            walker.usable(e, rel, expected="file")
        elif name == PARAMS_FILE or (name.endswith(".json") and not name.startswith(".")):
            walker.usable(e, rel, expected="file")  # scaling.json, or another params file
        elif not walker.usable(e, rel, expected=None, parent=bench_dir):
            continue
        elif e.kind == "dir":
            if name != POWER_DIR:
                walker.unexpected(e, rel, "is an unexpected directory in a benchmark directory")
        elif _looks_like_result(name):
            walker.findings.append(
                Finding(
                    "layout.result_name",
                    Severity.WARNING,
                    f"{rel} looks like a result file but does not match {RESULT_PATTERN}, so MLPerf's package "
                    "checker will not count it: should it be named result_*.txt?",
                    e.path,
                )
            )
        else:
            walker.unexpected(e, rel, "is an unexpected file: should it be named result_*.txt?")


class _Walker:
    """Lists directories and judges entries, adding findings; follows no symlink more than one level."""

    def __init__(self, root_real: str, findings: list[Finding]) -> None:
        self.root_real = root_real
        self.findings = findings

    def top(self, package: Path, name: str) -> Path | None:
        """``package/name`` when it is a usable directory, else None (with a finding)."""
        e = _describe(package / name, name)
        if e.kind == "missing":
            self.findings.append(
                Finding("layout.missing_dir", Severity.ERROR, f"the package has no {name}/ directory", e.path)
            )
            return None
        return e.path if self.usable(e, name, expected="dir", parent=package) else None

    def entries(self, directory: Path, rel: str) -> list[_Entry]:
        found, error = _scan(directory)
        if error is not None:
            self.findings.append(
                Finding("layout.unreadable", Severity.ERROR, f"cannot list {rel}/: {error}", directory)
            )
        return found

    def usable(self, e: _Entry, rel: str, *, expected: str | None, parent: Path | None = None) -> bool:
        """Whether ``e`` can be used as ``expected`` ("file", "dir", or None for either); reports why not."""
        if e.kind == "broken":
            what = "a symlink loop" if e.loop else f"a dangling symlink (to {_show(_readlink(e.path))})"
            self.findings.append(Finding("layout.broken_symlink", Severity.ERROR, f"{rel} is {what}", e.path))
            return False
        if e.kind == "missing":  # vanished while being listed
            return False
        if e.is_link and e.real is not None:
            if not _within(e.real, self.root_real):
                self.findings.append(
                    Finding(
                        "layout.symlink_outside",
                        Severity.WARNING,
                        f"{rel} is a symlink to {_show(e.real)}, outside the package",
                        e.path,
                    )
                )
            if e.kind == "dir" and parent is not None and self.is_cycle(e, parent):
                self.findings.append(
                    Finding(
                        "layout.symlink_cycle",
                        Severity.ERROR,
                        f"{rel} is a symlink to its own ancestor {_show(e.real)}; not followed",
                        e.path,
                    )
                )
                return False
        if e.kind == "other" or (expected is not None and e.kind != expected):
            self.findings.append(_kind_finding(e, rel, expected=expected))
            return False
        return True

    def is_cycle(self, e: _Entry, parent: Path) -> bool:
        """Whether directory symlink ``e`` (in ``parent``) resolves to ``parent`` or one of its ancestors."""
        if not e.is_link or e.real is None:
            return False
        try:
            parent_real = os.path.realpath(parent)
        except (OSError, ValueError):
            return False
        return _within(parent_real, e.real)

    def unexpected(self, e: _Entry, rel: str, why: str) -> None:
        kind = "directory" if e.kind == "dir" else "file"
        self.findings.append(
            Finding("layout.unexpected_file", Severity.WARNING, f"unexpected {kind} {rel}: {why}", e.path)
        )


def _kind_finding(e: _Entry, rel: str, *, expected: str | None) -> Finding:
    found = {"dir": "a directory", "file": "a file"}.get(e.kind, "neither a file nor a directory")
    want = {"dir": "a directory", "file": "a file"}.get(expected or "", "a file or a directory")
    return Finding("layout.wrong_type", Severity.ERROR, f"{rel} is {found}; it must be {want}", e.path)


def _describe(path: Path, name: str) -> _Entry:
    """What ``path`` is, without raising: lstat for the link, stat (following it) for the kind."""
    try:
        lst = os.lstat(path)
    except (OSError, ValueError):
        return _Entry(name, path, "missing")
    is_link = stat.S_ISLNK(lst.st_mode)
    try:
        st = os.stat(path) if is_link else lst
    except OSError as e:
        return _Entry(name, path, "broken", is_link=True, loop=e.errno == errno.ELOOP)
    except ValueError:
        return _Entry(name, path, "broken", is_link=True)
    if stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    real = None
    if is_link:
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError):
            real = None
    return _Entry(name, path, kind, is_link=is_link, real=real)


def _scan(directory: Path) -> tuple[list[_Entry], str | None]:
    """The entries of ``directory`` sorted by name, and why it could not be listed (None when it could)."""
    try:
        with os.scandir(directory) as it:
            names = [entry.name for entry in it]
    except OSError as e:
        return [], e.strerror or type(e).__name__
    except ValueError as e:
        return [], str(e)
    return [_describe(Path(directory) / n, n) for n in sorted(names)], None


def _within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:
        return False


def _readlink(path: Path) -> str:
    try:
        return os.readlink(path)
    except (OSError, ValueError):
        return "?"


def _looks_like_result(name: str) -> bool:
    lower = name.lower()
    return lower.startswith("result") or lower.endswith((".txt", ".log"))


def _show(name: str) -> str:
    """``name`` as it can be printed: as is when printable UTF-8, else escaped (newlines, undecodable bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return ascii(name)[1:-1]
    return name if name.isprintable() else ascii(name)[1:-1]
