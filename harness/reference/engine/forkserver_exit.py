"""Imported only by a fork server of :mod:`harness.reference.engine.forked` (its last preload; the
run set's, ``harness infer``'s and torchrun's): the server ends at once when its launcher does,
without tearing down the modules it preloaded.

The server leaves when its launcher's pipe closes, by ``SystemExit``; a normal interpreter exit
would then free torch's modules one by one, seconds of CPU during which the server outlives the
launcher that started it. The workers forked from the server inherit this exit handler; it does
nothing in them (another pid).
"""

from __future__ import annotations

import atexit
import os

from harness.errors import flush_std_streams

_SERVER = os.getpid()


def _end_now() -> None:
    if os.getpid() != _SERVER:
        return
    while True:  # reap the ranks that have ended (the server's children), as it would have
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    flush_std_streams()  # not exit_now: this is an exit handler already
    os._exit(0)


atexit.register(_end_now)
