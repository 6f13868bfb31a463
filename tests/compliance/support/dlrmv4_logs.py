"""Generated MLPerf Training v6.1 DLRMv4 (HSTU) result logs, and mutations of them.

There are no public v6.1 results yet, so the agreement tests on ``dlrmv4`` run on logs made
here: complete, realistic MLLOG logs (as the reference's ``mlperf_logging`` calls write them)
that pass the official 6.1.0 checker, for several global batch sizes, closed and open. The
grid arithmetic below is written from the reference's description (eval every 0.1% of the
training samples, rounded up to whole steps; the first eval at the linear fit of the reference
sweep) and is checked by the official checker accepting the logs, not by our engine.

``MUTATIONS`` break one rule each (or test one edge: the learning-rate band just inside and
just outside); ``DIFFERENCES`` lists where the official checker is wrong and why.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path

from tests.compliance.support.mutations import TOKEN, _first, _records, _rewrite, remove_key

TRAIN_SAMPLES = 2290835423
EVAL_SAMPLES = 2058204
EVAL_EVERY_DATA_PCT = 0.001
TARGET = 0.75
BATCH_SIZES = (8192, 16384, 32768)
SYSTEM = "8xMI350X_hstu"
SUBMITTER = "ExampleOrg"


def eval_interval(gbs: int) -> int:
    """Samples between evals: 0.1% of the training samples in whole steps of ``gbs``."""
    return max(1, math.ceil(EVAL_EVERY_DATA_PCT * TRAIN_SAMPLES / gbs)) * gbs


def first_eval(gbs: int) -> int:
    """Where evaluation starts: the first grid point at or after the reference fit's threshold."""
    threshold = (4480 * gbs + 135331840) // 3
    return math.ceil(threshold / eval_interval(gbs)) * eval_interval(gbs)


def reference_lr(gbs: int) -> float:
    return 1e-6 * gbs / 8192


