"""Imported only by a fork server of :mod:`harness.reference.forked` (its last preload; the
run set's, ``harness infer``'s and torchrun's): what the server imported is frozen for the garbage
collector, and the server ends at once when its launcher does, without tearing down its modules.

Frozen (``gc.freeze``): the objects of the preloaded modules (torch's are hundreds of thousands)
move to the collector's permanent generation, in the server and so in every worker forked from
it. A full collection, which Python starts on its own as a training loop allocates, walks every
tracked object: without the freeze, each of them walked through torch's import-time objects,
which live as long as the process anyway. Measured on the sharded equivalence driver (4 ranks on
2 cores, 2 plans of 50 steps): a rank's main thread 34 -> 23 ms of CPU per step, the launch 12.3
-> 9.7 s. Nothing is computed differently; what the workers make after the fork is collected as
before. (Python's documentation recommends the same before a fork without exec: the frozen
objects' pages are not written to by the collector, so the workers share them.)

The server leaves when its launcher's pipe closes, by ``SystemExit``; a normal interpreter exit
would then free torch's modules one by one, seconds of CPU during which the server outlives the
launcher that started it. The workers forked from the server inherit this exit handler; it does
nothing in them (another pid).
"""

from __future__ import annotations

import atexit
import gc
import os

from harness.process import flush_std_streams

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
gc.freeze()
