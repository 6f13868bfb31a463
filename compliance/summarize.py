"""``harness summarize``: the MLPerf result summarizer's table for a results tree, torch-free.

Restates ``mlperf_logging.result_summarizer`` (4.1.68) for MLPerf Training packages
(``<package>/systems/<system>.json`` + ``<package>/results/<system>/<benchmark>/result_*.txt``),
so that a submitter can compare our numbers with the official tool's:

- **summary** (the official ``--csv out.csv`` file and ``out.json``): one row per system folder
  of ``results/`` whose description loads, with the columns ``division, availability,
  submitter, system, number_of_nodes, host_processor_model_name, host_processors_count,
  accelerator_model_name, accelerators_count, framework, notes, private_id``, one column per
  benchmark of the round (``mlperf_logging.benchmark_meta``), then ``details_url, code_url``;
- **detailed** (``out_detailed.csv`` / ``out_detailed.json``): the same with, per benchmark,
  ``time_to_train, Energy, GBS, samples_to_converge, RCP, rcp_scaling_factor``.

A benchmark's score is the summarizer's: a run counts when its log passes the round's
compliance rules (:func:`compliance.engine.check_parsed`, our restatement of MLPerf's
compliance checker) and has a run_start and a run_stop; its minutes are
``(run_stop - run_start) / 60 / 1000``; the olympic mean drops the fastest run and the
slowest unless a failed run is already out (4 each for unet3d); more failed runs than that
give no score; the mean is multiplied by ``scaling.json``'s ``scaling_factor``.

The ``RCP`` cell is the RCP checker's verdict (``Pass``, ``Fail``, ``Interp. Fail``,
``Missing``, ``No RCP``, ``Unknown state``) from :func:`harness.rules.rcp.evaluate` on the
round's pruned RCPs as mlperf_logging ships them, with the epochs to converge read as the
RCP checker reads them. Columns this module does not reproduce (:data:`NOT_REPRODUCED`):
``Energy`` (power logs under ``<benchmark>/power/``) is left empty, with a note when a power
folder exists; for stable_diffusion (epochs from FID/CLIP pairs) ``GBS``,
``samples_to_converge`` and ``RCP`` are left empty.
The official ``--generate_private_ids`` (random ids written into the package) is not offered;
an existing ``results/<system>/privateid.json`` is read as there.

Reading a tree never changes it (the official tool rewrites or deletes ``scaling.json`` while
it runs its RCP check). Whatever the official tool would crash on (a description lacking a
field it needs, a benchmark folder the round does not know, a count that is not an integer)
raises :class:`HarnessError` naming the file.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from mlperf_logging.benchmark_meta import get_allowed_benchmarks

from compliance.engine import check_parsed, ruleset_names
from harness.errors import ErrorCategory, HarnessError
from harness.mllog import keys
from harness.mllog.reader import ParseProblem, iter_lines, mllog_text, parse_log, parse_object
from harness.rules.rcp import Verdict, evaluate, load_rcps, prune, submission_runs

USAGE = "training"

# The summarizer's columns before and after the benchmarks, in its order, with its dtypes.
PREFIX_COLUMNS: tuple[tuple[str, type], ...] = (
    ("division", str),
    ("availability", str),
    ("submitter", str),
    ("system", str),
    ("number_of_nodes", str),
    ("host_processor_model_name", str),
    ("host_processors_count", int),
    ("accelerator_model_name", str),
    ("accelerators_count", int),
    ("framework", str),
    ("notes", str),
    ("private_id", str),
)
SUFFIX_COLUMNS: tuple[tuple[str, type], ...] = (("details_url", str), ("code_url", str))
DETAILED_METRICS: tuple[tuple[str, type], ...] = (
    ("time_to_train", float),
    ("Energy", float),
    ("GBS", float),
    ("samples_to_converge", float),
    ("RCP", str),
    ("rcp_scaling_factor", float),
)
SORT_COLUMNS = ("division", "system", "accelerator_model_name", "framework", "accelerators_count")

# Columns written but not computed as the official tool does, and why.

# The rounds whose RCP checker runs (mlperf_logging.rcp_checker.RCP_Checker); for others the
# summarizer's RCP step raises, and GBS / samples_to_converge stay empty.
RCP_RULESETS = frozenset({"1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0",
                          "5.1.0", "6.0.0", "6.1.0"})

# The benchmarks the RCP checker has reference points for (its submission_runs table); for a
# set whose logs name another (or none), its RCP step raises and GBS stays empty too.
# (not "dlrm": the v0.7-v2.1 DLRM sets get no GBS there, whatever the round).
RCP_BENCHMARKS = frozenset({"bert", "dlrm_dcnv2", "gpt3", "maskrcnn", "resnet", "ssd", "retinanet", "unet3d",
                            "rnnt", "stable_diffusion", "gnn", "rgat", "llama2_70b_lora", "flux1", "llama31_405b",
                            "llama31_8b", "gpt_oss_20b", "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"})
# Benchmarks whose epochs to converge the RCP checker reads from eval_accuracy's samples_count
# (not its epoch_num, rounded to 3 places, as for the others).
SAMPLES_COUNT_BENCHMARKS = frozenset({"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                                      "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"})
# ... and from FID/CLIP pairs: not reproduced (GBS, samples_to_converge and RCP left empty, with a note).
OTHER_EPOCH_BENCHMARKS = frozenset({"stable_diffusion"})

NOT_REPRODUCED: dict[str, str] = {
    "Energy": "power logs (<benchmark>/power/) are not summarized; left empty",
    "samples_to_converge": "left empty (with GBS and RCP) for the benchmarks whose epochs the RCP checker reads from "
                           "FID/CLIP pairs: " + ", ".join(sorted(OTHER_EPOCH_BENCHMARKS)),
}

RESULT_GLOB = "result_*.txt"
_ROUND = re.compile(r"^v(\d+)\.(\d+)$")


@dataclass
class Table:
    columns: list[str]
    rows: list[dict[str, Any]]

    def csv_text(self) -> str:
        """The table as pandas' ``to_csv(index=False)`` writes it (NaN/None empty, floats by repr)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        for row in self.rows:
            writer.writerow([_csv_cell(row[c]) for c in self.columns])
        return out.getvalue()

    def json_records(self) -> list[dict[str, Any]]:
        """The rows as the summarizer's JSON file holds them (pandas' ``to_json``: 10 decimals, NaN null)."""
        return [{c: _json_cell(row[c]) for c in self.columns} for row in self.rows]

    def json_text(self) -> str:
        return json.dumps(self.json_records(), indent=2)


