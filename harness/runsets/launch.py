"""Launching a run's ranks: one torchrun on this host, or one torchrun launcher per node.

**One node** (the default): ``torchrun --standalone --nproc-per-node=W``; an emulated profile
of several nodes runs all of its ranks here too, rank ``r`` on node ``r // ranks_per_node``.

**Several nodes** (``harness run --nnodes N --node-rank R --rdzv-endpoint HOST:PORT``): every
node runs the same ``harness run`` command with its own ``--node-rank``. Node 0's launcher
hosts a ``TCPStore`` at the endpoint for the whole run set (HOST must be node 0's address);
the launchers meet there before anything is written (:class:`NodeGroup`): each follower sends
the fingerprint of its run set (benchmark, hyperparameters, profile, plan, codecs, data), node 0
refuses the set when any differs, and otherwise hands every follower the run configs of the
set (seeds included), so that every node trains exactly the run node 0 logs. Each run is then one torchrun job on
every node (``--rdzv-backend c10d`` on that same store, rendezvous id ``<rdzv-id>.<job>``,
``--nproc-per-node`` the profile's ranks per node). Global rank 0, on node 0, alone writes the
log; node 0's launcher alone writes the results tree; the followers write nothing there (their
run configs and SSD shard files live in a temporary folder, removed at the end).

**Ranks.** c10d's rendezvous numbers the nodes in an order of its own (by host name and process
id), so a worker takes its rank from the launcher's node rank instead:
``rank = node_rank x ranks_per_node + LOCAL_RANK`` (:func:`harness.reference.distributed.ranks.assign_rank`), like torchrun's static
rendezvous; the plan's rank ``r`` is then on node ``r // ranks_per_node`` wherever it runs.

**Failures.** A node that dies ends the job: the survivors' collectives fail (gloo notices the
closed connections), rank 0 ends its log ``run_stop status=aborted``, every surviving launcher
prints one error line and exits non-zero. A follower that loses node 0's store says so.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.reference.distributed.ranks import NODE_RANK_ENV
from harness.runsets.torchrun import FORKED_RANKS

# the worker as a script, for torchrun's --run-path (an absolute path; importing the module would import torch)
WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "reference" / "worker.py"

JOIN_TIMEOUT_S = 600.0  # how long launchers wait for each other (at the start, and for each job)
DONE_TIMEOUT_S = 60.0  # how long node 0 keeps its store for followers to read the last verdict


@dataclass(frozen=True)
class Nodes:
    """The launchers of a run set: ``count`` nodes, this one ``rank``, meeting at ``endpoint``."""

    count: int = 1
    rank: int = 0
    endpoint: str | None = None  # HOST:PORT, node 0's address
    rdzv_id: str = "harness"
    local_addr: str | None = None  # this node's address as the others reach it (torchrun's --local-addr)
    timeout_s: float = JOIN_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.count < 1:
            raise HarnessError(f"--nnodes must be at least 1, not {self.count}")
        if not 0 <= self.rank < self.count:
            raise HarnessError(f"--node-rank must be in 0..{self.count - 1}, not {self.rank}")
        if self.count > 1 and not self.endpoint:
            raise HarnessError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address and a free port)")
        if self.count == 1 and (self.rank or self.endpoint):
            raise HarnessError("--node-rank and --rdzv-endpoint need --nnodes > 1")
        if self.endpoint:
            self.host_port()
        if not self.rdzv_id or any(c in self.rdzv_id for c in "/ \t\n"):
            raise HarnessError(f"--rdzv-id must be a word without slashes or spaces, not {self.rdzv_id!r}")

    @property
    def multi(self) -> bool:
        return self.count > 1

    def host_port(self) -> tuple[str, int]:
        host, sep, port = (self.endpoint or "").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise HarnessError(f"--rdzv-endpoint must be HOST:PORT, not {self.endpoint!r}")
        return host.strip("[]"), int(port)


def worker_command(config_path: str, world_size: int, nodes: Nodes | None = None, job: int = 0) -> list[str]:
    """The command of a run's ranks on this node (``world_size`` > 1): torchrun's ranks on this
    host; with several nodes this node's share, joined by c10d. (A one-rank run's worker is forked,
    :mod:`harness.reference.forked`.)"""
    if world_size < 2:
        raise ValueError(f"worker_command is for runs of several ranks, not {world_size}")
    # torchrun with its ranks forked from one process that has imported torch (harness.runsets.torchrun)
    torchrun = [sys.executable, "-m", "harness.runsets.torchrun"]
    worker = [*FORKED_RANKS, str(WORKER_SCRIPT), str(config_path)]
    if nodes is None or not nodes.multi:
        return [*torchrun, "--standalone", f"--nproc-per-node={world_size}", *worker]
    return [
        *torchrun, f"--nnodes={nodes.count}", f"--nproc-per-node={world_size // nodes.count}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={nodes.endpoint}", f"--rdzv-id={nodes.rdzv_id}.{job}",
        # node 0's launcher hosts the store (NodeGroup); torchrun's agents are its clients
        "--rdzv-conf=is_host=false", "--max-restarts=0",
        *([f"--local-addr={nodes.local_addr}"] if nodes.local_addr else []), *worker,
    ]


def worker_env(nodes: Nodes | None) -> dict[str, str]:
    """The environment of this node's workers."""
    env = dict(os.environ)
    if nodes is not None and nodes.multi:
        env[NODE_RANK_ENV] = str(nodes.rank)
    return env


