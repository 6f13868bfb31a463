"""A one-rank run's worker forked from a process that has already imported torch.

A run set trains its runs one after another, each in a process of its own (its memory, its
signals, its failure are its own; ``python -m harness.reference.engine.worker RUN_CONFIG.json``
is that process as a command). A fresh interpreter per run pays about 2.3 s of CPU to import
torch and 2.2 s more when it builds its first optimizer (which imports ``torch._dynamo``): on a
small benchmark, more than the training itself, once per run. Here the set's launcher starts
``multiprocessing``'s fork server once, preloaded with what every worker imports
(:data:`harness.runsets.torchrun.PRELOAD`, the same list its forked ranks use), and each run's
worker is forked from it: its own process as before (own pid, memory, signals, exit status), in
the launcher's session and process group as a ``subprocess`` child was (a terminal's Ctrl-C
reaches it directly; the server ignores SIGINT), its stdout a pipe to the launcher (progress
lines) and its stderr the run's stderr file.

:class:`ForkedWorker` has the part of :class:`subprocess.Popen`'s interface the run set uses.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from harness.runsets.torchrun import PRELOAD

_CONTEXT = multiprocessing.get_context("forkserver")


def start_server() -> None:
    """Start the fork server now (it imports :data:`PRELOAD` while the launcher goes on); the
    first worker waits for it. Idempotent: one server per launcher process."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()


class ForkedWorker:
    """The worker of one run, forked from the fork server: ``pid``, ``stdout`` (its progress
    lines, text), ``poll``, ``wait``, ``send_signal``, ``kill`` and ``returncode`` as
    :class:`subprocess.Popen`'s (a negative status: ended by that signal)."""

    def __init__(self, config_path: str | Path, stderr_path: str | Path):
        start_server()
        reader, writer = _CONTEXT.Pipe(duplex=False)
        self._process = _CONTEXT.Process(target=_worker_main, args=(str(config_path), str(stderr_path), writer),
                                         name=f"harness worker {Path(config_path).name}")
        try:
            self._process.start()
        finally:
            writer.close()  # the worker holds its own end: end of file here when it ends
        self.pid: int = self._process.pid  # type: ignore[assignment]
        self.stdout: IO[str] = open(os.dup(reader.fileno()), encoding="utf-8", errors="replace")  # noqa: SIM115
        reader.close()

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"harness worker (pid {self.pid})", timeout or 0.0)
        self.stdout.close()
        self._process.close()  # the server's status pipe
        return code

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # ended in between
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _worker_main(config_path: str, stderr_path: str, progress) -> None:  # noqa: ANN001 (a Connection)
    """In the forked process: stdout to the launcher's pipe, stderr to the run's file, then the
    worker, as ``python -m harness.reference.engine.worker`` runs it."""
    err = os.open(stderr_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(err, 2)
    os.close(err)
    os.dup2(progress.fileno(), 1)
    progress.close()
    from harness.errors import flush_std_streams
    from harness.reference.engine import worker

    code = worker.main([config_path])
    flush_std_streams()
    sys.exit(code)  # the exit status the server reports to the launcher; no module teardown