@dataclass
class Summary:
    ruleset: str  # the round, e.g. "3.0.0"
    summary: Table
    detailed: Table
    notes: list[str] = field(default_factory=list)  # what the official tool prints on the way


# ---- where, and under which round ---------------------------------------------------------------

def is_package(path: Path) -> bool:
    """A submitter's folder: it has ``systems/`` and ``results/`` (the summarizer's own test)."""
    return path.is_dir() and (path / "systems").exists() and (path / "results").exists()


def packages_under(root: Path) -> list[Path]:
    """``root`` itself when it is a package, else its sub-folders that are (as ``{*}`` there)."""
    root = Path(root)
    if not root.exists():
        raise HarnessError(f"{root} does not exist", ErrorCategory.NOT_FOUND)
    if not root.is_dir():
        raise HarnessError(f"{root} is not a folder (give a package: systems/ + results/, or a folder of them)",
                           ErrorCategory.BAD_INPUT)
    if is_package(root):
        return [root]
    found = [root / name for name in sorted(os.listdir(root)) if is_package(root / name)]
    if not found:
        raise HarnessError(f"{root}: no package here (a folder with systems/ and results/, or a folder of them)",
                           ErrorCategory.BAD_INPUT)
    return found


def choose_round(root: Path, explicit: str | None) -> str:
    """The round's version (``"3.0.0"``): ``explicit`` (``3.0.0``, ``training_3.0.0``, ``v3.0``), else a vNN.N folder."""

    known = ruleset_names()
    if explicit:
        text = explicit.strip()
        m = re.fullmatch(r"(?:training_|v)?(\d+)\.(\d+)(?:\.(\d+))?", text)
        if m:
            version = f"{m.group(1)}.{m.group(2)}.{m.group(3) or 0}"
            if f"training_{version}" in known:
                return version
        raise HarnessError(f"unknown MLPerf Training round {explicit!r} (known: "
                           f"{', '.join(n.split('_', 1)[1] for n in known if n.startswith('training_'))})",
                           ErrorCategory.NOT_FOUND)
    for part in reversed(Path(os.path.abspath(root)).parts):
        m = _ROUND.match(part)
        if m:
            version = f"{m.group(1)}.{m.group(2)}.0"
            if f"training_{version}" in known:
                return version
            raise HarnessError(f"{root}: round folder {part} is not a round the checker knows; give --ruleset",
                               ErrorCategory.NOT_FOUND)
    raise HarnessError(f"{root}: cannot tell the round (no vNN.N folder in the path); give --ruleset",
                       ErrorCategory.BAD_INPUT)