class NodeGroup:
    """The launchers of a multi-node run set, meeting at node 0's store (see the module docstring).

    Node 0 calls :meth:`admit` (followers' fingerprints checked, the set's runs handed out) and
    :meth:`report` after each job; a follower calls :meth:`join` and :meth:`verdict`. Keys live
    under ``harness/<rdzv-id>/`` in the store that torchrun's rendezvous of each job also uses.
    """

    def __init__(self, nodes: Nodes):
        import torch.distributed as dist  # here: only a multi-node set needs torch in the launcher

        self.nodes = nodes
        self.prefix = f"harness/{nodes.rdzv_id}"
        host, port = nodes.host_port()
        timeout = datetime.timedelta(seconds=nodes.timeout_s)
        try:
            self.store = dist.TCPStore(host, port, is_master=nodes.rank == 0, multi_tenant=True,
                                       wait_for_workers=False, timeout=timeout)
        except (RuntimeError, ValueError) as err:
            what = (f"cannot listen at {nodes.endpoint} (node 0 hosts the rendezvous there: give this machine's "
                    "address and a free port)") if nodes.rank == 0 else f"cannot reach node 0 at {nodes.endpoint}"
            raise HarnessError(f"{what}: {_first_line(err)}", ErrorCategory.RUN_FAILED) from None
        if int(self.store.add(f"{self.prefix}/claim/{nodes.rank}", 1)) > 1:
            raise HarnessError(f"node rank {nodes.rank} is claimed by two launchers at {nodes.endpoint}; give "
                               "each node its own --node-rank", ErrorCategory.BAD_INPUT)

    # ------------------------------------------------------------------ store access
    def _set(self, key: str, value: Any) -> None:
        self._call(lambda: self.store.set(f"{self.prefix}/{key}", json.dumps(value)))

    def _get(self, key: str) -> Any:
        return json.loads(self._call(lambda: self.store.get(f"{self.prefix}/{key}")))

    def _call(self, op: Any) -> Any:
        try:
            return op()
        except (RuntimeError, ValueError) as err:  # torch raises DistStoreError (a RuntimeError)
            text = _first_line(err)
            if "timeout" in text.lower() or "timed out" in text.lower():
                raise HarnessError(f"node {self.nodes.rank}: the other launchers did not answer within "
                                   f"{self.nodes.timeout_s:g} s (is every node's harness run started, with the "
                                   f"same --rdzv-endpoint {self.nodes.endpoint}?)", ErrorCategory.RUN_FAILED) from None
            who = "node 0's launcher" if self.nodes.rank else "a follower"
            raise HarnessError(f"node {self.nodes.rank}: lost {who} at {self.nodes.endpoint} ({text})",
                               ErrorCategory.RUN_FAILED) from None

    # ------------------------------------------------------------------ node 0
    def admit(self, fingerprint: str, jobs: list[dict[str, Any]] | None, refusal: str | None = None) -> None:
        """Wait for every follower, check that each planned the same run set, hand out the jobs
        (``{"index", "seed", "config"}`` per run), or the refusal; raises when the set cannot run."""
        keys = [f"{self.prefix}/hello/{r}" for r in range(1, self.nodes.count)]
        self._call(lambda: self.store.wait(keys, datetime.timedelta(seconds=self.nodes.timeout_s)))
        hellos = {r: self._get(f"hello/{r}") for r in range(1, self.nodes.count)}
        differ = [r for r, h in hellos.items() if h.get("fingerprint") != fingerprint]
        if refusal is None and differ:
            refusal = (f"node(s) {', '.join(map(str, differ))} planned another run set (fingerprint "
                       f"{hellos[differ[0]].get('fingerprint')} against node 0's {fingerprint}): every node must "
                       "run the same harness version with the same benchmark, profile, options and data")
        self._set("verdict", {"ok": refusal is None, "message": refusal, "jobs": jobs or []})
        if refusal is not None:
            self.wait_done()
            raise HarnessError(refusal, ErrorCategory.BAD_INPUT)

    def report(self, job: int, ok: bool, message: str = "") -> None:
        """Node 0's outcome of job ``job``, for the followers."""
        self._set(f"job/{job}", {"ok": ok, "message": message})

    def wait_done(self, timeout_s: float = DONE_TIMEOUT_S) -> None:
        """Keep the store until every follower has read its last verdict (or ``timeout_s``)."""
        keys = [f"{self.prefix}/done/{r}" for r in range(1, self.nodes.count)]
        try:
            self.store.wait(keys, datetime.timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError):
            pass  # a follower gone: nothing more to tell it

    # ------------------------------------------------------------------ followers
    def join(self, fingerprint: str) -> list[dict[str, Any]]:
        """Tell node 0 this node's run set; its jobs, or the error node 0 refused the set with."""
        self._set(f"hello/{self.nodes.rank}", {"fingerprint": fingerprint})
        verdict = self._get("verdict")
        if not verdict["ok"]:
            self.done()
            raise HarnessError(f"node 0 refused the run set: {verdict['message']}", ErrorCategory.BAD_INPUT)
        return verdict["jobs"]

    def verdict(self, job: int) -> dict[str, Any]:
        return self._get(f"job/{job}")

    def done(self) -> None:
        try:
            self._set(f"done/{self.nodes.rank}", True)
        except HarnessError:
            pass

    def close(self) -> None:
        del self.store


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
