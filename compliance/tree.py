"""Walking a results tree: the one walker every reader of run sets uses (the checker, the
leaderboard, the projection, the report).

A results tree is the MLPerf layout: ``<package>/results/<system>/<benchmark>/result_*.txt`` with
``<package>/systems/<system>.json``, packages in or below the root (a round folder of submitters, a
tree of rounds). Hidden folders (the harness's staging) are not entered, nor are symlinks followed;
a package's own sub-folders are not searched for more packages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ErrorCategory, HarnessError
from harness.rules.results import RESULT_GLOB

MAX_PACKAGE_DEPTH = 6  # a tree of rounds: <tree>/<round>/<submitter>/results/<system>/<benchmark>/
MAX_LOG_FOLDER_DEPTH = 8  # how far below a root folders of logs are looked for


def _subfolders(folder: Path) -> list[Path]:
    """The folders in ``folder`` to enter, in name order: not hidden, not symlinks; none if unreadable."""
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    except OSError:
        return []


def find_packages(root: Path, max_depth: int = MAX_PACKAGE_DEPTH) -> list[Path]:
    """The submitter packages (folders with a ``results/`` folder) in or below ``root``."""
    found: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        results = folder / "results"
        if results.is_dir() and not results.is_symlink():
            found.append(folder)
            return
        if depth < max_depth:
            for child in _subfolders(folder):
                walk(child, depth + 1)

    walk(Path(root), 0)
    return found


@dataclass(frozen=True)
class RunSetRef:
    """One run set of a results tree: ``<package>/results/<system>/<benchmark_dir>/``."""

    package: Path  # the submitter package (holds results/ and systems/)
    system: str
    benchmark_dir: Path


def _has_logs(folder: Path) -> bool:
    return any(p.is_file() for p in folder.glob(RESULT_GLOB))


def find_run_sets(root: Path) -> Iterator[RunSetRef]:
    """Every ``<package>/results/<system>/<benchmark>/`` with result logs under ``root`` (the
    packages of :func:`find_packages`), in path order; one line when ``root`` is not a folder."""
    root = Path(root)
    if not root.is_dir():
        raise HarnessError(f"{root} is not a directory", ErrorCategory.NOT_FOUND)
    for package in find_packages(root):
        for system in _subfolders(package / "results"):
            for bench in _subfolders(system):
                if _has_logs(bench):
                    yield RunSetRef(package, system.name, bench)


def find_log_folders(root: Path, max_depth: int = MAX_LOG_FOLDER_DEPTH) -> Iterator[Path]:
    """``root`` when it holds result logs, else every folder below it that does, in path order:
    run sets in the MLPerf layout or not (a folder of logs a run wrote anywhere)."""
    def walk(folder: Path, depth: int) -> Iterator[Path]:
        if _has_logs(folder):
            yield folder
        if depth < max_depth:
            for child in _subfolders(folder):
                yield from walk(child, depth + 1)

    yield from walk(Path(root), 0)
