"""One training run in its own process: ``python -m harness.reference.worker RUN_CONFIG.json``.

Exit status: 0 when the run ended (``success`` or ``aborted`` at the epoch limit; the log
says which), 130 when interrupted (SIGINT or SIGTERM; the log ends ``run_stop
status=aborted``), 1 on an error (one line on stderr; the log ends the same way).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

# deterministic cuBLAS on a GPU (read when cuBLAS starts, so before torch is used)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

from harness.errors import HarnessError


def _interrupt_once(signum, frame):  # noqa: ARG001
    """The first SIGINT/SIGTERM interrupts the run; later ones are ignored, so that a second
    Ctrl-C (or the parent forwarding the one the terminal already sent) cannot cut the
    ``run_stop status=aborted`` record short while it is being written."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.reference.worker RUN_CONFIG.json", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    from harness.reference.trainer import RunConfig, run_from_config

    try:
        config = RunConfig.from_json(Path(argv[0]).read_text())
        run_from_config(config)
    except KeyboardInterrupt:
        return _end("harness worker: interrupted", 130)
    except HarnessError as err:
        return _end(f"harness worker: error: {err}", 1)
    except Exception as err:  # one line for the user; the run's log already ends aborted
        return _end(f"harness worker: error: {type(err).__name__}: {err}", 1)
    return 0


def _end(message: str, code: int) -> int:
    """Report and end. A rank of a distributed run exits at once: its process group may still
    hold collectives that other ranks will never join, and tearing it down would wait for them
    (its log, on rank 0, is already complete and closed)."""
    print(message, file=sys.stderr, flush=True)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
