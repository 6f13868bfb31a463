"""One run's worker processes on this node: the config they are given, starting them (one rank
forked from the set's fork server, several through torchrun), relaying their progress lines,
passing a stop signal on to them, removing the SSD tier's files they leave, and reading their
one-line error."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.process import signal_of
from harness.reference.engine.run_config import ExtraLog, NodesRecord, RunConfig
from harness.reference.forked import ForkedProcess, forked_run_worker
from harness.rules.seeds import Seed
from harness.runsets.launch import worker_command, worker_env
from harness.runsets.plan import RunSetPlan
from harness.runsets.request import LOG_STATUS

IO_FAULT_EXIT = 5  # the worker's exit status for an I/O fault (harness.reference.worker)
PROGRESS_PREFIX = "HARNESS_PROGRESS "  # a worker's progress line: this, then one JSON object
INTERRUPT_GRACE_S = 60.0  # how long a stopped worker has to end its log before it is killed


def worker_config(plan: RunSetPlan, index: int, seed: Seed, log_path: Path, best_auc: float | None) -> RunConfig:
    """What the worker of run ``index`` is told: the set's plan, this run's seed and log, and the
    extra records its log carries (the teacher's AUC, borrowing, emulation, nodes)."""
    return RunConfig(
        benchmark=plan.spec,
        hyperparameters=plan.hyperparameters,
        profile=plan.profile,
        seed=seed.value,
        seed_source=seed.source.value,
        submitter=plan.request.submitter,
        division=plan.request.division,
        status=LOG_STATUS[plan.request.status],
        platform=plan.system,
        log_path=str(log_path.resolve()),
        fingerprint=plan.fingerprint,
        config_filename=f"{plan.spec.name}.yaml",
        emulated=plan.emulated,
        run_index=index,
        progress=True,
        threads=plan.request.threads,
        extra_log=_extra_log(plan, best_auc),
        world_size=plan.world_size,
        # one rank with its tables placed on tiers: the sharded collection runs that plan (one code path)
        sharding_plan=plan.sharding_plan if plan.world_size > 1 else plan.tier_plan,
        comm=plan.comm,
        embedding_tier=(
            replace(plan.embedding_tier, path=str((plan.staging_dir / f"result_{index}.tables.bin").resolve()))
            if plan.embedding_tier is not None else None
        ),
        data=plan.data,
        data_cache=str(plan.request.data_cache) if plan.request.data_cache is not None else None,
        overlap=plan.request.overlap,
        step_phases=plan.request.step_phases,
        trace_path=str((plan.staging_dir / f"result_{index}.trace.json").resolve()) if plan.request.trace else None,
        precision=plan.precision.value,
    )


def _extra_log(plan: RunSetPlan, best_auc: float | None) -> ExtraLog:
    """The harness's own records of a run's log (:mod:`harness.mllog.keys`), each only when it applies."""
    extra = ExtraLog()
    if best_auc is not None:
        extra["harness_teacher_best_auc"] = best_auc
    if plan.borrowed_from:
        extra["harness_borrowed_from"] = plan.borrowed_from
    if plan.emulation_scale is not None:
        extra["harness_emulation_scale"] = plan.emulation_scale
    if plan.world_size > 1:
        extra["harness_nodes"] = _nodes_record(plan)
    return extra


def _nodes_record(plan: RunSetPlan) -> NodesRecord:
    """Where the run's ranks ran: the profile's nodes, and how many launchers started them."""
    nodes = plan.request.nodes
    return NodesRecord(nodes=plan.profile.nodes, ranks_per_node=max(plan.profile.accelerators_per_node, 1),
                       launchers=nodes.count, rendezvous="c10d" if nodes.multi else "standalone")


def run_worker(config_path: Path, plan: RunSetPlan, job: int, stderr_path: Path,
               on_progress: Callable[[dict], None]) -> int:
    """Start the run's worker process(es) on this node, relay its progress lines, return its exit
    status: one rank forked from the set's fork server (:mod:`harness.reference.forked`), more
    through torchrun (:func:`harness.runsets.launch.worker_command`).

    On KeyboardInterrupt the worker is asked to stop and has ended before this re-raises
    (torchrun passes the SIGINT on to its ranks).
    """
    nodes = plan.request.nodes
    with open(stderr_path, "wb") as err_file:
        proc: subprocess.Popen | ForkedProcess
        if plan.world_size == 1:
            proc = forked_run_worker(config_path, stderr_path)
        else:
            proc = subprocess.Popen(
                worker_command(str(config_path), plan.world_size, nodes, job), stdout=subprocess.PIPE,
                stderr=err_file, stdin=subprocess.DEVNULL, text=True, bufsize=1, env=worker_env(nodes),
            )
        try:
            _relay_progress(proc, on_progress)
            return proc.wait()
        except KeyboardInterrupt as err:
            stop_worker(proc, signal_of(err))
            raise


def _relay_progress(proc: subprocess.Popen | ForkedProcess, on_progress: Callable[[dict], None]) -> None:
    """Hand each progress line of the worker's output to ``on_progress``, until the output ends."""
    for line in proc.stdout or ():
        if line.startswith(PROGRESS_PREFIX):
            try:
                on_progress(json.loads(line[len(PROGRESS_PREFIX) :]))
            except json.JSONDecodeError:
                pass


def stop_worker(proc: subprocess.Popen | ForkedProcess, signum: int = signal.SIGINT) -> None:
    """Pass the signal that stopped us (SIGINT or SIGTERM) on to the worker (torchrun passes it to
    its ranks), give it time to end its log, then make sure it is gone."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if proc.poll() is None:
            proc.send_signal(signum)
        try:
            proc.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def remove_tables(folder: Path, index: int) -> None:
    """The SSD tier of run ``index`` in ``folder``, if any: one file, or one per shard of each rank."""
    for path in folder.glob(f"result_{index}.tables.bin*"):
        path.unlink(missing_ok=True)


def worker_failure(stderr_path: Path) -> str:
    """The worker's one-line error (a rank's, under torchrun, whose own report follows it)."""
    try:
        lines = [line for line in stderr_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    ours = [line for line in lines if line.lstrip("[rank0123456789]: ").startswith("harness worker:")]
    return (ours or lines or ["no message"])[-1].strip()
