"""``harness data export`` and ``harness data inspect`` through the real entry point, on real
files: an exported tiny benchmark inspected (its counts, label rates and distinct values against
the generator's), malformed TSV and npy records (named, exit 2), the inspector's estimates, SIGTERM
during an export, and an export into a full disk."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.reference.data.datasets import SyntheticDataset
from harness.reference.data.inspect import (
    DistinctCounter,
    format_report,
    inspect_dataset,
)
from harness.rules.specs import load_benchmark
from tests.support.disks import tmpfs
from tests.support.runs import harness, write_spec

FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "tiny_benchmark.yaml")
TINY = load_benchmark(FIXTURE)
N, E = 32768, 8192


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def truth() -> dict:
    """What the tiny export holds, from the generator: labels and distinct ids per feature."""
    gen = SyntheticDataset(TINY.dataset).generator
    batch = gen.samples(np.arange(N + 2 * E))
    labels = batch.labels.numpy()
    return {"labels": labels, "distinct": [len(np.unique(batch.sparse[:, f].numpy())) for f in range(26)]}


@pytest.mark.parametrize("fmt,extra", [("criteo-tsv", []), ("criteo-tsv", ["--gzip"]), ("mlperf-npy", [])])
def test_export_then_inspect(tmp_path: Path, capsys, truth, fmt: str, extra: list[str]) -> None:
    out = tmp_path / "tiny"
    code, stdout, stderr = run(capsys, "data", "export", "--benchmark", FIXTURE, "--format", fmt, "--days", "4",
                               *extra, str(out))
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"exporting tiny_synthetic as {fmt} in 4 days (49152 samples) to {out}"
    assert lines[1] == "  day_0: 10923 samples (train), 10923 of 49152 written"
    assert lines[-1].startswith(f"wrote {len(list(out.iterdir()))} files, ")
    assert lines[-1].endswith(f"MiB, to {out}: 32768 train samples in days 0-2, 8192 eval samples in the first "
                              "half of day 3")

    code, stdout, _ = run(capsys, "data", "inspect", "--json", str(out))
    assert code == 0
    report = json.loads(stdout)
    assert (report["format"], report["well_formed"], report["malformed"]) == (fmt, True, None)
    assert [d["samples"] for d in report["days"]] == [10923, 10923, 10922, 2 * E]
    assert (report["samples"], report["train_samples"], report["eval_samples"]) == (N + 2 * E, N, E)
    labels = truth["labels"]
    assert report["label_rate"] == pytest.approx(labels.mean())
    assert report["train_label_rate"] == pytest.approx(labels[:N].mean())
    assert report["eval_label_rate"] == pytest.approx(labels[N : N + E].mean())
    assert [f["distinct"] for f in report["features"]] == truth["distinct"]
    assert not any(f["estimated"] for f in report["features"])
    assert [f["pooling"] for f in report["features"]] == [1] * 26

    code, stdout, _ = run(capsys, "data", "inspect", str(out))
    assert code == 0
    assert f"{out}: {fmt} (" in stdout.splitlines()[0] and "well-formed" in stdout.splitlines()[0]
    assert f"{'eval':<22} {E:>14,} {labels[N : N + E].mean():>12.4%}" in stdout


def test_inspect_names_a_malformed_tsv_line_and_exits_2(tmp_path: Path, capsys) -> None:
    good = "\t".join(["1"] + ["3"] * 13 + ["a1"] * 26)
    (tmp_path / "day_0").write_text("\n".join([good] * 5) + "\n")
    bad = good.replace("\ta1", "\tnot-hex", 1)
    (tmp_path / "day_1.gz").write_bytes(gzip.compress(("\n".join([good, good, bad, good]) + "\n").encode()))
    code, stdout, stderr = run(capsys, "data", "inspect", str(tmp_path))
    assert code == 2
    assert stdout.splitlines()[0] == f"{tmp_path}: criteo-tsv (terabyte layout), MALFORMED"
    assert stdout.splitlines()[-1] == (f"first malformed record: {tmp_path / 'day_1.gz'}:3: categorical feature 0 "
                                       "(field 15) is not a hex string of at most 16 digits: 'not-hex'")
    assert f"{'day_1.gz':<22} {2:>14,}" in stdout  # the two lines before it were read
    assert "harness: error" not in stderr
    report = inspect_dataset(tmp_path)
    assert report.samples == 7 and report.positives == 7 and report.train_samples is None


def test_inspect_names_a_bad_npy_label_and_exits_2(tmp_path: Path, capsys) -> None:
    for d, n in enumerate([6, 4]):
        np.save(tmp_path / f"day_{d}_dense.npy", np.zeros((n, 13), np.float32))
        np.save(tmp_path / f"day_{d}_sparse.npy", np.arange(n * 26, dtype=np.int32).reshape(n, 26))
        np.save(tmp_path / f"day_{d}_labels.npy", np.array([[1]] * n, np.int32))
    report = inspect_dataset(tmp_path)
    assert report.well_formed and (report.train_samples, report.eval_samples) == (6, 2)
    assert (report.train_label_rate, report.eval_label_rate) == (1.0, 1.0)
    assert report.cardinality[0] == 6  # day 1 repeats day 0's ids
    np.save(tmp_path / "day_1_labels.npy", np.array([[1], [0], [7], [1]], np.int32))
    code, stdout, _ = run(capsys, "data", "inspect", str(tmp_path))
    assert code == 2
    assert f"first malformed record: {tmp_path / 'day_1_labels.npy'}: row 2: label 7 is not 0 or 1" in stdout
    report = inspect_dataset(tmp_path)
    assert report.samples == 8 and report.positives == 7


def test_inspect_splits_kaggle_into_seven_parts(tmp_path: Path) -> None:
    good = "\t".join(["0"] + [""] * 13 + [""] * 26)
    one = "1" + good[1:]
    (tmp_path / "train.txt").write_text("\n".join([one if i % 4 == 0 else good for i in range(30)]) + "\n")
    report = inspect_dataset(tmp_path / "train.txt")
    assert [n for _, n in report.days] == [5, 5, 4, 4, 4, 4, 4]  # divmod(30, 7) = (4, 2)
    assert (report.train_samples, report.eval_samples) == (26, 2)
    assert report.train_positives == 7 and report.eval_positives == 0  # lines 0, 4, .., 24; then 26, 27
    assert report.cardinality == (1,) * 26  # every value is the empty string, read as 0
    assert "train.txt part 6" in format_report(report)


def test_distinct_counts_are_exact_then_estimated() -> None:
    counter = DistinctCounter(exact_limit=1000)
    counter.add(np.arange(600, dtype=np.uint64))
    counter.add(np.arange(300, 900, dtype=np.uint64))
    assert counter.count() == 900 and not counter.estimated
    for a in range(0, 200_000, 50_000):
        counter.add(np.arange(a, a + 50_000, dtype=np.uint64))
        counter.add(np.arange(a, a + 50_000, dtype=np.uint64))  # duplicates change nothing
    assert counter.estimated
    assert counter.count() == pytest.approx(200_000, rel=0.03)
    small = DistinctCounter(exact_limit=10)
    small.add(np.arange(500, dtype=np.uint64) * 7919)
    assert small.count() == pytest.approx(500, rel=0.05)


def test_errors_are_one_line_with_exit_code_2(tmp_path: Path, capsys) -> None:
    code, stdout, stderr = run(capsys, "data", "inspect", str(tmp_path / "nowhere"))
    assert (code, stdout) == (2, "")
    assert stderr == f"harness: error: {tmp_path / 'nowhere'}: no such file or folder\n"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    code, stdout, stderr = run(capsys, "data", "export", "-b", FIXTURE, "--format", "mlperf-npy",
                               str(tmp_path / "full"))
    assert (code, stdout) == (2, "")
    assert stderr == (f"harness: error: {tmp_path / 'full'} exists and is not an empty folder: give a new one "
                      "(nothing was written)\n")
    code, _, stderr = run(capsys, "data", "export", "-b", "dlrm", "--format", "criteo-tsv", str(tmp_path / "o"))
    assert code == 2 and stderr.count("\n") == 1 and "only a synthetic benchmark" in stderr
    code, _, stderr = run(capsys, "data", "export", "-b", "dlrm-v3", str(tmp_path / "o"))  # inference requests only
    assert code == 2 and stderr.count("\n") == 1 and "harness data export is for MLPerf Training benchmarks" in stderr
    code, _, stderr = run(capsys, "data", "export", "-b", FIXTURE, "--format", "csv", str(tmp_path / "o"))
    assert code == 2
    assert "data export: --format: 'csv' is not one of 'criteo-tsv', 'mlperf-npy', 'yambda-parquet'" in stderr
    assert not (tmp_path / "o").exists()


def test_sigterm_stops_an_export_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM (or Ctrl-C) during an export: exit 143, one line, neither the folder nor its partial copy."""
    import signal
    import subprocess
    import sys
    import time

    from tests.support.runs import write_spec

    spec = write_spec(tmp_path, **{"dataset.train_samples": 4_000_000})
    out = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "data", "export", "-b", str(spec), "--format",
                             "criteo-tsv", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert first.startswith("exporting "), first + proc.stderr.read()
    time.sleep(1.0)  # writing day 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".data.partial-")]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err == (f"harness: error: interrupted by SIGTERM: nothing was exported to {out} (the partial copy is "
                   "removed); run the same command again\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.name]


