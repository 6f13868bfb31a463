"""torchrun, its ranks forked from a process that has already imported torch:
``python -m harness.runsets.torchrun [torchrun's options] --run-path --start-method=forkserver SCRIPT ARGS``.

This is ``torch.distributed.run`` itself (its arguments, its elastic agent, its rendezvous, its
signal handling and failure report), with one thing added: before it starts, the
``multiprocessing`` fork server that ``--start-method=forkserver`` uses is told to import torch,
``torch._dynamo`` and the harness's training modules once (``set_forkserver_preload``). With
``--run-path`` torchrun starts each rank as a function (``runpy.run_path`` of SCRIPT) in a process
forked from that server, instead of a fresh interpreter per rank; so the ranks share one import.

Why: a fresh interpreter pays seconds of CPU to import torch and as much again the first time it
builds an optimizer or ``DistributedDataParallel`` (both import ``torch._dynamo``). On the CPU of a
laptop or a CI runner an emulated 8-rank run paid that 8 times over before its first step (measured:
docs/performance.md, "Figures behind the code's choices"); forked ranks pay it once. Each rank is still its own process (own pid,
own memory, own signals): killing one fails the run as before, and torchrun stops the others.
"""

from __future__ import annotations

import multiprocessing

from harness.process import exit_now
from harness.reference.forked import PRELOAD

# the options that make torchrun start its ranks from the preloaded server
FORKED_RANKS = ["--run-path", "--start-method=forkserver"]


def main() -> None:
    multiprocessing.set_forkserver_preload(PRELOAD)
    # here, not at the top: the launcher imports this module (FORKED_RANKS) and must not import torch
    from torch.distributed.run import main as torchrun

    torchrun()  # a failed rank raises (torchrun's report, exit status 1), as torchrun does
    exit_now(0)  # without tearing torch's modules down


if __name__ == "__main__":
    main()
