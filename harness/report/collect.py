"""Read a run set (or every run set below a folder) into the report's typed values.

A run set is a folder holding ``result_*.txt`` logs (``<package>/results/<system>/<benchmark>/``
as ``harness run`` writes it, or any copy of one); a results tree is any folder above run sets.
Hidden folders (the harness's staging, ``.harness/``) and symlinks are not entered.

Every log is read through :func:`harness.mllog.reader.read_records`, the one MLLOG reader, and
every key is named by :mod:`harness.mllog.keys`. What a log does not have is kept as ``None`` (or
an empty tuple) and named in :attr:`RunReport.missing`; a log that cannot be read is named in
:attr:`RunSetReport.problems` and the others are still reported. A ``result_*.txt`` without a single
MLLOG line is not a log (:class:`NotALog`): it is named in :attr:`RunSetReport.not_logs`, and a
folder holding nothing else is no run set (:attr:`Report.not_logs`). Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compliance.tree import find_log_folders
from harness.errors import ErrorCategory, HarnessError
from harness.leaderboard.svg import finite as _number
from harness.mllog import keys
from harness.mllog.reader import read_records
from harness.rules.results import RESULT_GLOB
from harness.rules.specs import Suite, benchmark_names, load_benchmark

LINK_CLASSES = ("intra_node", "inter_node")
TIERS = ("hbm", "ddr", "ssd")


# ---------------------------------------------------------------------------------------
# Values

@dataclass(frozen=True)
class Percentiles:
    """Seconds: the mean and the 50th, 90th and 99th percentiles of a per-step time."""

    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True)
class RankSteps:
    """One rank's step time, its phases (in the record's order) and its down-sampled series."""

    rank: int
    step_s: Percentiles
    phase_s: Mapping[str, Percentiles]
    series_step: tuple[int, ...]
    series_step_s: tuple[float, ...]

    @property
    def phase_mean_total_s(self) -> float:
        return sum(p.mean for p in self.phase_s.values())


@dataclass(frozen=True)
class StepPhases:
    """The ``harness_step_phases`` record of one run."""

    steps: int
    warmup_steps: int
    phases: tuple[str, ...]
    ranks: tuple[RankSteps, ...]
    eval_count: int | None
    eval_mean_s: float | None
    eval_total_s: float | None

    @property
    def straggler(self) -> int | None:
        """The rank whose mean step is the longest, when it is over 10% above the median rank's."""
        if len(self.ranks) < 2:
            return None
        means = sorted(r.step_s.mean for r in self.ranks)
        median = means[len(means) // 2]
        slowest = max(self.ranks, key=lambda r: r.step_s.mean)
        return slowest.rank if median > 0 and slowest.step_s.mean > 1.1 * median else None


@dataclass(frozen=True)
class CollectiveBytes:
    """Bytes per training step of one collective kind, per link class: measured (the log's
    ``harness_comm_stats``) and the planner's projection (``harness_comm_projection``)."""

    kind: str
    measured: Mapping[str, float]  # link class -> bytes per step
    projected: Mapping[str, float] | None
    seconds_per_step: float | None  # waited-for seconds per step, where measured


@dataclass(frozen=True)
class RankMemory:
    """One rank's bytes per tier: the plan's, those held at the end and their peak."""

    rank: int
    planned: Mapping[str, int]
    held: Mapping[str, int]
    peak: Mapping[str, int]
    capacity: Mapping[str, int]
    peak_rss_bytes: int | None


@dataclass(frozen=True)
class CacheReport:
    """The embedding cache over a slower tier (``harness_embedding_cache``), over the whole run."""

    tier: str
    policy: str | None
    hit_rate: float | None
    unique_hit_rate: float | None
    lookups: int | None
    ranks: int | None
    read_bytes_per_step: float | None
    written_bytes_per_step: float | None


@dataclass(frozen=True)
class EvalPoint:
    seconds: float  # since run_start
    samples: float | None  # training samples seen (samples_count, or epoch_num x train_samples)
    auc: float


@dataclass(frozen=True)
class Block:
    """An interval the log brackets: ``init`` (init_start..init_stop), ``run`` or one ``eval``."""

    kind: str
    start_s: float  # since the log's first timed record
    stop_s: float


@dataclass(frozen=True)
class RunReport:
    """One result log, as the report shows it."""

    path: Path
    benchmark: str | None
    seed: Any
    status: str | None
    run_seconds: float | None
    evals: tuple[EvalPoint, ...]
    blocks: tuple[Block, ...]
    global_batch_size: int | None
    logged_samples_per_s: float | None  # tracked_stats' throughput
    setup: Mapping[str, str]  # what the run was, in words: label -> value
    world_size: int
    step_phases: StepPhases | None
    collectives: tuple[CollectiveBytes, ...]
    memory: tuple[RankMemory, ...]
    cache: CacheReport | None
    missing: tuple[str, ...]  # the figures this log cannot give, each with the record it lacks
    harness_log: bool  # whether the log has any harness_* record (a run of this harness)

    @property
    def name(self) -> str:
        return self.path.name

    def converged(self, target: float | None) -> bool:
        return self.status == keys.SUCCESS and (target is None or any(e.auc >= target for e in self.evals))

    @property
    def samples_per_s(self) -> float | None:
        """Training samples per second: the logged throughput, else the last evaluation's samples
        over its seconds since run_start (that includes the evaluations' time)."""
        if self.logged_samples_per_s is not None:
            return self.logged_samples_per_s
        last = next(((e.samples, e.seconds) for e in reversed(self.evals) if e.samples is not None and e.seconds > 0),
                    None)
        return last[0] / last[1] if last is not None else None


@dataclass(frozen=True)
class RunSetReport:
    path: Path  # the run set's folder
    system: str
    submitter: str | None
    benchmark: str
    target_auc: float | None
    target_source: str  # where the target comes from, in words
    system_facts: Mapping[str, str]  # from systems/<system>.json
    runs: tuple[RunReport, ...]
    problems: tuple[str, ...] = ()  # logs that could not be read, and why
    not_logs: tuple[Path, ...] = ()  # result_*.txt files without a single MLLOG line, left out

    def first_with(self, what: str) -> RunReport | None:
        """The first run whose ``what`` (an attribute of :class:`RunReport`) is not empty."""
        return next((r for r in self.runs if getattr(r, what)), None)


@dataclass(frozen=True)
class Report:
    root: Path
    run_sets: tuple[RunSetReport, ...] = field(default=())
    not_logs: tuple[Path, ...] = ()  # the result_*.txt files of folders that hold no log, left out


NOT_A_LOG_MARK = ":::MLLOG"


class NotALog(HarnessError):
    """A ``result_*.txt`` file without a single MLLOG line: not an MLPerf result log."""

    def __init__(self, path: Path):
        super().__init__(f"{path}: not an MLPerf result log (no {NOT_A_LOG_MARK} line)", ErrorCategory.BAD_INPUT)
        self.path = path


def collect_report(root: Path) -> Report:
    """The report over the run set at ``root``, or every run set below it.

    A ``root`` that is not a folder, or holds no result logs (no ``result_*.txt``, or none with an
    MLLOG line), is one HarnessError naming it (exit 2).
    """
    root = Path(root)
    if not root.exists():
        raise HarnessError(f"{root}: no such file or folder", ErrorCategory.NOT_FOUND)
    if not root.is_dir():
        raise HarnessError(f"{root} is not a folder: give a run set (results/<submitter>/results/<system>/"
                           "<benchmark>/) or a folder above run sets", ErrorCategory.BAD_INPUT)
    read = [read_run_set(d) for d in find_log_folders(root)]
    run_sets = tuple(rs for rs in read if rs.runs or rs.problems)
    not_logs = tuple(p for rs in read if not (rs.runs or rs.problems) for p in rs.not_logs)
    give = "give a run set (results/<submitter>/results/<system>/<benchmark>/) or a results tree"
    if not run_sets and not_logs:
        raise HarnessError(f"{root}: no MLPerf result logs in it or below it: {name_files(not_logs, root)} "
                           f"{'has' if len(not_logs) == 1 else 'have'} no {NOT_A_LOG_MARK} line; {give}",
                           ErrorCategory.NOT_FOUND)
    if not run_sets:
        raise HarnessError(f"{root}: no {RESULT_GLOB} logs in it or below it: {give}", ErrorCategory.NOT_FOUND)
    return Report(root, run_sets, not_logs)


def name_files(paths: tuple[Path, ...], root: Path, most: int = 4) -> str:
    """``a, b, c and 5 more``: the files' paths below ``root``."""
    shown = []
    for path in paths[:most]:
        try:
            shown.append(str(path.relative_to(root)))
        except ValueError:
            shown.append(str(path))
    more = len(paths) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


# ---------------------------------------------------------------------------------------
# One run set

def read_run_set(folder: Path) -> RunSetReport:
    paths = sorted((p for p in folder.glob(RESULT_GLOB) if p.is_file()), key=_log_order)
    runs, problems, not_logs = [], [], []
    for path in paths:
        try:
            runs.append(read_run(path))
        except NotALog:
            not_logs.append(path)
        except HarnessError as err:
            problems.append(str(err))
    benchmark = next((r.benchmark for r in runs if r.benchmark), None) or folder.name
    target, source = _target(benchmark, folder)
    package = folder.parent.parent.parent if folder.parent.parent.name == "results" else None
    facts, submitter = _system_facts(package, folder.parent.name) if package else ({}, None)
    return RunSetReport(folder, folder.parent.name, submitter, benchmark, target, source, facts, tuple(runs),
                        tuple(problems), tuple(not_logs))


def _log_order(path: Path) -> tuple[int, str]:
    """``result_2.txt`` before ``result_10.txt``."""
    tail = path.stem.rsplit("_", 1)[-1]
    return (int(tail) if tail.isdigit() else 1 << 30, path.name)


def _target(benchmark: str, folder: Path) -> tuple[float | None, str]:
    """The benchmark's target AUC: its shipped spec's, else the one in the run set's staged run
    configs (``<results>/.harness/<submitter>/<system>/<benchmark>/result_<i>.config.json``, which
    ``harness run`` keeps for a spec given as a file)."""
    if benchmark in benchmark_names(Suite.TRAINING):  # an inference benchmark has no target AUC
        return load_benchmark(benchmark).target_auc, f"the {benchmark} spec"
    if folder.parent.parent.name == "results":
        staging = (folder.parents[3] / ".harness" / folder.parents[2].name / folder.parent.name / folder.name)
        for config in sorted(staging.glob("result_*.config.json")):
            try:
                spec = json.loads(config.read_text(encoding="utf-8"))["benchmark"]
                return float(spec["quality"]["target"]), f"the run config {config.name} beside the set"
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return None, f"unknown: {benchmark} is not a benchmark the harness ships and no run config is beside the logs"


def _system_facts(package: Path, system: str) -> tuple[dict[str, str], str | None]:
    path = package / "systems" / f"{system}.json"
    try:
        desc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}, None
    if not isinstance(desc, dict):
        return {}, None
    wanted = {"system_name": "system", "accelerator_model_name": "accelerator",
              "accelerators_per_node": "accelerators per node", "number_of_nodes": "nodes",
              "host_processor_model_name": "host processor", "framework": "framework", "hw_notes": "notes"}
    facts = {label: str(desc[k]).strip() for k, label in wanted.items() if str(desc.get(k, "")).strip()}
    return facts, (str(desc["submitter"]) if desc.get("submitter") else None)


