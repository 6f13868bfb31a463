"""One training run in its own process: ``python -m harness.reference.worker RUN_CONFIG.json``.

Exit status: 0 when the run ended (``success`` or ``aborted`` at the epoch limit; the log
says which), 130 when interrupted by SIGINT, 143 by SIGTERM (the log ends ``run_stop
status=aborted``, its reason saying which), 5 on an I/O fault (a full disk, a folder that cannot
be written: one line naming the file), 1 on an error (one line on stderr; the log ends the same way).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

# deterministic cuBLAS on a GPU (read when cuBLAS starts, so before torch is used)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

from harness.errors import HarnessError
from harness.process import (
    detach_forked_rank,
    end_process,
    interrupt_reason,
    signal_of,
    stop_on_signals,
)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.reference.worker RUN_CONFIG.json", file=sys.stderr)
        return 2
    # the first SIGINT/SIGTERM interrupts the run, later ones are ignored (a second Ctrl-C, or the
    # parent forwarding the one the terminal already sent, cannot cut run_stop short)
    stop_on_signals(signal.SIGINT, signal.SIGTERM)
    # here, not at the top: the run set's launcher imports this module (through forked.py) and must not load torch
    from harness.reference.engine.run_config import RunConfig
    from harness.reference.runs import run_from_config

    config = None
    try:
        config = RunConfig.from_json(Path(argv[0]).read_text())
        run_from_config(config)
    except KeyboardInterrupt as err:
        return _end(f"harness worker: {interrupt_reason(err)}", 128 + signal_of(err))
    except HarnessError as err:
        return _end(f"harness worker: error: {err}", 1)
    except OSError as err:  # the machine's: a full disk, a folder that cannot be written, an I/O error
        where = err.filename if err.filename is not None else (config.log_path if config is not None else argv[0])
        message = f"{where}: {err.strerror or err}"
        # also on stdout, the parent's pipe: the stderr file may be on the disk that is full
        with contextlib.suppress(OSError):
            print("HARNESS_PROGRESS " + json.dumps({"io_fault": message}), flush=True)
        return _end(f"harness worker: I/O fault: {message}", 5)
    except Exception as err:  # one line for the user; the run's log already ends aborted
        return _end(f"harness worker: error: {type(err).__name__}: {err}", 1)
    return 0


def _end(message: str, code: int) -> int:
    """Report and end. A rank of a distributed run exits at once: its process group may still
    hold collectives that other ranks will never join, and tearing it down would wait for them
    (its log, on rank 0, is already complete and closed)."""
    with contextlib.suppress(OSError):  # stderr may be a file on a full disk
        print(message, file=sys.stderr, flush=True)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    detach_forked_rank()
    end_process(main(sys.argv[1:]))
