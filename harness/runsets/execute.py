"""Executing a run set on node 0: the pending runs one after another, each in fresh worker
processes, its finished log moved into the results tree with one ``os.replace``; an interrupted
or failed run's log is kept in staging, ending ``run_stop status=aborted``. Then the set is
scored (:mod:`harness.runsets.score`). With several nodes the followers are admitted first
(:class:`harness.runsets.launch.NodeGroup`) and told how each run ended."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.errors import ErrorCategory, HarnessError, io_fault
from harness.hw_profiles import detect, system_description, write_system_description
from harness.mllog import keys
from harness.process import interrupt_category, interrupt_reason
from harness.reference.data import open_dataset
from harness.reference.engine.mlperf_log import MLPerfLog, parse_records
from harness.reference.engine.run_config import RunConfig
from harness.reference.forked import start_server
from harness.rules.seeds import Seed, seeds_for_runs
from harness.rules.specs import BenchmarkSpec
from harness.runsets.launch import NodeGroup
from harness.runsets.location import Placement, place_run_set
from harness.runsets.manifest import (
    RESUME,
    begin_manifest,
    record_run,
    write_resumable,
)
from harness.runsets.plan import RunSetPlan
from harness.runsets.reporter import Reporter, run_name
from harness.runsets.score import (
    RunSetOutcome,
    run_outcome,
    score_results,
)
from harness.runsets.workers import (
    IO_FAULT_EXIT,
    remove_tables,
    run_worker,
    worker_config,
    worker_failure,
)

FAILED_DONE_TIMEOUT_S = 5.0  # after a failed run, how long node 0 waits for its followers to hear of it


def execute_run_set(plan: RunSetPlan, reporter: Reporter | None = None) -> RunSetOutcome:
    """Run the pending runs of the set, then score every finished run in the results tree.

    With several nodes, node 0 does this (its launchers' followers run
    :func:`harness.runsets.follow.follow_run_set`): the followers are admitted before anything is
    written (see :mod:`harness.runsets.launch`)."""
    reporter = reporter or Reporter()
    nodes = plan.request.nodes
    if nodes.multi and nodes.rank != 0:
        raise HarnessError("execute_run_set runs on node 0; a follower runs follow_run_set")
    group = NodeGroup(nodes) if nodes.multi else None
    try:
        return _execute(plan, reporter, group)
    finally:
        if group is not None:
            group.close()


@runtime_checkable
class _Generator(Protocol):
    """A synthetic benchmark's generator (of samples or of event streams): it knows its teacher."""

    def best_auc(self) -> float: ...


def teacher_best_auc(spec: BenchmarkSpec, *, files: bool = False) -> float | None:
    """The synthetic data's best achievable eval AUC (samples or event streams), computed here,
    outside any timed run; None where it is not known: a benchmark without a generator, or a run on
    ``files`` (``--data``: whoever made them, the generator's teacher says nothing of them)."""
    if files or spec.dataset["kind"] not in ("synthetic", "event_streams"):
        return None
    generator = open_dataset(spec, None)  # the benchmark's generator, whichever kind
    assert isinstance(generator, _Generator), type(generator).__name__
    return generator.best_auc()


def _execute(plan: RunSetPlan, reporter: Reporter, group: NodeGroup | None) -> RunSetOutcome:
    """Place the set (:mod:`harness.runsets.location`), admit the followers with the runs' configs,
    write the set's files, run what is pending, score."""
    placement, seeds, best_auc = _pending_runs(plan, group)
    plan, pending = placement.plan, placement.pending  # the plan of the results root the set goes to
    if pending and plan.world_size == 1:  # the workers' fork server imports torch while the set is prepared
        start_server()
    configs = {index: worker_config(plan, index, seeds[index], _staged_log(plan, index), best_auc)
               for index in pending}
    if group is not None:  # every follower planned this same set; they train exactly these runs
        group.admit(plan.fingerprint, [{"index": i, "config": configs[i].to_json()} for i in pending])
    manifest = begin_manifest(plan)
    if pending:  # a complete set, reported again, is left as it is
        _write_set_files(plan)
    _announce(plan, reporter, placement, best_auc)
    _run_pending(plan, reporter, group, configs, seeds, manifest)
    if group is not None:
        group.wait_done()
    return score_results(plan, manifest)


def _pending_runs(plan: RunSetPlan, group: NodeGroup | None) -> tuple[Placement, dict[int, Seed], float | None]:
    """Where the set goes and its runs still to do, their seeds, and the teacher's AUC; a refusal
    is told to the followers too."""
    try:
        placement = place_run_set(plan)
        seeds = seeds_for_runs(placement.pending, plan.request.seeds)
        best_auc = teacher_best_auc(plan.spec, files=plan.data is not None) if placement.pending else None
    except HarnessError as err:
        if group is not None:
            group.admit(plan.fingerprint, None, refusal=str(err))
        raise
    return placement, seeds, best_auc


