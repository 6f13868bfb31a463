"""``harness summarize`` against mlperf_logging's result summarizer (4.1.68), run for real in a subprocess.

Every shared real package, and trees of mutated copies (dropped runs, no scaling.json, several
packages at once), must give the official CSV and JSON files cell for cell (the summary and
the detailed ones: scores, GBS, samples to converge, RCP verdict, scaling factor).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compliance.summarize import NOT_REPRODUCED
from compliance.summarize import summarize as summarize_tree
from harness.cli.summarize import summarize
from harness.errors import ErrorCategory, HarnessError

ROUNDS = ["v0.7", "v1.0", "v2.1", "v3.0", "v3.1", "v4.0", "v4.1", "v5.0"]


def package_of(shared_logs: Path, rnd: str) -> Path:
    found = sorted(p for p in (shared_logs / rnd).iterdir() if (p / "results").is_dir())
    assert len(found) == 1, found
    return found[0]


def official(target: str, version: str, out: Path) -> subprocess.CompletedProcess:
    """The official summarizer on ``target`` (a package, or ``<root>/{*}``), its files at ``out``*."""
    return subprocess.run(
        [sys.executable, "-m", "mlperf_logging.result_summarizer", target, "training", version, "--csv", str(out)],
        capture_output=True, text=True, cwd=out.parent, timeout=600, check=False,
    )


def ours(root: Path, out: Path, *extra: str):
    result = CliRunner().invoke(summarize, [str(root), "--csv", str(out), "--json", str(out.with_suffix(".json")),
                                            *extra])
    assert result.exception is None, result.output
    assert result.exit_code == 0, result.output
    return result


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    return rows[0], rows[1:]


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def assert_same_files(off: Path, mine: Path) -> int:
    """Our four files equal the official ones; returns how many score cells were compared."""
    scores = 0
    for tag in ("", "_detailed"):
        o_head, o_rows = read_csv(off.with_name(f"{off.stem}{tag}.csv"))
        m_head, m_rows = read_csv(mine.with_name(f"{mine.stem}{tag}.csv"))
        assert m_head == o_head
        assert len(m_rows) == len(o_rows)
        for o_row, m_row in zip(o_rows, m_rows):
            for col, o_cell, m_cell in zip(o_head, o_row, m_row):
                assert m_cell == o_cell, (tag, col, o_cell, m_cell)
                if o_cell and (col.endswith(":time_to_train") or (tag == "" and col in BENCHMARK_COLUMNS)):
                    assert float(m_cell) == float(o_cell)
                    scores += 1
        o_json = json.loads(off.with_name(f"{off.stem}{tag}.json").read_text())
        m_json = json.loads(mine.with_name(f"{mine.stem}{tag}.json").read_text())
        assert len(m_json) == len(o_json)
        for o_rec, m_rec in zip(o_json, m_json):
            assert list(m_rec) == list(o_rec)
            for k in o_rec:
                assert m_rec[k] == o_rec[k], (tag, k, o_rec[k], m_rec[k])
    return scores


BENCHMARK_COLUMNS = {"dlrm", "dlrm_dcnv2"}


@pytest.mark.parametrize("rnd", ROUNDS)
def test_every_real_package_gives_the_official_files(shared_logs, rnd, tmp_path):
    src = package_of(shared_logs, rnd)
    version = rnd[1:] + ".0"
    for side in ("off", "ours"):
        shutil.copytree(src, tmp_path / side / rnd / src.name)
    mine_root = tmp_path / "ours" / rnd / src.name
    before = tree_digest(mine_root)
    ours(mine_root, tmp_path / "ours.csv")
    assert tree_digest(mine_root) == before  # reading a tree never changes it
    run = official(str(tmp_path / "off" / rnd / src.name), version, tmp_path / "off.csv")
    assert run.returncode == 0, run.stderr[-2000:]
    # every real package has its score, and it is the official one
    assert assert_same_files(tmp_path / "off.csv", tmp_path / "ours.csv") == 2


def _mutate_runs(pkg: Path, broken: int) -> None:
    """Cut the run_stop line out of the first ``broken`` logs: the summarizer drops those runs."""
    logs = sorted(pkg.glob("results/*/*/result_*.txt"))
    for log in logs[:broken]:
        lines = log.read_text(encoding="latin-1").splitlines(keepends=True)
        log.write_text("".join(l for l in lines if '"run_stop"' not in l), encoding="latin-1")


def _rename_submitter(pkg: Path, submitter: str) -> None:
    desc = next((pkg / "systems").glob("*.json"))
    contents = json.loads(desc.read_text())
    contents["submitter"] = submitter
    desc.write_text(json.dumps(contents, indent=1))


def _rewrite_records(pkg: Path, key: str, change) -> None:
    """Apply ``change`` to the JSON record of every ``key`` line of every log."""
    for log in pkg.glob("results/*/*/result_*.txt"):
        out = []
        for line in log.read_text(encoding="latin-1").splitlines(keepends=True):
            at = line.find(":::MLLOG ")
            if at >= 0 and f'"key": "{key}"' in line:
                record = json.loads(line[at + 9:])
                change(record)
                line = line[: at + 9] + json.dumps(record) + "\n"
            out.append(line)
        log.write_text("".join(out), encoding="latin-1")


def _batch(record: dict) -> None:
    record["value"] = 1 << 20  # above every RCP's batch size


def _fast(record: dict) -> None:
    record["metadata"]["epoch_num"] = record["metadata"]["epoch_num"] / 4  # converging 4x faster than any RCP


def build_tree(shared_logs: Path, root: Path, rnd: str = "v5.0") -> Path:
    """A round folder of packages: the real one, one run dropped, two runs dropped, no scaling.json,
    a batch size no RCP covers, epochs to converge far below the RCP's."""
    src = package_of(shared_logs, rnd)
    base = root / rnd
    for name, broken, scaling, key, change in (("A", 0, True, None, None), ("B", 1, True, None, None),
                                               ("C", 2, True, None, None), ("D", 0, False, None, None),
                                               ("E", 0, True, "global_batch_size", _batch),
                                               ("F", 0, True, "eval_accuracy", _fast)):
        pkg = base / name
        shutil.copytree(src, pkg)
        _rename_submitter(pkg, f"{src.name}-{name}")
        _mutate_runs(pkg, broken)
        if key:
            _rewrite_records(pkg, key, change)
        if not scaling:
            for f in pkg.glob("results/*/*/scaling.json"):
                f.unlink()
    return base