# ---------------------------------------------------------------------------------------
# One log

@dataclass
class _Pass:
    """Everything one pass over a log's records keeps."""

    records: int = 0
    first_ms: float | None = None
    values: dict[str, Any] = field(default_factory=dict)  # the first value of each key
    starts: dict[str, float] = field(default_factory=dict)  # init_start / run_start time_ms
    stops: dict[str, float] = field(default_factory=dict)
    status: str | None = None
    evals: list[tuple[float, Any, Mapping[str, Any]]] = field(default_factory=list)  # time_ms, value, metadata
    eval_blocks: list[tuple[float, float]] = field(default_factory=list)
    open_eval: float | None = None
    throughput: float | None = None


def _scan(path: Path) -> _Pass:
    seen = _Pass()
    for _, record in read_records(path, what="MLLOG record"):
        seen.records += 1
        key, value = record["key"], record.get("value")
        meta = _dict(record.get("metadata"))
        t = _number(record.get("time_ms"))
        if t is not None and seen.first_ms is None:
            seen.first_ms = t
        seen.values.setdefault(key, value)
        if key in (keys.INIT_START, keys.RUN_START) and t is not None:
            seen.starts.setdefault(key, t)
        elif key in (keys.INIT_STOP, keys.RUN_STOP) and t is not None and key not in seen.stops:
            seen.stops[key] = t
            if key == keys.RUN_STOP:
                seen.status = meta.get(keys.STATUS)
        elif key == keys.EVAL_START and t is not None:
            seen.open_eval = t
        elif key == keys.EVAL_STOP and t is not None and seen.open_eval is not None:
            seen.eval_blocks.append((seen.open_eval, t))
            seen.open_eval = None
        elif key == keys.EVAL_ACCURACY and t is not None and _number(value) is not None:
            seen.evals.append((t, value, meta))
        elif key == keys.TRACKED_STATS and isinstance(value, dict) and _number(value.get(keys.THROUGHPUT)):
            seen.throughput = _number(value.get(keys.THROUGHPUT))
    return seen