def _staged_log(plan: RunSetPlan, index: int) -> Path:
    """Where run ``index``'s log is written while it runs."""
    return plan.staging_dir / f"result_{index}.txt"


def _write_set_files(plan: RunSetPlan) -> None:
    """The system description, and in staging the plans the ranks execute (their fingerprints are
    in every log)."""
    detected = detect(results_dir=str(plan.request.results_dir))
    desc = system_description(
        profile=plan.profile,
        detected=detected,
        submitter=plan.request.submitter,
        division=plan.request.division,
        status=plan.request.status,
        emulated=plan.emulated,
        system_name=plan.system,
    )
    write_system_description(desc, plan.system_json)
    if plan.sharding_plan is not None:  # the plan the ranks execute; its fingerprint is in every log
        write_resumable(plan.staging_dir / "sharding_plan.json",
                        json.dumps(plan.sharding_plan.to_dict(), indent=1, sort_keys=True))
    if plan.tier_plan is not None:  # where the tables live; its fingerprint is in every log
        write_resumable(plan.staging_dir / "tier_plan.json",
                        json.dumps(plan.tier_plan.to_dict(), indent=1, sort_keys=True))


def _announce(plan: RunSetPlan, reporter: Reporter, placement: Placement, best_auc: float | None) -> None:
    """What the user learns before the first run: where the set goes (a new set, the next free
    root beside a complete one, a resume and what is left of it, or a complete set reported
    again), then the best AUC to expect."""
    reporter.message(placement.said)
    if best_auc is not None:
        reporter.message(
            f"the planted teacher's AUC on the eval split is {best_auc:.5f}: the best any model can expect; "
            f"the target is {plan.spec.target_auc}"
        )


def _run_pending(plan: RunSetPlan, reporter: Reporter, group: NodeGroup | None, configs: dict[int, RunConfig],
                 seeds: dict[int, Seed], manifest: dict[str, Any]) -> None:
    """Each pending run in turn (``configs`` in order), recorded in the manifest as it finishes;
    the followers hear how each ended."""
    job = 0
    try:
        for job, index in enumerate(configs):
            seed = seeds[index]
            reporter.run_started(index, plan.runs, seed, int(plan.spec.dataset["train_samples"]))
            final = _run_one(plan, index, configs[index], reporter, job)
            if group is not None:
                group.report(job, True)
            record_run(plan, manifest, index, seed)
            reporter.run_finished(run_outcome(index, seed, final, plan.spec.target_auc))
            if plan.embedding_tier:
                _report_cache(final, reporter)
    except (HarnessError, KeyboardInterrupt) as err:
        if group is not None:
            group.report(job, False, str(err) if isinstance(err, HarnessError) else interrupt_reason(err))
            group.wait_done(FAILED_DONE_TIMEOUT_S)
        raise


def _run_one(plan: RunSetPlan, index: int, config: RunConfig, reporter: Reporter, job: int = 0) -> Path:
    """Run one training process (this node's share of it); return its finished log, moved into
    the results tree."""
    staged = _staged_log(plan, index)
    stderr_path = plan.staging_dir / f"result_{index}.stderr.txt"
    config_path = plan.staging_dir / f"result_{index}.config.json"
    try:
        plan.staging_dir.mkdir(parents=True, exist_ok=True)
        staged.unlink(missing_ok=True)
    except OSError as err:
        raise io_fault(err, plan.staging_dir, "preparing the run's staging folder", RESUME) from None
    write_resumable(config_path, config.to_json())
    stamp = time.strftime("%Y%m%dT%H%M%S")
    faults: list[str] = []  # an I/O fault the worker reported on its pipe (its stderr file may be on a full disk)
    unheard: list[OSError] = []  # the reporter's output is gone (a closed pipe): the run goes on, unreported

    def on_progress(event: dict) -> None:
        if "io_fault" in event:
            faults.append(str(event["io_fault"]))
        elif not unheard:
            try:
                reporter.progress(index, event)
            except OSError as err:
                unheard.append(err)

    try:
        code = run_worker(config_path, plan, job, stderr_path, on_progress)
    except KeyboardInterrupt as err:
        remove_tables(plan.staging_dir, index)
        kept = _keep_log(staged, plan.staging_dir / f"result_{index}.interrupted-{stamp}.txt", interrupt_reason(err))
        raise HarnessError(
            f"{interrupt_reason(err)} during {run_name(index)}: its log ends run_stop status=aborted and is kept at "
            f"{kept}; {_finished_runs(plan)}", interrupt_category(err),
        ) from None
    except OSError as err:  # the worker's stderr file could not be made
        raise io_fault(err, stderr_path, f"starting {run_name(index)}", RESUME) from None
    remove_tables(plan.staging_dir, index)
    _check_run_ended_well(plan, index, code, faults, stderr_path, stamp)
    return _publish(plan, index)