def dlrmv4_log(*, gbs: int = 8192, division: str = "closed", seed: int = 1, lr: float | None = None,
               sparse_lr: float | None = None, evals: int = 6, converged: bool = True, rank_prefix: bool = True,
               start_ms: int = 1_790_000_000_000) -> str:
    """One result log: ``evals`` evaluations from the first grid point; the last reaches the target
    when ``converged`` (and the run stops with ``success``), else none does (``aborted``)."""
    rng = random.Random(seed * 7919 + gbs)
    lr = reference_lr(gbs) if lr is None else lr
    sparse_lr = lr if sparse_lr is None else sparse_lr
    t = float(start_ms)
    lines: list[str] = []

    def log(key: str, value=None, event="POINT_IN_TIME", dt: float = 1.0, **metadata) -> None:
        nonlocal t
        t += dt
        record = {"namespace": "", "time_ms": round(t), "event_type": event, "key": key, "value": value,
                  "metadata": {"file": "/workspace/hstu/train.py", "lineno": 100 + len(lines), **metadata}}
        lines.append(("0: " if rank_prefix else "") + TOKEN + json.dumps(record) + "\n")

    log("cache_clear", True)
    log("init_start", event="INTERVAL_START")
    for key, value in (("submission_benchmark", "dlrmv4"), ("submission_org", SUBMITTER),
                       ("submission_division", division), ("submission_status", "onprem"),
                       ("submission_platform", SYSTEM)):
        log(key, value)
    log("seed", seed)
    hyper = [
        ("global_batch_size", gbs), ("gradient_accumulation_steps", 1), ("max_sequence_length", 4096),
        ("opt_name", "Adam" if division == "closed" else "AdamW"), ("opt_base_learning_rate", lr),
        ("opt_adam_beta_1", 0.95), ("opt_adam_beta_2", 0.999), ("opt_adam_epsilon", 1e-08),
        ("opt_weight_decay", 0.0), ("opt_gradient_clip_norm", 1.0), ("opt_sparse_name", "RowWiseAdagrad"),
        ("opt_sparse_base_learning_rate", sparse_lr), ("opt_learning_rate_warmup_steps", 24000),
        ("opt_learning_rate_warmup_start_lr", 0.0), ("eval_every_data_pct", EVAL_EVERY_DATA_PCT),
        ("lowest_numerical_precision_in_linear", "bfloat16"), ("lowest_numerical_precision_in_attn", "bfloat16"),
        ("lowest_numerical_precision_in_comm", "fp32"), ("tensor_parallelism", 1), ("pipeline_parallelism", 1),
        ("context_parallelism", 1), ("expert_parallelism", 1), ("micro_batch_size", gbs // 8),
        ("config_filename", f"configs/hstu_gbs{gbs}.gin"),
    ]
    for key, value in hyper:
        log(key, value)
    log("train_samples", TRAIN_SAMPLES, dt=40_000, samples_count=0)
    log("eval_samples", EVAL_SAMPLES, samples_count=0)
    log("init_stop", event="INTERVAL_END", dt=600_000)
    log("run_start", event="INTERVAL_START", dt=2)
    step = eval_interval(gbs)
    at = first_eval(gbs)
    log("block_start", event="INTERVAL_START", first_epoch_num=0, epoch_count=1, samples_count=0)
    auc = 0.7350 + 0.001 * rng.random()
    for n in range(evals):
        last = n == evals - 1
        seconds = at / gbs * 0.011 if n == 0 else step / gbs * 0.011
        log("eval_start", event="INTERVAL_START", dt=seconds * 1000, samples_count=at)
        if converged and last:
            auc = TARGET + 0.0005 * rng.random()
        else:
            auc = min(auc + 0.0015 + 0.001 * rng.random(), TARGET - 0.0004)
        log("eval_accuracy", round(auc, 6), dt=9_000 + 500 * rng.random(), samples_count=at)
        log("eval_stop", event="INTERVAL_END", samples_count=at)
        if not last:
            at += step
    log("block_stop", event="INTERVAL_END", first_epoch_num=0, samples_count=at)
    log("run_stop", event="INTERVAL_END", status="success" if converged else "aborted", samples_count=at)
    log("tracked_stats", {"throughput": round(gbs / 0.011, 1)}, step=at)
    return "".join(lines)


def system_desc(division: str = "closed") -> dict:
    return {
        "submitter": SUBMITTER, "division": division, "status": "Available on-premise", "system_name": SYSTEM,
        "number_of_nodes": "1", "host_processors_per_node": "2", "host_processor_model_name": "AMD EPYC 9575F",
        "host_processor_core_count": "64", "host_processor_vcpu_count": "", "host_processor_frequency": "",
        "host_processor_caches": "", "host_processor_interconnect": "", "host_memory_capacity": "3.0 TB",
        "host_storage_type": "NVMe SSD", "host_storage_capacity": "", "host_networking": "",
        "host_networking_topology": "", "host_memory_configuration": "", "accelerators_per_node": "8",
        "accelerator_model_name": "AMD Instinct MI350X", "accelerator_host_interconnect": "",
        "accelerator_frequency": "", "accelerator_on-chip_memories": "", "accelerator_memory_configuration": "",
        "accelerator_memory_capacity": "288 GB", "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "", "cooling": "", "hw_notes": "", "framework": "PyTorch",
        "framework_name": "pytorch", "other_software_stack": "", "operating_system": "Ubuntu 22.04.5 LTS",
        "sw_notes": "",
    }


def write_run_set(run_dir: Path, *, gbs: int = 8192, division: str = "closed", evals: list[int] | None = None,
                  converged: list[bool] | None = None, base_seed: int = 100) -> list[Path]:
    """``results/<system>/dlrmv4/``: ten logs (``evals[i]`` evaluations in run i)."""
    evals = evals if evals is not None else [5, 6, 6, 7, 5, 6, 8, 6, 7, 6]
    converged = converged if converged is not None else [True] * len(evals)
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (n, ok) in enumerate(zip(evals, converged)):
        path = run_dir / f"result_{i}.txt"
        path.write_text(dlrmv4_log(gbs=gbs, division=division, seed=base_seed + i, evals=n, converged=ok,
                                   start_ms=1_790_000_000_000 + i * 86_400_000))
        paths.append(path)
    return paths


def write_package(root: Path, *, gbs: int = 8192, division: str = "closed") -> Path:
    """A submitter package under a ``v6.1`` round folder: ``v6.1/<submitter>/{systems,results}``."""
    pkg = root / "v6.1" / SUBMITTER
    write_run_set(pkg / "results" / SYSTEM / "dlrmv4", gbs=gbs, division=division)
    (pkg / "systems").mkdir(parents=True, exist_ok=True)
    (pkg / "systems" / f"{SYSTEM}.json").write_text(json.dumps(system_desc(division), indent=4))
    return pkg


def corpus_logs() -> list[tuple[str, str]]:
    """(name, text) of the original logs: each batch size, closed and open, a few seeds."""
    out = []
    for gbs in BATCH_SIZES:
        for division in ("closed", "open"):
            for seed, evals in ((1, 4), (2, 9)):
                out.append((f"{division}_{gbs}_s{seed}", dlrmv4_log(gbs=gbs, division=division, seed=seed, evals=evals)))
    # the band's edges, exactly, and a batch size off the reference sweep
    out.append(("closed_8192_lr_band_low", dlrmv4_log(lr=0.5e-6, seed=3)))
    out.append(("closed_8192_lr_band_high", dlrmv4_log(lr=1.5e-6, seed=4)))
    out.append(("closed_12288", dlrmv4_log(gbs=12288, seed=5)))
    out.append(("closed_8192_no_rank_prefix", dlrmv4_log(seed=6, rank_prefix=False)))
    return out


# ---- mutations ----------------------------------------------------------------------------------

def _value_of(lines: list[str], key: str):
    found = _first(lines, key)
    return found[1]["value"] if found else None


def _set(key: str, value_fn, name: str) -> Callable[[list[str]], str | None]:
    def mutate(lines: list[str]) -> str | None:
        found = _first(lines, key)
        if not found:
            return None
        i, rec = found
        new = value_fn(lines, rec["value"])
        if new is _SKIP:
            return None
        _rewrite(lines, i, {**rec, "value": new})
        return "".join(lines)
    mutate.__name__ = name
    return mutate


_SKIP = object()


def _closed(fn):
    """Only for closed logs (the open division does not fix the value)."""
    def value_fn(lines, v):
        return fn(lines, v) if _value_of(lines, "submission_division") == "closed" else _SKIP
    return value_fn


def _lr_band(factor: float, rel: float):
    def value_fn(lines, v):
        gbs = _value_of(lines, "global_batch_size")
        return factor * 1e-6 * gbs / 8192 * (1 + rel)
    return value_fn


def _set_both_lrs(value_fn, name: str) -> Callable[[list[str]], str | None]:
    """The dense and the sparse learning rate both set to ``value_fn``'s value."""
    def mutate(lines: list[str]) -> str | None:
        value = value_fn(lines, None)
        for key in ("opt_base_learning_rate", "opt_sparse_base_learning_rate"):
            i, rec = _first(lines, key)
            _rewrite(lines, i, {**rec, "value": value})
        return "".join(lines)
    mutate.__name__ = name
    return mutate


def _move_before(key: str, anchor: str, name: str) -> Callable[[list[str]], str | None]:
    """Move the first ``key`` record to just before the first ``anchor`` record."""
    def mutate(lines: list[str]) -> str | None:
        a, b = _first(lines, key), _first(lines, anchor)
        if not a or not b or a[0] < b[0]:
            return None
        line = lines.pop(a[0])
        lines.insert(b[0], line)
        return "".join(lines)
    mutate.__name__ = name
    return mutate


def _evals(lines: list[str]) -> list[tuple[int, dict]]:
    return [(i, r) for i, r in _records(lines) if r["key"] == "eval_accuracy"]


def _shift_eval(which: int, delta_fn, name: str) -> Callable[[list[str]], str | None]:
    def mutate(lines: list[str]) -> str | None:
        evals = _evals(lines)
        if len(evals) <= max(which, -which - 1):
            return None
        i, rec = evals[which]
        gbs = _value_of(lines, "global_batch_size")
        md = dict(rec["metadata"])
        md["samples_count"] = md["samples_count"] + delta_fn(gbs)
        _rewrite(lines, i, {**rec, "metadata": md})
        return "".join(lines)
    mutate.__name__ = name
    return mutate


def drop_first_eval(lines: list[str]) -> str | None:
    """Start evaluating one grid point late (the first eval record gone, with its start/stop)."""
    evals = _evals(lines)
    if len(evals) < 2:
        return None
    i = evals[0][0]
    return "".join(lines[: i - 1] + lines[i + 2:])


def eval_without_samples_count(lines: list[str]) -> str | None:
    i, rec = _evals(lines)[1]
    md = {k: v for k, v in rec["metadata"].items() if k != "samples_count"}
    _rewrite(lines, i, {**rec, "metadata": {**md, "epoch_num": 1.0}})
    return "".join(lines)


def last_eval_below_target(lines: list[str]) -> str | None:
    i, rec = _evals(lines)[-1]
    _rewrite(lines, i, {**rec, "value": TARGET - 0.0001})
    return "".join(lines)


def eval_accuracy_above_one(lines: list[str]) -> str | None:
    i, rec = _evals(lines)[0]
    _rewrite(lines, i, {**rec, "value": 1.5})
    return "".join(lines)


def global_batch_size_as_string(lines: list[str]) -> str | None:
    i, rec = _first(lines, "global_batch_size")
    _rewrite(lines, i, {**rec, "value": str(rec["value"])})
    return "".join(lines)


def global_batch_size_twice_same(lines: list[str]) -> str | None:
    i, _ = _first(lines, "global_batch_size")
    lines.insert(i + 1, lines[i])
    return "".join(lines)


def missing_samples_count_first_eval_in_open(lines: list[str]) -> str | None:
    if _value_of(lines, "submission_division") != "open":
        return None
    i, rec = _evals(lines)[0]
    md = {k: v for k, v in rec["metadata"].items() if k != "samples_count"}
    _rewrite(lines, i, {**rec, "metadata": {**md, "epoch_num": 0.5}})
    return "".join(lines)


def _eval_metadata(which: int, change, name: str) -> Callable[[list[str]], str | None]:
    def mutate(lines: list[str]) -> str | None:
        i, rec = _evals(lines)[which]
        _rewrite(lines, i, {**rec, "metadata": change(dict(rec["metadata"]))})
        return "".join(lines)
    mutate.__name__ = name
    return mutate


def eval_accuracy_as_string(lines: list[str]) -> str | None:
    i, rec = _evals(lines)[-1]
    _rewrite(lines, i, {**rec, "value": str(rec["value"])})
    return "".join(lines)


def global_batch_size_after_first_eval(lines: list[str]) -> str | None:
    """The grid and the first eval position derive from a batch size not logged yet."""
    found = _first(lines, "global_batch_size")
    i = found[0]
    line = lines.pop(i)
    j = _evals(lines)[0][0]
    lines.insert(j + 1, line)
    return "".join(lines)


def benchmark_dlrm_dcnv2(lines: list[str]) -> str | None:
    i, rec = _first(lines, "submission_benchmark")
    _rewrite(lines, i, {**rec, "value": "dlrm_dcnv2"})
    return "".join(lines)


MUTATIONS: list[Callable[[list[str]], str | None]] = [
    # each fixed closed hyperparameter changed
    _set("opt_name", _closed(lambda ls, v: "AdamW"), "closed_opt_name_adamw"),
    _set("opt_adam_beta_1", _closed(lambda ls, v: 0.9), "closed_adam_beta_1"),
    _set("opt_adam_beta_2", _closed(lambda ls, v: 0.98), "closed_adam_beta_2"),
    _set("opt_adam_epsilon", _closed(lambda ls, v: 1e-6), "closed_adam_epsilon"),
    _set("opt_weight_decay", _closed(lambda ls, v: 0.01), "closed_weight_decay"),
    _set("opt_gradient_clip_norm", _closed(lambda ls, v: 0.5), "closed_gradient_clip_norm"),
    _set("opt_sparse_name", _closed(lambda ls, v: "Adagrad"), "closed_sparse_optimizer"),
    _set("opt_learning_rate_warmup_steps", _closed(lambda ls, v: 12000), "closed_warmup_steps"),
    _set("opt_learning_rate_warmup_start_lr", _closed(lambda ls, v: 1e-7), "closed_warmup_start_lr"),
    _set("eval_every_data_pct", _closed(lambda ls, v: 0.002), "closed_eval_every_data_pct"),
    _set("max_sequence_length", _closed(lambda ls, v: 2048), "closed_max_sequence_length"),
    _set("max_sequence_length", lambda ls, v: 0, "max_sequence_length_zero"),
    _set("train_samples", lambda ls, v: v - 1, "train_samples_off_by_one"),
    _set("eval_samples", lambda ls, v: v + 1, "eval_samples_off_by_one"),
    _set("gradient_accumulation_steps", lambda ls, v: 0, "gradient_accumulation_steps_zero"),
    _set("global_batch_size", lambda ls, v: v + 0.5, "global_batch_size_fractional"),
    # the learning-rate band: edges just inside (pass) and just outside (fail), dense and sparse
    _set_both_lrs(_lr_band(0.5, -0.5e-9), "lr_just_inside_low"),
    _set_both_lrs(_lr_band(1.5, +0.5e-9), "lr_just_inside_high"),
    _set_both_lrs(_lr_band(0.5, -2e-9), "lr_just_outside_low"),
    _set_both_lrs(_lr_band(1.5, +2e-9), "lr_just_outside_high"),
    _set("opt_base_learning_rate", _lr_band(1.5, +0.5e-9), "dense_lr_only_at_band_edge"),
    _set("opt_base_learning_rate", lambda ls, v: 2 * v, "lr_doubled"),
    _set("opt_base_learning_rate", lambda ls, v: str(v), "lr_as_string"),
    _set("opt_sparse_base_learning_rate", lambda ls, v: v * 1.01, "sparse_lr_differs"),
    _set("opt_sparse_base_learning_rate", lambda ls, v: v * 1.6, "sparse_lr_outside_band"),
    # order: the band is derived from global_batch_size, which must come first
    _move_before("opt_base_learning_rate", "global_batch_size", "lr_before_global_batch_size"),
    _move_before("opt_sparse_base_learning_rate", "opt_base_learning_rate", "sparse_lr_before_dense_lr"),
    # the eval grid
    _shift_eval(1, lambda gbs: gbs, "eval_off_grid_by_one_step"),
    _shift_eval(-1, lambda gbs: 1, "last_eval_off_grid_by_one_sample"),
    _shift_eval(0, lambda gbs: eval_interval(gbs), "first_eval_one_interval_late"),
    _shift_eval(0, lambda gbs: -eval_interval(gbs), "first_eval_one_interval_early"),
    drop_first_eval,
    eval_without_samples_count,
    missing_samples_count_first_eval_in_open,
    last_eval_below_target,
    eval_accuracy_above_one,
    eval_accuracy_as_string,
    global_batch_size_after_first_eval,
    _eval_metadata(0, lambda md: {**md, "samples_count": float(md["samples_count"])}, "first_eval_samples_as_float"),
    _eval_metadata(0, lambda md: {**md, "samples_count": str(md["samples_count"])}, "first_eval_samples_as_string"),
    _eval_metadata(1, lambda md: {**md, "samples_count": md["samples_count"] + 0.5}, "eval_samples_fractional"),
    # missing and repeated keys
    *(remove_key(k) for k in ("global_batch_size", "opt_base_learning_rate", "opt_sparse_base_learning_rate",
                           "opt_sparse_name", "eval_every_data_pct", "max_sequence_length", "train_samples",
                           "gradient_accumulation_steps", "config_filename", "tensor_parallelism",
                           "lowest_numerical_precision_in_attn", "micro_batch_size", "eval_accuracy", "run_stop",
                           "cache_clear")),
    global_batch_size_as_string,
    global_batch_size_twice_same,
    _set("lowest_numerical_precision_in_linear", lambda ls, v: "fp6", "precision_unknown"),
    _set("lowest_numerical_precision_in_linear", lambda ls, v: "mxfp6", "precision_mxfp6"),
    _set("context_parallelism", lambda ls, v: 0, "context_parallelism_zero"),
    benchmark_dlrm_dcnv2,
]

# Where MLPerf's checker is wrong, what each side says and why ours is right (as in mutations.py).
DIFFERENCES: dict[str, tuple[str, str, str]] = {
    "eval_accuracy_as_string": (
        "crash", "fail", "its ATLEAST_ONE_CHECK compares a str with a float outside any try",
    ),
    "benchmark_dlrm_dcnv2": (
        "crash", "fail",
        ("its POST code enqueues closed_dlrm_dcnv2.yaml, which 6.1.0 no longer has, and open() raises; "
         "ours gives one finding that the benchmark is not part of training_6.1.0"),
    ),
}
