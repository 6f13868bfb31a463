"""A real tmpfs for the tests of the machine's own faults (a disk that fills up, a folder that cannot
be written): mounted by the test as root, as CI runs; the test is skipped where mounting is not
allowed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(target: Path, *options: str) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)],
                          capture_output=True, check=False).returncode == 0


@contextlib.contextmanager
def tmpfs(target: Path, *options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``target`` for the test's duration (skipped where mounting is not allowed)."""
    if os.geteuid() != 0 or shutil.which("mount") is None or not _mount(target, *options):
        pytest.skip("needs root and mount (a tmpfs); CI runs as root")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
