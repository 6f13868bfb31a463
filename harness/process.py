"""How a harness process stops and ends: signals turned into one interrupt, and an exit that
does not tear every module down.

SIGINT (Ctrl-C) and SIGTERM (a batch scheduler, ``timeout``, a container stop) stop a run the same
way (:class:`Interrupted`); only the words and the exit code (128 + the signal's number) differ. A
command ends with :func:`exit_now`; a worker or rank with :func:`end_process`. Only entry points
(the CLI, workers, ranks) end the process; the library raises.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import sys
import threading
import time

from harness.errors import ErrorCategory


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal: SIGINT (Ctrl-C) or SIGTERM (what a batch scheduler,
    ``timeout`` or a container stop sends). Both stop a run the same way; only the words and
    the exit code (128 + the signal's number) differ."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def signal_of(err: BaseException) -> int:
    """The signal behind an interrupt (a bare KeyboardInterrupt is Python's own SIGINT)."""
    return getattr(err, "signum", int(signal.SIGINT))


def interrupt_reason(err: BaseException) -> str:
    """How a log and a message say that a run was stopped: ``interrupted`` (SIGINT), or
    ``interrupted by SIGTERM``."""
    signum = signal_of(err)
    return "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"


def interrupt_category(err: BaseException) -> ErrorCategory:
    return ErrorCategory.INTERRUPTED if signal_of(err) == signal.SIGINT else ErrorCategory.TERMINATED


def stop_on_signals(*signums: int) -> None:
    """Turn the first of these signals into :class:`Interrupted` (raised where the main thread
    is), and ignore the later ones, so that a second signal cannot cut short the record of the
    first being written.

    A signal that comes while torch is being imported waits for the import to end: torch's
    import runs Python code from inside its C++ initialisation, and an exception raised there
    aborts the process (``terminate called after throwing an instance of
    'pybind11::error_already_set'``, exit -6) instead of stopping it in one line. The signal is
    sent again once the import is done, and handled then."""

    def handler(signum, frame):  # noqa: ARG001
        if _importing("torch"):
            threading.Thread(target=_resend_after_import, args=("torch", signum), daemon=True,
                             name="harness-signal-after-import").start()
            return
        for s in signums:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    for s in signums:
        signal.signal(s, handler)


def run_pending_signals(grace_s: float = 0.0) -> None:
    """Give a signal that arrived while the main thread was inside C code its Python handler now,
    and wait up to ``grace_s`` seconds for one still on its way.

    CPython runs a signal's Python handler at the interpreter's next check (entering a Python
    function, or a ``time.sleep`` the signal interrupts): where :func:`stop_on_signals` installed the
    handler, a SIGINT or SIGTERM raises :class:`Interrupted` here. A rank blocked in a collective
    when a batch scheduler stops every node's launcher sees the collective fail as the other
    node's ranks hang up, often before its own launcher's SIGTERM reaches it; waiting a moment
    before reporting the failure reports the interruption that caused it instead."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        time.sleep(0.05)


def _importing(name: str) -> bool:
    """Whether module ``name`` is being imported now (its code running, not yet done)."""
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _resend_after_import(name: str, signum: int) -> None:
    while _importing(name):
        time.sleep(0.01)
    os.kill(os.getpid(), signum)


def forked_rank() -> bool:
    """Whether this process is a rank that torchrun forked (``--run-path`` with the fork server of
    :mod:`harness.runsets.torchrun`) rather than started as a script."""
    return multiprocessing.parent_process() is not None


def detach_forked_rank() -> None:
    """Give a forked rank a session of its own, as torchrun gives the ranks it starts as scripts:
    a terminal's Ctrl-C then reaches the rank through torchrun only, and the scheduler shares the
    CPU between the ranks and other sessions as it did (with autogroup, per session)."""
    if forked_rank():
        os.setsid()


def end_process(code: int) -> None:
    """End a worker process with ``code``: :func:`exit_now`; or, in a rank that torchrun forked
    and runs as a function (``--run-path``, :mod:`harness.runsets.torchrun`), ``SystemExit``, for
    torchrun waits for the function to return (``SystemExit(0)`` counts as returning) and then ends
    the process without tearing its modules down."""
    if forked_rank():
        sys.exit(code)
    exit_now(code)


def flush_std_streams() -> None:
    """Flush stdout and stderr, as an ending process must before ``os._exit``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed stream, or a full disk under a redirected one
            pass


def exit_now(code: int) -> None:
    """End the process with ``code`` without tearing down every module first.

    A process that has loaded torch and torch._dynamo spends CPU time at a normal exit freeing
    modules nobody will use again: seconds a run set pays per run, and per rank on emulated ranks
    that share the CPU (measured: docs/performance.md, "Figures behind the code's choices").
    Everything the process wrote is closed or flushed by now; the exit handlers still run (logging's flush, finalizers), the standard
    streams are flushed, and a process with other threads still alive exits normally, joining
    them."""
    atexit._run_exitfuncs()
    flush_std_streams()
    if threading.active_count() > 1:
        sys.exit(code)
    os._exit(code)
