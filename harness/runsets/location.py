"""Where a run set goes, and what of it is left to run.

A results tree holds one set per system and benchmark (MLPerf's submission layout:
``<results>/<submitter>/results/<system>/<benchmark>/result_<i>.txt``). The roots ``DIR``,
``DIR-2``, ``DIR-3``, ... beside the given ``--results DIR`` form a chain, walked in order:

* a root whose set folder holds a complete set (every run the command asks for) is kept as it
  is and passed over: a new set goes to the first root of the chain that holds none of this
  system's and benchmark's results;
* a root whose set folder holds an incomplete set (an interrupted one) stops the walk: without
  ``--resume`` the command refuses, naming it and both ways on; with ``--resume`` it completes it;
* with ``--resume`` and no incomplete set, the last complete set is reported (nothing runs).

So the same command (with or without ``--resume``) always finds the same set."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import HarnessError
from harness.runsets.manifest import check_resumable
from harness.runsets.plan import RunSetPlan


@dataclass(frozen=True)
class SetFolder:
    """One root of the chain as a set's place: the plan with that root, the set's runs already
    there (their indices) and how many result files the folder holds."""

    plan: RunSetPlan
    done: tuple[int, ...]
    files: int

    @property
    def complete(self) -> bool:
        return len(self.done) == self.plan.runs

    @property
    def empty(self) -> bool:
        return self.files == 0


@dataclass(frozen=True)
class Placement:
    """Where the set goes (``plan``, its results root the one chosen), its runs still to do, and
    the line that tells the user so."""

    plan: RunSetPlan
    pending: list[int]
    said: str


def chain(root: Path) -> Iterator[Path]:
    """``root``, then ``root-2``, ``root-3``, ... beside it (``.`` is named by its own name)."""
    yield root
    named = root if root.name not in ("", "..") else root.resolve()
    for n in itertools.count(2):
        yield named.with_name(f"{named.name}-{n}")


def set_folder(plan: RunSetPlan, root: Path) -> SetFolder:
    """What the set folder of ``plan``'s system and benchmark holds under the results root ``root``."""
    at = replace(plan, request=replace(plan.request, results_dir=root))
    files = sorted(at.results_dir.glob("result_*.txt")) if at.results_dir.is_dir() else []
    done = tuple(i for i in range(at.runs) if at.result_path(i).is_file())
    return SetFolder(at, done, len(files))


def place_run_set(plan: RunSetPlan) -> Placement:
    """Walk the chain of roots from ``--results`` (see the module's doc) and say where the set
    goes; refuses, changing nothing, an incomplete set without ``--resume`` and a ``--resume``
    whose set began with other settings."""
    resume = plan.request.resume
    kept: list[SetFolder] = []  # complete sets passed over
    for root in chain(plan.request.results_dir):
        folder = set_folder(plan, root)
        if folder.complete:
            kept.append(folder)
            continue
        if folder.empty and resume and kept:  # nothing to complete: the last complete set is the one
            return _report_complete(kept[-1])
        if not folder.empty and not resume:
            raise HarnessError(
                f"{folder.plan.results_dir} holds an incomplete set: {_done(folder)}; complete it with the same "
                "command and --resume, or start a new set with --results DIR (nothing was changed)"
            )
        if resume:
            check_resumable(folder.plan, existing=not folder.empty)
        pending = [i for i in range(plan.runs) if i not in folder.done]
        return Placement(folder.plan, pending, _where(folder, kept))
    raise AssertionError("the chain of roots is endless")  # pragma: no cover


def _report_complete(folder: SetFolder) -> Placement:
    check_resumable(folder.plan, existing=True)
    return Placement(folder.plan, [], f"{folder.plan.results_dir} holds a complete set ({_done(folder)}): --resume "
                                      "has nothing to run; the set's score and check follow")


def _done(folder: SetFolder) -> str:
    """``1 of 3 runs done, 2 to go``."""
    done, runs = len(folder.done), folder.plan.runs
    return f"{done} of {runs} run{'s' if runs != 1 else ''} done, " + (
        f"{runs - done} to go" if done < runs else "none to go")


def _where(folder: SetFolder, kept: list[SetFolder]) -> str:
    """The line that says where a set that runs goes, and which complete sets it leaves as they are."""
    here = folder.plan.results_dir
    if folder.plan.request.resume:
        if folder.empty:
            return f"--resume: no run of the set is in {here} yet; the set begins there ({_done(folder)})"
        return f"resuming {here}: {_done(folder)}"
    if not kept:
        return f"this set goes to {here}"
    runs = folder.plan.runs
    of = f"a complete set of {runs} run{'s' if runs != 1 else ''}"
    if len(kept) == 1:
        return f"{kept[0].plan.results_dir} holds {of} (kept as it is); this set goes to {here}"
    roots = ", ".join(f"{k.plan.request.results_dir}/" for k in kept)
    return (f"{roots} each hold {of} of {folder.plan.spec.name} on {folder.plan.system} (kept as they are); "
            f"this set goes to {here}")