def read_run(path: Path) -> RunReport:
    """One result log; a malformed MLLOG line is one HarnessError naming file and line, a file
    without any MLLOG line a :class:`NotALog`."""
    seen = _scan(path)
    if not seen.records:
        raise NotALog(path)
    v = seen.values
    start = seen.starts.get(keys.RUN_START)
    stop = seen.stops.get(keys.RUN_STOP)
    world = _int(v.get(keys.DATA_PARALLELISM)) or 1
    missing: list[str] = []
    phases = _step_phases(v.get(keys.HARNESS_STEP_PHASES), missing)
    run = RunReport(
        path=path,
        benchmark=str(v[keys.SUBMISSION_BENCHMARK]) if v.get(keys.SUBMISSION_BENCHMARK) is not None else None,
        seed=v.get(keys.SEED),
        status=seen.status,
        run_seconds=(stop - start) / 1000.0 if start is not None and stop is not None else None,
        evals=_eval_points(seen, start, _number(v.get(keys.TRAIN_SAMPLES))),
        blocks=_blocks(seen),
        global_batch_size=_int(v.get(keys.GLOBAL_BATCH_SIZE)),
        logged_samples_per_s=seen.throughput,
        setup=_setup(v),
        world_size=world,
        step_phases=phases,
        collectives=_collectives(v.get(keys.HARNESS_COMM_STATS), v.get(keys.HARNESS_COMM_PROJECTION)),
        memory=_memory(v.get(keys.HARNESS_MEMORY)),
        cache=_cache(v.get(keys.HARNESS_EMBEDDING_CACHE)),
        missing=(),
        harness_log=any(k in keys.HARNESS_KEYS for k in v),
    )
    return _with_missing(run, missing)