def _check_run_ended_well(plan: RunSetPlan, index: int, code: int, faults: list[str], stderr_path: Path,
                          stamp: str) -> None:
    """Refuse a run whose worker failed (its log kept in staging as ``result_<i>.failed-<time>.txt``)
    or wrote no log."""
    staged = _staged_log(plan, index)
    failed = plan.staging_dir / f"result_{index}.failed-{stamp}.txt"
    if code == IO_FAULT_EXIT or faults:  # the worker met an I/O fault (a full disk...): its message names the file
        kept = _keep_log(staged, failed, "I/O fault")
        message = faults[-1] if faults else worker_failure(stderr_path).removeprefix("harness worker: I/O fault: ")
        raise HarnessError(
            f"{run_name(index)} stopped by an I/O fault: {message} (its log, incomplete, is kept at {kept}); free "
            f"space or fix the folder, then: {_finished_runs(plan)}",
            ErrorCategory.IO_FAULT,
        )
    if code != 0:
        kept = _keep_log(staged, failed, f"worker exited with status {code}")
        raise HarnessError(
            f"{run_name(index)} failed: {worker_failure(stderr_path)} (log kept at {kept})", ErrorCategory.RUN_FAILED
        )
    if not staged.is_file():  # global rank 0 is this node's: it must have written the log
        raise HarnessError(f"{run_name(index)}: the ranks ended without an error but wrote no log at {staged}",
                           ErrorCategory.RUN_FAILED)


def _publish(plan: RunSetPlan, index: int) -> Path:
    """Move run ``index``'s finished log from staging into the results tree, in one ``os.replace``."""
    final = plan.result_path(index)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(_staged_log(plan, index), final)
    except OSError as err:
        raise io_fault(err, final, f"moving {run_name(index)}'s finished log into the results", RESUME) from None
    return final


def _keep_log(staged: Path, kept: Path, reason: str) -> Path:
    """The staged log moved to ``kept``, ending run_stop aborted (where the disk still takes a line)."""
    with contextlib.suppress(OSError):  # a full disk: the log keeps what it has
        ensure_aborted(staged, reason)
    with contextlib.suppress(OSError):
        os.replace(staged, kept)
    return kept


def _finished_runs(plan: RunSetPlan) -> str:
    """What is left of the set after a run stopped, and how to complete it."""
    finished = sorted(plan.results_dir.glob("result_*.txt")) if plan.results_dir.is_dir() else []
    return (f"the {len(finished)} finished run(s) are in {plan.results_dir}; complete the set with the same "
            "command and --resume" if finished else "no run of the set had finished; the same command starts it again")


def ensure_aborted(log_path: Path, reason: str) -> None:
    """Make the log end with ``run_stop status=aborted`` if the worker could not write it."""
    try:
        records = parse_records(log_path) if log_path.exists() else []
    except HarnessError:
        records = []
    if any(r.get("key") == keys.RUN_STOP for r in records):
        return
    if log_path.exists() and log_path.stat().st_size:
        with open(log_path, "rb+") as f:  # a worker killed mid-line: finish that line first
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
    log = MLPerfLog(log_path)
    try:
        log.end(keys.RUN_STOP, metadata={keys.STATUS: keys.ABORTED, keys.REASON: reason})
    finally:
        log.close()


def _report_cache(log_path: Path, reporter: Reporter) -> None:
    """The run's embedding cache figures, as its log records them."""
    reports = [r["value"] for r in parse_records(log_path) if r.get("key") == keys.HARNESS_EMBEDDING_CACHE]
    if not reports:
        return
    c = reports[-1]
    tier = c["tier"]
    in_memory = f" ({c['memory_rows']:,} rows of {len(c['memory_tables'])} tables kept in memory)" if c.get(
        "memory_rows") else ""
    reporter.message(
        f"  {c['policy']} cache of {c['cache_rows']:,} of {c['rows']:,} {tier.upper()} rows{in_memory}: "
        f"hit rate {c['hit_rate']:.3f} (distinct rows {c['unique_hit_rate']:.3f}); "
        f"{tier.upper()} read {c[f'{tier}_bytes_read_per_step'] / 1e6:.2f} MB/step, "
        f"written {c[f'{tier}_bytes_written_per_step'] / 1e6:.2f} MB/step"
        + (f"; rows moved {c['ssd_io']}" if c.get("ssd_io") else "")
    )
