"""Worker processes forked from a process that has already imported torch.

The harness runs its work in processes of their own: each run of a set
(``python -m harness.reference.worker RUN_CONFIG.json`` is that process as a command),
each LoadGen test of ``harness infer``. A fresh interpreter pays seconds of CPU to import
torch, and as much again when it builds its first optimizer (which imports ``torch._dynamo``): on a
small benchmark, more than the work itself, once per process (measured: docs/performance.md,
"Figures behind the code's choices"). Here the launcher starts ``multiprocessing``'s fork server
once, preloaded with what the workers import
(:data:`PRELOAD`; torchrun's forked ranks use the same list, :mod:`harness.runsets.torchrun`),
and each worker is forked from it.

A forked worker is its own process as a ``subprocess`` child was: its own pid, memory, signals
and exit status (negative: ended by that signal); in the launcher's session and process group (a
terminal's Ctrl-C reaches it directly; the server ignores SIGINT); the launcher's environment
(over the variables the server's imports set) and working directory as they are when it starts;
its stdout a pipe to the launcher or a file, its stderr a file. What the server preloaded is
imported, nothing has run: a worker starts from the state a fresh interpreter reaches after the
same imports.

As with any ``multiprocessing`` start method but fork, a launcher that is a script of its own
(not ``harness`` or ``python -m harness``) must guard its top level with
``if __name__ == "__main__":`` (the worker imports the launcher's main module).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from harness.process import flush_std_streams
from harness.reference import worker

# what the workers import anyway: the server imports them once, the workers are forked with them
PRELOAD = [
    "torch",
    "torch._dynamo",  # imported by the first optimizer or DistributedDataParallel a process builds
    "torch.distributed",
    "harness.reference.worker",
    "harness.reference.runs",
    "harness.reference.distributed.session",
    "harness.reference.forkserver_last",  # last: freezes the above for the collector; the server ends with its launcher
]

_CONTEXT = multiprocessing.get_context("forkserver")


def start_server(preload: list[str] | None = None) -> None:
    """Start the fork server now (it imports ``preload``, default :data:`PRELOAD`, while the
    launcher goes on); the first worker waits for it. One server per launcher process: once it
    runs, a later call (and its ``preload``) changes nothing."""
    multiprocessing.set_forkserver_preload(PRELOAD if preload is None else preload)
    multiprocessing.forkserver.ensure_running()


class ForkedProcess:
    """``target(*args)`` (its return value the exit status) in a process forked from the fork
    server: ``pid``, ``stdout`` (text; None when ``stdout_path`` is given), ``poll``, ``wait``,
    ``send_signal``, ``kill`` and ``returncode`` as :class:`subprocess.Popen`'s. Its stderr is
    appended to ``stderr_path``; its stdout to ``stdout_path`` (that file too, if the same), else
    to a pipe read here. ``preload``: the server's, if this starts it (:func:`start_server`)."""

    def __init__(self, target: Callable[..., int], args: tuple[Any, ...] = (), *, stderr_path: str | Path,
                 stdout_path: str | Path | None = None, name: str | None = None, preload: list[str] | None = None):
        start_server(preload)
        reader, writer = _CONTEXT.Pipe(duplex=False) if stdout_path is None else (None, None)
        self._process = _CONTEXT.Process(
            target=_child, name=name,
            args=(target, args, writer, None if stdout_path is None else str(stdout_path), str(stderr_path),
                  dict(os.environ)),
        )
        self.stdout: IO[str] | None = None
        try:
            # SIGINT and SIGTERM wait while the server forks the worker (the first start waits for
            # its imports): an interruption then would leave a worker running that nobody stops
            # (its pid not known yet); they are handled once it is, and stop it
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                self._process.start()
            finally:
                if writer is not None:
                    writer.close()  # the worker holds its own end: end of file here when it ends
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            self.pid: int = self._process.pid  # type: ignore[assignment]
            if reader is not None:
                self.stdout = open(os.dup(reader.fileno()), encoding="utf-8", errors="replace")  # noqa: SIM115
                reader.close()
        except BaseException:
            if self._process.pid is not None:
                self.kill()
                self._process.join()
            raise

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"{self._process.name} (pid {self.pid})", timeout or 0.0)
        if self.stdout is not None:
            self.stdout.close()
        return code

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            try:
                os.kill(self._process.pid, signum)  # type: ignore[arg-type]
            except ProcessLookupError:  # ended in between
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _redirect(fd: int, path: str) -> None:
    opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


def _child(target: Callable[..., int], args: tuple[Any, ...], pipe: Any, stdout_path: str | None, stderr_path: str,
           env: dict[str, str]) -> None:
    """In the forked process: the launcher's environment, the standard streams, then the work."""
    # the launcher's variables as they are now, over what the server's imports set for its
    # workers (the run worker's CUBLAS_WORKSPACE_CONFIG, read when cuBLAS starts)
    os.environ.update(env)
    _redirect(2, stderr_path)
    if pipe is not None:
        os.dup2(pipe.fileno(), 1)
        pipe.close()
    else:
        _redirect(1, stdout_path)  # type: ignore[arg-type]
    code = target(*args)
    flush_std_streams()
    sys.exit(code)  # the exit status the server reports to the launcher; no module teardown


def run_worker(config_path: str) -> int:
    """A run's worker, as ``python -m harness.reference.worker RUN_CONFIG.json`` runs it."""
    return worker.main([config_path])


def forked_run_worker(config_path: str | Path, stderr_path: str | Path) -> ForkedProcess:
    """One run's worker (one rank), its progress lines on ``stdout``."""
    return ForkedProcess(run_worker, (str(config_path),), stderr_path=stderr_path,
                         name=f"harness worker {Path(config_path).name}")