def _eval_points(seen: _Pass, start: float | None, train_samples: float | None) -> tuple[EvalPoint, ...]:
    if start is None:
        return ()
    points = []
    for t, value, meta in seen.evals:
        samples = _number(meta.get(keys.SAMPLES_COUNT))
        epoch = _number(meta.get(keys.EPOCH_NUM))
        if samples is None and epoch is not None and train_samples:
            samples = epoch * train_samples
        points.append(EvalPoint((t - start) / 1000.0, samples, float(value)))
    return tuple(points)


def _blocks(seen: _Pass) -> tuple[Block, ...]:
    origin = seen.first_ms or 0.0
    blocks = []
    for kind, a, b in (("init", keys.INIT_START, keys.INIT_STOP), ("run", keys.RUN_START, keys.RUN_STOP)):
        if a in seen.starts and b in seen.stops:
            blocks.append(Block(kind, (seen.starts[a] - origin) / 1000.0, (seen.stops[b] - origin) / 1000.0))
    blocks += [Block("eval", (a - origin) / 1000.0, (b - origin) / 1000.0) for a, b in seen.eval_blocks]
    return tuple(blocks)


def _setup(v: Mapping[str, Any]) -> dict[str, str]:
    """What the run was, in words, from the records that say it (absent ones left out)."""
    setup: dict[str, str] = {}

    def put(label: str, key: str, show: Callable[[Any], str] = str) -> None:
        if v.get(key) is not None:
            setup[label] = show(v[key])

    put("benchmark", keys.SUBMISSION_BENCHMARK)
    put("submitter", keys.SUBMISSION_ORG)
    put("platform", keys.SUBMISSION_PLATFORM)
    put("division", keys.SUBMISSION_DIVISION)
    put("profile", keys.HARNESS_PROFILE)
    put("emulated", keys.HARNESS_EMULATED, lambda e: "yes: CPU processes stood in for the profile's hardware"
        if e is True else "no")
    put("emulation scale", keys.HARNESS_EMULATION_SCALE, lambda s: f"capacities x{s:.3g}" if _number(s) else str(s))
    put("nodes", keys.HARNESS_NODES, _words)
    put("ranks (data parallelism)", keys.DATA_PARALLELISM)
    put("sharding plan", keys.HARNESS_SHARDING_PLAN, _plan_words)
    put("precision in linear layers", keys.LOWEST_NUMERICAL_PRECISION_IN_LINEAR)
    put("precision on the wire", keys.LOWEST_NUMERICAL_PRECISION_IN_COMM)
    put("embedding precision", keys.HARNESS_EMBEDDING_PRECISION, _words)
    put("communication codecs", keys.HARNESS_COMM_CODECS, _words)
    put("overlap of collectives", keys.HARNESS_COMM_OVERLAP, lambda o: "on" if o is True else "off" if o is False
        else str(o))
    put("global batch size", keys.GLOBAL_BATCH_SIZE)
    put("optimizer", keys.OPT_NAME)
    put("seed", keys.SEED)
    put("dataset", keys.HARNESS_DATASET, _words)
    put("rules", keys.HARNESS_RULESET)
    put("fingerprint", keys.HARNESS_FINGERPRINT, _short_hash)
    put("profiler trace", keys.HARNESS_TRACE, _trace_words)
    return setup