def test_event_streams_export_as_yambda_and_inspect(tmp_path: Path, capsys, monkeypatch) -> None:
    import yaml

    from tests.reference.data.test_yambda import tiny_raw

    monkeypatch.setenv("HARNESS_DATA_CACHE", str(tmp_path / "cache"))
    spec_file = tmp_path / "tiny_events.yaml"
    spec_file.write_text(yaml.safe_dump(tiny_raw()))
    out = tmp_path / "yambda"
    code, stdout, stderr = run(capsys, "data", "export", "-b", str(spec_file), str(out))
    assert code == 0, stderr
    assert stdout.splitlines()[-1].endswith("of 128 users in Yambda's flat layout")
    assert sorted(p.name for p in out.iterdir()) == ["album_item_mapping.parquet", "artist_item_mapping.parquet",
                                                     "harness_export.json", "multi_event.parquet"]
    code, stdout, _ = run(capsys, "data", "inspect", "--json", "-b", str(spec_file), str(out))
    report = json.loads(stdout)
    assert code == 0 and report["well_formed"] and report["layout"] == "flat" and report["users"] == 128
    assert (report["cut"]["train_samples"], report["cut"]["eval_samples"]) == (400, 24)
    code, stdout, _ = run(capsys, "data", "inspect", str(out))
    assert code == 0 and "Yambda parquet (flat layout), well-formed" in stdout.splitlines()[0]
    # a tabular format for event streams, and a Yambda folder with a broken file: one line / the report, exit 2
    code, stdout, stderr = run(capsys, "data", "export", "-b", str(spec_file), "--format", "mlperf-npy",
                               str(tmp_path / "o"))
    assert (code, stdout) == (2, "") and stderr.count("\n") == 1 and "export as yambda-parquet" in stderr
    (out / "multi_event.parquet").write_bytes(b"PAR1 not really")
    code, stdout, _ = run(capsys, "data", "inspect", str(out))
    assert code == 2 and "first malformed: " in stdout and "multi_event.parquet: not a readable parquet file" in stdout


