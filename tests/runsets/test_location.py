"""Where a run set goes (:mod:`harness.runsets.location`): the chain of results roots beside
``--results`` (complete sets passed over, kept as they are; the first incomplete one stops the walk),
the same set found with and without ``--resume``. No run is trained: the result files are made up."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.runs import FIXTURE


@pytest.fixture
def plan(tmp_path):
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import RunSetRequest

    return plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="local", results_dir=tmp_path / "r", runs=2))


def _finish(plan, root: Path, *indices: int) -> Path:
    """Made-up finished runs of ``plan``'s set under ``root``, recorded in its manifest."""
    from harness.rules.seeds import Seed, SeedSource
    from harness.runsets.location import set_folder
    from harness.runsets.manifest import begin_manifest, record_run

    at = set_folder(plan, root).plan
    manifest = begin_manifest(at)
    for i in indices:
        at.result_path(i).parent.mkdir(parents=True, exist_ok=True)
        at.result_path(i).write_text("made up\n")
        record_run(at, manifest, i, Seed(i, SeedSource.USER))
    return at.results_dir


def test_complete_sets_are_passed_over_and_the_first_incomplete_one_is_the_set_resumed(plan, tmp_path):
    import dataclasses

    from harness.errors import HarnessError
    from harness.runsets.location import chain, place_run_set

    r = tmp_path / "r"
    assert [p.name for p, _ in zip(chain(r), range(3))] == ["r", "r-2", "r-3"]
    assert [p for p, _ in zip(chain(Path(".")), range(2))] == [Path("."), Path.cwd().with_name(Path.cwd().name + "-2")]
    first = place_run_set(plan)
    assert (first.pending, first.said) == ([0, 1], f"this set goes to {plan.results_dir}")
    full_1, full_2 = _finish(plan, r, 0, 1), _finish(plan, tmp_path / "r-2", 0, 1)
    third = place_run_set(plan)
    assert third.plan.request.results_dir == tmp_path / "r-3" and third.pending == [0, 1]
    assert third.said == (f"{r}/, {tmp_path / 'r-2'}/ each hold a complete set of 2 runs of tiny_synthetic on "
                          f"{plan.system} (kept as they are); this set goes to {third.plan.results_dir}")
    resume = dataclasses.replace(plan, request=dataclasses.replace(plan.request, resume=True))
    complete = place_run_set(resume)
    assert complete.pending == [] and complete.plan.results_dir == full_2
    assert complete.said.startswith(f"{full_2} holds a complete set (2 of 2 runs done, none to go): --resume has")
    broken = _finish(plan, tmp_path / "r-3", 1)
    with pytest.raises(HarnessError, match=f"^{broken} holds an incomplete set: 1 of 2 runs done, 1 to go; "):
        place_run_set(plan)
    resumed = place_run_set(resume)
    assert (resumed.plan.results_dir, resumed.pending) == (broken, [0])
    assert resumed.said == f"resuming {broken}: 1 of 2 runs done, 1 to go"
    assert sorted(p.name for p in full_1.iterdir()) == ["result_0.txt", "result_1.txt"]