def _trace_words(value: Any) -> str:
    """``harness run --trace``'s merged timeline: where it is and what it holds."""
    if not isinstance(value, Mapping) or not isinstance(value.get("file"), str):
        return _words(value)
    ranks, steps = value.get("ranks") or [], value.get("steps") or []
    held = f"ranks {', '.join(map(str, ranks))}" if ranks else "no rank"
    if len(steps) == 2:
        held += f", steps {steps[0]}-{steps[1]}"
    return f"{value['file']} ({held}; Chrome trace JSON: open it in Perfetto or chrome://tracing)"


def _plan_words(plan: Any) -> str:
    if not isinstance(plan, dict):
        return str(plan)
    types = _dict(plan.get("sharding_types"))
    counts = ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
    fingerprint = _short_hash(plan.get("fingerprint") or "")
    return "; ".join(p for p in (counts or "no sharded tables", fingerprint) if p)


def _short_hash(value: Any) -> str:
    return str(value).split(":", 1)[-1][:12]


def _words(value: Any) -> str:
    """A record's value as ``k v, k v`` (a dict), or as it is."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_words(x)}" for k, x in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_words(x) for x in value) + "]"
    return str(value)


# ---------------------------------------------------------------------------------------
# The harness_* records

def _percentiles(value: Any) -> Percentiles | None:
    if not isinstance(value, dict):
        return None
    numbers = [_number(value.get(k)) for k in ("mean", "p50", "p90", "p99")]
    return None if any(n is None or n < 0 for n in numbers) else Percentiles(*numbers)  # type: ignore[arg-type]


def _step_phases(value: Any, missing: list[str]) -> StepPhases | None:
    """The record's value as :class:`StepPhases`; a value not of its schema is said in ``missing``."""
    if value is None:
        return None
    try:
        names = tuple(str(p) for p in value["phases"])
        ranks = tuple(_rank_steps(r, names) for r in value["ranks"])
        if not ranks:
            raise ValueError("no ranks")
        ev = _dict(value.get("eval_s"))
        return StepPhases(int(value["steps"]), int(value.get("warmup_steps", 0)), names, ranks,
                          _int(ev.get("count")), _number(ev.get("mean")), _number(ev.get("total")))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        missing.append(f"per-step timing: its {keys.HARNESS_STEP_PHASES} record is not of the expected form "
                       f"({type(err).__name__}: {err})")
        return None