def test_a_folder_of_mutated_packages_gives_the_official_files(shared_logs, tmp_path):
    off_root = build_tree(shared_logs, tmp_path / "off")
    mine_root = build_tree(shared_logs, tmp_path / "ours")
    result = ours(mine_root, tmp_path / "ours.csv")
    run = official(f"{off_root}/{{*}}", "5.0.0", tmp_path / "off.csv")
    assert run.returncode == 0, run.stderr[-2000:]
    # all but C have a score (B from nine runs, D unscaled); C has none
    assert assert_same_files(tmp_path / "off.csv", tmp_path / "ours.csv") == 10
    assert "NOTICE: Dropping non-converged run(s)" in result.stderr
    assert "CRITICAL ERROR: Too many non-converging runs" in result.stderr
    summary = summarize_tree(mine_root)
    by_submitter = {r["submitter"]: r["dlrm_dcnv2"] for r in summary.summary.rows}
    assert by_submitter[f"{package_of(shared_logs, 'v5.0').name}-C"] is None
    assert sum(v is not None for v in by_submitter.values()) == 5
    rcp = {r["submitter"][-1]: r["dlrm_dcnv2:RCP"] for r in summary.detailed.rows}
    assert len(set(rcp.values())) >= 3, rcp  # the mutations reach several RCP verdicts


def test_the_table_shows_each_score(shared_logs, tmp_path):
    pkg = tmp_path / "v4.1" / "Dell"
    shutil.copytree(package_of(shared_logs, "v4.1"), pkg)
    result = CliRunner().invoke(summarize, [str(pkg)])
    assert result.exit_code == 0, result.output
    score = summarize_tree(pkg).summary.rows[0]["dlrm_dcnv2"]
    assert re.search(rf"dlrm_dcnv2\s+{score:.6f}", result.output)
    assert "4.1.0" in result.output


def test_not_reproduced_columns_are_documented():
    assert set(NOT_REPRODUCED) == {"Energy", "samples_to_converge"}


def _invoke_error(args: list[str]) -> HarnessError:
    result = CliRunner().invoke(summarize, args)
    assert isinstance(result.exception, HarnessError), (result.output, result.exception)
    return result.exception


def test_unusable_roots_are_one_line_errors(tmp_path, shared_logs):
    err = _invoke_error([str(tmp_path / "missing")])
    assert err.category is ErrorCategory.NOT_FOUND and err.exit_code == 2
    err = _invoke_error([str(tmp_path)])
    assert err.category is ErrorCategory.BAD_INPUT and "no package" in str(err)
    pkg = tmp_path / "nowhere" / "X"
    shutil.copytree(package_of(shared_logs, "v4.1"), pkg)
    err = _invoke_error([str(pkg)])
    assert "give --ruleset" in str(err)
    err = _invoke_error([str(pkg), "--ruleset", "9.9.9"])
    assert err.category is ErrorCategory.NOT_FOUND
    for e in (err,):
        assert "\n" not in str(e)


@pytest.mark.parametrize("mutation", ["missing_field", "not_an_integer", "unknown_benchmark"])
def test_what_crashes_the_official_summarizer_is_an_error(shared_logs, tmp_path, mutation):
    src = package_of(shared_logs, "v4.1")
    roots = []
    for side in ("off", "ours"):
        pkg = tmp_path / side / "v4.1" / src.name
        shutil.copytree(src, pkg)
        desc = next((pkg / "systems").glob("*.json"))
        contents = json.loads(desc.read_text())
        if mutation == "missing_field":
            del contents["hw_notes"]
        elif mutation == "not_an_integer":
            contents["accelerators_per_node"] = "eight"
        else:
            bench = next(pkg.glob("results/*/*"))
            shutil.copytree(bench, bench.parent / "dlrm_v9")
        desc.write_text(json.dumps(contents))
        roots.append(pkg)
    run = official(str(roots[0]), "4.1.0", tmp_path / "off.csv")
    assert run.returncode != 0 and "Traceback" in run.stderr
    err = _invoke_error([str(roots[1])])
    assert err.category is ErrorCategory.BAD_INPUT and "\n" not in str(err)


def test_summarize_is_torch_free(shared_logs, tmp_path):
    pkg = tmp_path / "v3.0" / "GIGABYTE"  # closed, scaled: every step runs, the RCP check included
    shutil.copytree(package_of(shared_logs, "v3.0"), pkg)
    code = (
        "import sys\n"
        "import harness.cli.summarize\n"
        "from compliance.summarize import summarize\n"
        f"assert summarize({str(pkg)!r}).detailed.rows[0]['dlrm_dcnv2:RCP'] == 'Pass'\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'harness.reference')))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