def allowed_benchmarks(ruleset: str) -> list[str]:
    """The benchmarks of round ``ruleset``, in the summarizer's column order."""

    try:
        return list(get_allowed_benchmarks(USAGE, ruleset))
    except ValueError as err:
        raise HarnessError(str(err), ErrorCategory.NOT_FOUND) from None


def _columns(benchmarks: list[str], detailed: bool) -> list[tuple[str, type]]:
    middle: list[tuple[str, type]] = []
    for b in benchmarks:
        if detailed:
            middle.extend((f"{b}:{m}", t) for m, t in DETAILED_METRICS)
        else:
            middle.append((b, float))
    # a dict, as the summarizer's schema is: a benchmark listed twice (4.0's stable_diffusion) is one column
    return list(dict(list(PREFIX_COLUMNS) + middle + list(SUFFIX_COLUMNS)).items())


# ---- one run set --------------------------------------------------------------------------------

@dataclass
class RunSetScore:
    benchmark: str
    minutes: list[float]  # each counted run's minutes, sorted
    dropped: int
    score: float | None
    scaling_factor: Any
    gbs: float | None = None
    samples_to_converge: float | None = None
    rcp: str = ""


def _result_files(folder: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(os.path.join(glob.escape(str(folder)), RESULT_GLOB)))


def _run_minutes(path: Path, ruleset_name: str) -> float | None:
    """The run's minutes, or None when the summarizer would drop it (not compliant, no start/stop)."""

    log = parse_log(path)
    if log.unreadable or not check_parsed(log, ruleset_name).passed:
        return None
    start = stop = None
    for record in log.records:  # the summarizer's loop: stop at the first point both are known
        if record.key == keys.RUN_START:
            start = record.time_ms
        if record.key == keys.RUN_STOP:
            stop = record.time_ms
        if start is not None and stop is not None:
            break
    if start is None or stop is None:
        return None
    return (float(stop) - float(start)) / 60 / 1000


def olympic_average(scores: list[float], dropped: int, max_dropped: int) -> float | None:
    """``_compute_olympic_average``: sort, drop ``max_dropped`` from the bottom, ``max_dropped - dropped`` from the top.

    The same arithmetic as :func:`harness.rules.scoring.olympic_score`, kept here bit for bit
    (minutes as ``ms / 60 / 1000``, the sum over the sorted runs), and returning None where
    that raises.
    """
    scores = sorted(scores)
    counted = scores[max_dropped: len(scores) - (max_dropped - dropped)]
    if not counted:
        return None
    return sum(counted) * 1.0 / len(counted)


