"""What a run set tells the user while it works (:class:`Reporter`; the CLI supplies a terminal
one), and how every message names a run."""

from __future__ import annotations

from typing import Any

from harness.rules.seeds import Seed
from harness.runsets.score import RunOutcome


class Reporter:
    """What a run set tells the user while it works; the CLI supplies a terminal one."""

    def run_started(self, index: int, total: int, seed: Seed, train_samples: int) -> None: ...

    def progress(self, index: int, event: dict[str, Any]) -> None: ...

    def run_finished(self, outcome: RunOutcome) -> None: ...

    def message(self, text: str) -> None: ...


def run_name(index: int) -> str:
    """How every message names run ``index``: counted from 1, with its file (counted from 0,
    as MLPerf names result files): ``run 2 (result_1.txt)``."""
    return f"run {index + 1} (result_{index}.txt)"