SIGNAL_DURING_IMPORT = """
import os, signal, sys, threading, time
from harness.process import stop_on_signals
stop_on_signals(signal.SIGINT, signal.SIGTERM)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()  # torch's import takes seconds
try:
    import torch
    sys.stdout.write("imported\\n")  # one write: the signal, sent again once the import is done, may land anywhere after it
    time.sleep(30)
except KeyboardInterrupt as err:
    done = "torch" in sys.modules and not getattr(sys.modules["torch"].__spec__, "_initializing", True)
    print("interrupted", err.signum, "import done" if done else "import cut short", flush=True)
    sys.exit(143)
"""


def test_a_signal_during_torchs_import_stops_the_command_once_the_import_is_done() -> None:
    """What made the export's SIGTERM test fail once: a signal while a command imported torch
    raised inside torch's C++ initialisation, which aborted the process (pybind11's
    error_already_set, exit -6). The handler lets the import end, then stops the command as
    usual (the test's own except clause standing in for the CLI's)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", SIGNAL_DURING_IMPORT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stdout + proc.stderr[-3000:]
    # the signal comes back when the import has ended: before or after the script's own line
    assert proc.stdout.splitlines()[-1] == "interrupted 15 import done", proc.stdout
    assert proc.stdout.splitlines()[:-1] in ([], ["imported"]), proc.stdout


# -- the machine's own faults (a real tmpfs, as root), as `harness run` meets them in
# tests/cli/test_run.py: a disk too small for an export, or for `harness leaderboard`
def test_an_export_or_a_leaderboard_into_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, shared_logs):
    """Other writers: `harness data export` and `harness leaderboard` into a tmpfs too small for
    them fail in one line (exit 5) and leave nothing of theirs behind."""
    spec = write_spec(tmp_path)
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        export = harness("data", "export", "--benchmark", str(spec), "--format", "criteo-tsv", "--days", "2",
                         str(disk / "data"), cwd=tmp_path)
        assert export.returncode == 5, export.stderr[-2000:]
        [line] = export.stderr.strip().splitlines()
        assert line.startswith("harness: error: ") and "No space left on device" in line and "Traceback" not in line
        assert not list(disk.iterdir())  # neither the data folder nor its temporary sibling
        board = harness("leaderboard", str(shared_logs), "-o", str(disk / "site"), cwd=tmp_path)
        assert board.returncode == 5, board.stderr[-2000:]
        assert board.stderr.strip().splitlines()[-1].startswith("harness: error: ") and "Traceback" not in board.stderr
        assert not [p for p in disk.rglob("*") if ".tmp" in p.name]


def test_inspect_is_a_gate_for_the_benchmark_named(capsys, tmp_path, monkeypatch):
    """Yambda's published layout at the reference's largest ids: without --benchmark a report and exit 0;
    with --benchmark dlrmv4 the report, then the one reason it cannot serve the benchmark, exit 2; a
    dataset root is read at --scale."""
    from tests.reference.data.test_yambda_layouts import write_published

    monkeypatch.setenv("HARNESS_DATA_CACHE", str(tmp_path / "cache"))
    folder = write_published(tmp_path / "yambda")
    code, out, _ = run(capsys, "data", "inspect", str(folder))
    assert code == 0 and "(flat layout, scale 50m), well-formed" in out
    code, out, err = run(capsys, "data", "inspect", str(folder), "--benchmark", "dlrmv4")
    assert code == 2 and out.splitlines()[-1].startswith("the benchmark cannot be served from it: ")
    error = err.splitlines()[-1]  # after the files' progress lines
    assert error.startswith("harness: error: ") and err.count("harness: error") == 1
    assert "train_samples" in error and "give a larger Yambda scale" in error
    code, out, err = run(capsys, "data", "inspect", str(tmp_path / "yambda"), "--scale", "50m", "--benchmark", "dlrmv4")
    assert code == 2 and "(flat layout, scale 50m)" in out and "train_samples" in err