def read_scaling_factor(folder: Path) -> Any:
    path = folder / "scaling.json"
    if not path.is_file():
        return 1.0
    try:
        contents = json.loads(path.read_text(encoding="utf-8"))
        value = contents["scaling_factor"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise HarnessError(f"{path}: not a scaling file ({type(err).__name__}: {err})", ErrorCategory.BAD_INPUT) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HarnessError(f"{path}: scaling_factor {value!r} is not a number", ErrorCategory.BAD_INPUT)
    return value


def _submission_epochs(files: list[Path]) -> tuple[Any, list[float] | None]:
    """``rcp_checker.get_submission_epochs`` for DLRM: (batch size, each run's epochs to converge or 1e9)."""

    def record(line_no: int, text: str) -> dict[str, Any]:
        # the official checker json-loads a line only where a key's name occurs in it (and fails
        # the step on a line that is not a record); parsed here by the one MLLOG reader
        obj = parse_object(line_no, text)
        if isinstance(obj, ParseProblem):
            raise ValueError(f"line {line_no}: {obj.message}")
        return obj

    bs: Any = -1
    benchmark: Any = None
    epochs: list[float] = []
    not_converged = 0
    for path in files:
        run_bs: Any = -1
        run_benchmark: Any = None
        run_epochs: float = 1e9
        run_failed = 1
        conv_epoch: Any = None
        for line in iter_lines(path):
            text = mllog_text(line)
            n = line.lineno
            if text is None:
                continue
            if keys.GLOBAL_BATCH_SIZE in text:
                run_bs = record(n, text)["value"]
            if keys.SUBMISSION_BENCHMARK in text:
                run_benchmark = record(n, text)["value"]
            if run_benchmark in OTHER_EPOCH_BENCHMARKS and (keys.EVAL_ERROR in text or keys.EVAL_ACCURACY in text):
                raise ValueError(f"the epochs to converge of {run_benchmark} are not reproduced here")
            elif run_benchmark in SAMPLES_COUNT_BENCHMARKS and (keys.EVAL_ERROR in text or keys.EVAL_ACCURACY in text):
                conv_epoch = record(n, text)["metadata"][keys.SAMPLES_COUNT]
            elif keys.EVAL_ERROR in text or keys.EVAL_ACCURACY in text:
                conv_epoch = round(record(n, text)["metadata"][keys.EPOCH_NUM], 3)
            if keys.RUN_STOP in text and record(n, text)["key"] == keys.RUN_STOP:
                if record(n, text)["metadata"][keys.STATUS] == keys.SUCCESS:
                    if conv_epoch is None:  # there: an unbound local, so the whole step fails
                        raise ValueError(f"{path.name}: run_stop success before any eval_accuracy")
                    run_failed, run_epochs = 0, conv_epoch
                else:
                    run_failed, run_epochs = 1, 1e9
        epochs.append(run_epochs)
        not_converged += run_failed
        if bs == -1:
            bs = run_bs
        elif run_bs != bs:  # there: (-1, None, None), and then the RCP checker fails on benchmark None
            raise ValueError("the logs' global_batch_size differ")
        if benchmark is None:
            benchmark = run_benchmark
        elif run_benchmark != benchmark:
            raise ValueError("the logs' submission_benchmark differ")
    if benchmark not in RCP_BENCHMARKS:  # there: RCP_Checker has no RCPs for it and raises
        raise ValueError(f"no RCPs for benchmark {benchmark!r}")
    max_failed = 4 if benchmark == "unet3d" else 1
    return bs, (None if not_converged > max_failed else epochs)


def summarize_run_set(folder: Path, benchmark: str, ruleset: str, *, closed: bool,
                  notes: list[str] | None = None, who: str = "") -> RunSetScore:
    """The summarizer's numbers for ``results/<system>/<benchmark>/`` under round ``ruleset``."""
    notes = notes if notes is not None else []
    minutes: list[float] = []
    dropped = 0
    for path in _result_files(folder):
        m = _run_minutes(path, f"training_{ruleset}")
        if m is None:
            dropped += 1
        else:
            minutes.append(m)
    max_dropped = 4 if benchmark == "unet3d" else 1
    if dropped > max_dropped:
        notes.append(f"CRITICAL ERROR: Too many non-converging runs for {who}/{benchmark}: "
                     f"{dropped} dropped, at most {max_dropped} may be")
    elif dropped >= 1:
        notes.append(f"NOTICE: Dropping non-converged run(s) for {who}/{benchmark} using olympic scoring.")
    scaling = read_scaling_factor(folder)
    score = None
    if dropped <= max_dropped:
        avg = olympic_average(minutes, dropped, max_dropped)
        if avg is not None:
            score = avg * scaling
    result = RunSetScore(benchmark, sorted(minutes), dropped, score, scaling)
    if (folder / "power").is_dir():
        notes.append(f"{who}/{benchmark}: power logs are not summarized (Energy left empty)")
    if closed and ruleset in RCP_RULESETS:
        try:
            rcps = _official_rcps(ruleset, benchmark)
            bs, epochs = _submission_epochs(_result_files(folder))
            result.rcp = _rcp_verdict(benchmark, bs, epochs, rcps)
            result.gbs = float(bs)
            if epochs is not None:
                epochs.sort()
                if len(epochs) >= 3:
            
                    result.samples_to_converge = float(np.mean(epochs[1: len(epochs) - 1]))
        except (OSError, ValueError, KeyError, TypeError, IndexError, HarnessError) as err:
            notes.append(f"WARNING: RCP/GBS computation failed for {folder}: {type(err).__name__}: {err}")
    return result


def _official_rcps(ruleset: str, benchmark: str) -> list[Any]:
    """The round's pruned RCPs as mlperf_logging ships them (not the harness's own file); ValueError if none."""


    path = resources.files("mlperf_logging.rcp_checker").joinpath(f"{USAGE}_{ruleset}", f"rcps_{benchmark}.json")
    if not path.is_file():
        raise ValueError(f"no RCP file training_{ruleset}/rcps_{benchmark}.json")
    return prune(load_rcps(path, benchmark=benchmark), submission_runs=submission_runs(benchmark))


def _rcp_verdict(benchmark: str, bs: Any, epochs: list[float] | None, rcps: list[Any]) -> str:
    """The summarizer's RCP cell: ``Pass``, or what ``check_directory``'s message says went wrong."""

    if bs == -1 or epochs is None:  # 'Could not detect global_batch_size', 'Insufficient convergence'
        return "Unknown state"
    check = evaluate(benchmark, bs, list(epochs), rcps, submission_runs=submission_runs(benchmark))
    if check.verdict is Verdict.PASS:
        return "Pass"
    if check.message == "RCP found":
        return "Fail"
    if check.message == "RCP Interpolation":
        return "Interp. Fail"
    if "Missing" in check.message:
        return "Missing"
    if check.message == "Cannot find any RCPs":
        return "No RCP"
    return "Unknown state"


# ---- one package --------------------------------------------------------------------------------

def _short_ruleset(ruleset: str) -> str:
    return ruleset[:3] + ruleset[3:].replace(".0", "")


def _url_prefix(ruleset: str) -> str:
    return f"https://github.com/mlcommons/{USAGE}_results_v{_short_ruleset(ruleset)}"


def _need(desc: dict[str, Any], path: Path, *keys: str) -> None:
    for key in keys:
        if key not in desc:
            raise HarnessError(f"{path}: field {key!r} missing (the result summarizer needs it)", ErrorCategory.BAD_INPUT)


def _system_specs(desc: dict[str, Any], path: Path) -> dict[str, Any]:
    """The prefix of a row, as ``summarize_results`` builds it from the description."""
    _need(desc, path, "division", "status", "submitter", "system_name", "host_processor_model_name", "number_of_nodes",
          "host_processor_core_count", "host_processors_per_node", "accelerator_model_name", "accelerators_per_node",
          "framework", "hw_notes", "sw_notes")
    try:
        name = desc["system_name"]
        framework = desc["framework"]
        accel = desc["accelerator_model_name"]
        if name == "tpu-v3":
            name = f"TPUv3.{int(desc['accelerators_per_node']) * 2}"
        if accel == "tpu-v3":
            accel = "TPUv3"
        if "TensorFlow" in framework:
            commit = re.search(r" commit hash = .*", framework)
            if commit:
                framework = framework.replace(commit.group(0), "")
        return {
            "division": desc["division"],
            "availability": desc["status"],
            "submitter": desc["submitter"],
            "system": name,
            "host_processor_model_name": desc["host_processor_model_name"],
            "number_of_nodes": desc["number_of_nodes"],
            "host_processors_count": int(desc["host_processors_per_node"]) * int(desc["number_of_nodes"]),
            "accelerator_model_name": accel,
            "accelerators_count": int(desc["accelerators_per_node"]) * int(desc["number_of_nodes"]),
            "framework": framework,
            "notes": ";".join(s for s in (desc["hw_notes"], desc["sw_notes"]) if s),
        }
    except (TypeError, ValueError) as err:
        raise HarnessError(f"{path}: {type(err).__name__}: {err} (the result summarizer cannot use this description)",
                           ErrorCategory.BAD_INPUT) from None


def _load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def summarize_package(package: Path, ruleset: str, notes: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The package's summary rows and detailed rows (one per system folder whose description loads)."""
    benchmarks = allowed_benchmarks(ruleset)
    rows: list[dict[str, Any]] = []
    detailed_rows: list[dict[str, Any]] = []
    results = package / "results"
    system_dirs = [results / n for n in sorted(os.listdir(results)) if (results / n).is_dir()] if results.is_dir() else []
    for system_dir in system_dirs:
        system = system_dir.name
        desc_path = package / "systems" / f"{system}.json"
        if not desc_path.exists():
            notes.append(f"ERROR: Missing {desc_path}")
            continue
        try:
            desc = _load_json(desc_path)
        except ValueError as err:
            notes.append(f"ERROR: Could not decode JSON struct in {desc_path}: {err}")
            continue
        if not isinstance(desc, dict):
            raise HarnessError(f"{desc_path}: a system description is a JSON object", ErrorCategory.BAD_INPUT)
        private_id = ""
        id_path = system_dir / "privateid.json"
        if id_path.exists():
            try:
                ids = _load_json(id_path)
            except ValueError as err:
                raise HarnessError(f"{id_path}: not JSON ({err})", ErrorCategory.BAD_INPUT) from None
            if isinstance(ids, dict) and "private_id" in ids:
                private_id = ids["private_id"]
        specs = _system_specs(desc, desc_path)
        specs["private_id"] = private_id
        who = f"{desc['submitter']} {system}"
        scores: dict[str, Any] = {b: None for b in benchmarks}
        detailed: dict[str, Any] = {}
        for b in benchmarks:
            for metric, dtype in DETAILED_METRICS:
                detailed[f"{b}:{metric}"] = "" if dtype is str else None
        for bench_dir in [system_dir / n for n in sorted(os.listdir(system_dir)) if (system_dir / n).is_dir()]:
            benchmark = "maskrcnn" if bench_dir.name == "mask" else bench_dir.name
            if benchmark not in benchmarks:
                raise HarnessError(f"{bench_dir}: {benchmark!r} is not a benchmark of MLPerf Training {ruleset} "
                                   f"({', '.join(benchmarks)}); the result summarizer has no column for it",
                                   ErrorCategory.BAD_INPUT)
            s = summarize_run_set(bench_dir, benchmark, ruleset, closed=specs["division"] == "closed", notes=notes, who=who)
            detailed[f"{benchmark}:rcp_scaling_factor"] = float(s.scaling_factor)
            if s.score is not None:
                scores[benchmark] = float(s.score)
                detailed[f"{benchmark}:time_to_train"] = s.score
            detailed[f"{benchmark}:RCP"] = s.rcp
            if s.gbs is not None:
                detailed[f"{benchmark}:GBS"] = s.gbs
            if s.samples_to_converge is not None:
                detailed[f"{benchmark}:samples_to_converge"] = s.samples_to_converge
        urls = {
            "details_url": f"{_url_prefix(ruleset)}/blob/main/{desc['submitter']}/systems/{system}.json",
            "code_url": f"{_url_prefix(ruleset)}/blob/master/{desc['submitter']}/benchmarks",
        }
        rows.append({**specs, **scores, **urls})
        detailed_rows.append({**specs, **detailed, **urls})
    return rows, detailed_rows


def summarize(root: Path, *, ruleset: str | None = None) -> Summary:
    """The summarizer's summary and detailed tables for a package, or a folder of packages of one round."""
    root = Path(root)
    packages = packages_under(root)
    version = choose_round(root, ruleset)
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    detailed_rows: list[dict[str, Any]] = []
    for package in packages:
        r, d = summarize_package(package, version, notes)
        rows.extend(r)
        detailed_rows.extend(d)
    benchmarks = allowed_benchmarks(version)
    return Summary(version, _table(rows, _columns(benchmarks, False)), _table(detailed_rows, _columns(benchmarks, True)),
                   notes)


# ---- the table as the summarizer writes it -------------------------------------------------------

def _cast(value: Any, dtype: type) -> Any:
    """pandas' ``astype`` of the summarizer's schema: str() for text, int(), float() (None -> NaN, kept as None)."""
    if dtype is str:
        return str(value)
    if dtype is int:
        return int(value)
    if value is None:
        return None
    v = float(value)
    return None if math.isnan(v) else v


def _sort_key(row: dict[str, Any], columns: list[str]) -> tuple:
    return tuple((row[c] is None, row[c] if row[c] is not None else 0) for c in columns)


def _table(rows: list[dict[str, Any]], schema: list[tuple[str, type]]) -> Table:
    columns = [c for c, _ in schema]
    cast = [{c: _cast(row.get(c), t) for c, t in schema} for row in rows]
    cast.sort(key=lambda r: _sort_key(r, columns))  # sort_values(by=all columns), NaN last
    return Table(columns, cast)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _json_cell(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 10)
    return value


def write_csv(summary: Summary, path: Path) -> list[Path]:
    """``path`` (the summary) and ``<path stem>_detailed.csv``, as the official ``--csv path``."""
    return _write_pair(Path(path), summary.summary.csv_text(), summary.detailed.csv_text())


def write_json(summary: Summary, path: Path) -> list[Path]:
    """``path`` (the summary records) and ``<path stem>_detailed<suffix>``, as the official tool's JSON files."""
    return _write_pair(Path(path), summary.summary.json_text(), summary.detailed.json_text())


def _write_pair(path: Path, summary_text: str, detailed_text: str) -> list[Path]:
    detailed = _sibling(path, "_detailed")
    _write(path, summary_text)
    _write(detailed, detailed_text)
    return [path, detailed]


def _sibling(path: Path, tag: str) -> Path:
    return path.with_name(f"{path.stem}{tag}{path.suffix}")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise HarnessError(f"cannot write {path}: {err.strerror or type(err).__name__}", ErrorCategory.BAD_INPUT) from None


def format_table(summary: Summary) -> str:
    """A plain-text table: one line per system and benchmark that has a score column filled."""
    benchmarks = [c for c in summary.summary.columns if c not in {n for n, _ in PREFIX_COLUMNS + SUFFIX_COLUMNS}]
    header = ("division", "availability", "submitter", "system", "accelerators", "benchmark", "minutes")
    lines: list[tuple[str, ...]] = []
    for row in summary.summary.rows:
        shown = [b for b in benchmarks if row[b] is not None] or ["-"]
        for b in shown:
            lines.append((row["division"], row["availability"], row["submitter"], row["system"],
                          str(row["accelerators_count"]), b, "-" if b == "-" else f"{row[b]:.6f}"))
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = [f"MLPerf Training {summary.ruleset} result summary"]
    for line in [header, *lines]:
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    return "\n".join(out)
