"""``harness report``: one run set (or every run set below a folder) seen from inside.

:func:`harness.report.collect.collect_report` reads the logs into typed values;
:func:`write_report` writes them as one self-contained ``index.html``
(:mod:`harness.report.html`); :mod:`harness.report.text` gives the terminal summary.
Torch-free: it reads logs only, never imports the reference.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import ErrorCategory, HarnessError, io_fault
from harness.files import write_atomic
from harness.report.collect import Report
from harness.report.html import render_html


def write_report(report: Report, out_dir: Path) -> Path:
    """Write ``index.html`` into ``out_dir`` (created; other files there are left alone); its path."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise HarnessError(f"{out_dir} exists and is not a folder: give another -o", ErrorCategory.BAD_INPUT)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise io_fault(err, out_dir, "making the report's folder") from None
    index = out_dir / "index.html"
    write_atomic(index, render_html(report))
    return index
