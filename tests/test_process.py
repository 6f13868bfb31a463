"""harness/process.py: a stop signal that reaches a rank just after a collective failed (the other
node's ranks, stopped first, hung up) is reported as the interruption, not as the failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import os, signal, sys, threading
from harness.process import stop_on_signals, run_pending_signals, interrupt_reason
stop_on_signals(signal.SIGTERM)
threading.Timer({late}, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()  # the launcher's SIGTERM
try:
    raise RuntimeError("Connection reset by peer")  # what the rank's collective raised first
except Exception:
    try:
        run_pending_signals(grace_s={grace})
    except KeyboardInterrupt as stop:
        print(interrupt_reason(stop))
        os._exit(0)
    print("error")
    os._exit(0)
"""


@pytest.mark.parametrize(("late", "grace", "said"), [(0.2, 1.0, "interrupted by SIGTERM"), (3.0, 0.3, "error")])
def test_a_signal_arriving_within_the_grace_is_the_reason(late, grace, said):
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(late=late, grace=grace)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == said, out.stdout + out.stderr
