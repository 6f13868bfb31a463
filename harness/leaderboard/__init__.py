"""The leaderboard: every run set under some results trees, compared.

:func:`harness.leaderboard.collect.build_leaderboard` builds the model (plain JSON,
``compliance/schemas/leaderboard.schema.json``); :func:`write_leaderboard` writes it as
``index.html`` (self-contained, with charts), ``leaderboard.md``, ``leaderboard.csv`` and
``leaderboard.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.files import write_atomic
from harness.leaderboard.html import render_html
from harness.leaderboard.tables import render_csv, render_markdown


def write_leaderboard(board: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write the four files into ``out_dir`` (created; other files there are left alone)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise HarnessError(f"{out_dir} exists and is not a directory", ErrorCategory.BAD_INPUT)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "index.html": render_html(board),
        "leaderboard.md": render_markdown(board),
        "leaderboard.csv": render_csv(board),
        "leaderboard.json": json.dumps(board, indent=1, sort_keys=True, allow_nan=False),
    }
    written = {}
    for name, text in files.items():
        write_atomic(out_dir / name, text)
        written[name] = out_dir / name
    return written