def _rank_steps(value: Any, names: tuple[str, ...]) -> RankSteps:
    step = _percentiles(value["step_s"])
    phases = {name: _percentiles(value["phase_s"][name]) for name in names}
    if step is None or any(p is None for p in phases.values()):
        raise ValueError(f"rank {value.get('rank')}: a time that is not a non-negative number")
    series = value.get("series") or {}
    steps = tuple(int(s) for s in series.get("step", ()))
    times = tuple(float(s) for s in series.get("step_s", ()))
    if len(steps) != len(times):
        raise ValueError(f"rank {value.get('rank')}: series of {len(steps)} steps and {len(times)} times")
    return RankSteps(int(value["rank"]), step, phases, steps, times)  # type: ignore[arg-type]


def _link_bytes(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {link: float(b) for link in LINK_CLASSES if (b := _number(value.get(f"{link}_bytes"))) is not None}


def _collectives(stats: Any, projection: Any) -> tuple[CollectiveBytes, ...]:
    """Bytes per step per collective kind, every rank's summed: the measured ones (the record's
    ``per_step``) beside the planner's projection (its ``per_step``)."""
    measured = _dict(stats.get("per_step")) if isinstance(stats, dict) else {}
    projected = _dict(projection.get("per_step")) if isinstance(projection, dict) else {}
    kinds = list(measured) + [k for k in projected if k not in measured]
    return tuple(CollectiveBytes(kind, _link_bytes(measured.get(kind)),
                                 _link_bytes(projected[kind]) if kind in projected else None,
                                 _number((measured.get(kind) or {}).get("seconds"))
                                 if isinstance(measured.get(kind), dict) else None)
                 for kind in kinds)


def _tier_bytes(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {t: int(b) for t in TIERS if (b := _number(value.get(t))) is not None}


def _memory(value: Any) -> tuple[RankMemory, ...]:
    ranks = value.get("ranks") if isinstance(value, dict) else None
    if not isinstance(ranks, list):
        return ()
    return tuple(RankMemory(_int(r.get("rank")) or 0, _tier_bytes(r.get("planned")), _tier_bytes(r.get("held")),
                            _tier_bytes(r.get("peak")), _tier_bytes(r.get("capacity")),
                            _int(r.get("peak_rss_bytes")))
                 for r in ranks if isinstance(r, dict))


def _cache(value: Any) -> CacheReport | None:
    if not isinstance(value, dict):
        return None
    return CacheReport(str(value.get("tier", "?")), str(value["policy"]) if value.get("policy") else None,
                      _number(value.get("hit_rate")), _number(value.get("unique_hit_rate")),
                      _int(value.get("lookups")), _int(value.get("ranks")),
                      _number(value.get(f"{value.get('tier')}_bytes_read_per_step")),
                      _number(value.get(f"{value.get('tier')}_bytes_written_per_step")))


def _with_missing(run: RunReport, noted: list[str]) -> RunReport:
    """``run`` with :attr:`RunReport.missing`: each figure it cannot give, the record it lacks and,
    for a harness log, why it has none where that is known."""
    missing = list(noted)
    if run.step_phases is None and not noted:
        missing.append(f"per-step timing and its breakdown by phase (the log has no {keys.HARNESS_STEP_PHASES} "
                       "record)")
    if not run.collectives:
        why = "; a one-rank run has no collectives" if run.harness_log and run.world_size == 1 else ""
        missing.append(f"bytes per collective and link class (no {keys.HARNESS_COMM_STATS} or "
                       f"{keys.HARNESS_COMM_PROJECTION} record{why})")
    elif not any(c.projected is not None for c in run.collectives):
        missing.append(f"the planner's projection of the bytes (no {keys.HARNESS_COMM_PROJECTION} record)")
    if not run.memory:
        missing.append(f"memory per tier: planned, held, peak (no {keys.HARNESS_MEMORY} record)")
    if run.cache is None:
        why = "; the tables were in memory, behind no cache" if run.memory else ""
        missing.append(f"cache hit rates (no {keys.HARNESS_EMBEDDING_CACHE} record{why})")
    if not run.evals:
        missing.append(f"the AUC curve (no {keys.EVAL_ACCURACY} after a {keys.RUN_START})")
    if not run.harness_log:
        missing.append("what the run was beyond MLPerf's keys: profile, sharding plan, codecs, overlap, "
                       "emulation (no harness_* records: not a log of this harness)")
    return replace(run, missing=tuple(missing))


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None
