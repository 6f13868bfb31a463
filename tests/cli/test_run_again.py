"""`harness run` again and again in one folder, as a new user meets it: a second set beside a complete
one (the next free results root, the first set untouched, the hints at the folder written), an
interrupted set refused naming both ways on, `--resume` saying what is left, a complete set reported
again; and the progress as plain lines, one per evaluation, when the output is not a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.runs import harness, records, result_dir, write_spec


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def again(tmp_path_factory):
    """One folder, five `harness run`s of the tiny benchmark (one or two short runs each), and the
    tree of the first set after each."""
    tmp = tmp_path_factory.mktemp("again")
    spec = str(write_spec(tmp))
    root = tmp / "root"
    root.mkdir()
    steps, trees = {}, {}
    for name, options in [("first", ["--runs", "1"]), ("second", ["--runs", "1"]),  # -> results-2
                          ("short", ["--runs", "2"]),  # results/ holds 1 of 2: refused
                          ("resumed", ["--runs", "2", "--resume"]),  # completes results/
                          ("complete", ["--runs", "1", "--resume"])]:  # results-2/ is complete: its report
        steps[name] = harness("run", "--benchmark", spec, "--seed", "3", "--threads", "1", *options, cwd=root)
        trees[name] = (_tree(root / "results"), _tree(root / "results-2"))
    return root, steps, trees


@pytest.mark.slow
def test_a_second_run_goes_beside_a_complete_set_and_leaves_it_as_it_is(again):
    root, steps, trees = again
    first, second = steps["first"], steps["second"]
    assert first.returncode == 0 and second.returncode == 0, second.stderr[-2000:]
    first_dir = result_dir(root)
    system = first_dir.parent.name
    here = f"results/reference/results/{system}/tiny_synthetic"
    assert f"this set goes to {here}\n" in first.stdout
    assert (f"{here} holds a complete set of 1 run (kept as it is); this set goes to "
            f"results-2/reference/results/{system}/tiny_synthetic\n") in second.stdout
    assert trees["second"][0] == trees["first"][0]  # the first set, byte for byte
    assert (root / "results-2" / "reference" / "results" / system / "tiny_synthetic" / "result_0.txt").is_file()
    # what the end of the output points at is the folder written
    assert f"result logs:        results-2/reference/results/{system}/tiny_synthetic\n" in second.stdout
    assert f"harness report results-2/reference/results/{system}/tiny_synthetic -o report" in second.stdout
    assert "harness leaderboard results-2 -o site" in second.stdout


@pytest.mark.slow
def test_an_incomplete_set_is_refused_naming_both_ways_on(again):
    root, steps, trees = again
    system = result_dir(root).parent.name
    here = f"results/reference/results/{system}/tiny_synthetic"
    short = steps["short"]
    assert short.returncode == 2 and short.stderr.count("\n") == 1 and "Traceback" not in short.stderr
    assert short.stderr == (f"harness: error: {here} holds an incomplete set: 1 of 2 runs done, 1 to go; complete it "
                            "with the same command and --resume, or start a new set with --results DIR "
                            "(nothing was changed)\n")
    assert trees["short"] == trees["second"]


@pytest.mark.slow
def test_resume_says_it_is_resuming_and_how_many_runs_are_left(again):
    root, steps, trees = again
    system = result_dir(root).parent.name
    here = f"results/reference/results/{system}/tiny_synthetic"
    resumed = steps["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming {here}: 1 of 2 runs done, 1 to go\n" in resumed.stdout
    assert "run 2 of 2 (result_1.txt)" in resumed.stdout and "run 1 of 2" not in resumed.stdout
    assert trees["resumed"][0]["reference/results/" + system + "/tiny_synthetic/result_0.txt"] == \
        trees["first"][0]["reference/results/" + system + "/tiny_synthetic/result_0.txt"]


@pytest.mark.slow
def test_resume_of_a_complete_set_says_so_and_reports_it_again(again):
    root, steps, trees = again
    system = result_dir(root).parent.name
    complete = steps["complete"]
    assert complete.returncode == 0, complete.stderr[-2000:]
    assert (f"results-2/reference/results/{system}/tiny_synthetic holds a complete set (1 of 1 run done, none to go): "
            "--resume has nothing to run; the set's score and check follow\n") in complete.stdout
    assert "score: none (" in complete.stdout and "result logs:        results-2/" in complete.stdout
    assert not [line for line in complete.stdout.splitlines() if line.startswith("run ")]  # nothing ran
    assert trees["complete"] == trees["resumed"]  # a report changes nothing
    assert not (root / "results-3").exists()


@pytest.mark.slow
def test_progress_is_plain_lines_one_per_evaluation_when_the_output_is_a_file(again):
    root, steps, _ = again
    first = steps["first"]
    assert "\r" not in first.stdout + first.stderr
    evals = [r for r in records(result_dir(root) / "result_0.txt") if r["key"] == "eval_accuracy"]
    lines = [line for line in first.stdout.splitlines() if line.startswith("  run 1 (result_0.txt), evaluation ")]
    assert len(lines) == len(evals) >= 1, first.stdout
    for n, (line, record) in enumerate(zip(lines, evals), 1):
        epoch = f"{record['metadata']['epoch_num']:.3g}"
        assert line.startswith(f"  run 1 (result_0.txt), evaluation {n} at {epoch} epoch ("), line
        assert f": AUC {record['value']:.5f} " in line and "samples/s" in line
    assert all("< target 0.6; training" in line for line in lines[:-1])
    assert ">= target 0.6: reached, the run ends here; training" in lines[-1]
    assert f"reached the target at {evals[-1]['metadata']['epoch_num']:.3g} epoch, final AUC" in first.stdout
    assert "run 1 of 1 (result_0.txt), seed 3 (chosen): training to AUC 0.6, at most 1 epoch of 32,768 samples\n" \
        in first.stdout


def test_on_a_terminal_the_bar_ends_at_100_percent_where_the_run_reaches_its_target():
    import io

    from harness.cli.run import TerminalReporter
    from harness.rules.seeds import Seed, SeedSource

    drawn = io.StringIO()
    reporter = TerminalReporter(0.6, 1.0, plain=False, bar_file=drawn)
    reporter.run_started(0, 3, Seed(5, SeedSource.USER), 32768)
    reporter.progress(0, {"samples": 4096, "samples_per_s": 1000.0})
    reporter.progress(0, {"samples": 8192, "auc": 0.55, "epoch_num": 0.25, "samples_per_s": 1000.0})
    reporter.progress(0, {"samples": 16384, "auc": 0.61, "epoch_num": 0.5, "samples_per_s": 1000.0})
    last = drawn.getvalue().split("\r")[-1]
    assert "run 1 of 3 (result_0.txt), seed 5 (chosen): 100%|" in last and "16.4k/16.4k samples" in last, last
    assert last.rstrip().endswith("reached the target at 0.5 epoch"), last
    reporter.close()
