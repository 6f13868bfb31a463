"""The leaderboard as Markdown and CSV (the JSON is the model itself).

The Markdown is for reading: numbers formatted as the page shows them. The CSV is for a
spreadsheet: every number a number (raw, unformatted: no thousands separators, no ``%``, no
``x``), its unit in the column's name, an empty cell where there is none.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from harness.leaderboard.labels import hardware_text, runs_text
from harness.leaderboard.svg import finite

COLUMNS: tuple[tuple[str, str], ...] = (
    ("rank", "Rank"),
    ("submitter", "Submitter"),
    ("system", "System"),
    ("round", "Round"),
    ("hardware", "Hardware"),
    ("profile", "Profile"),
    ("division", "Division"),
    ("availability", "Availability"),
    ("runs", "Runs"),
    ("score", "Score (min)"),
    ("interval", "95% interval (min)"),
    ("projected", "Projected (min)"),
    ("projected_ratio", "Projected / measured"),
    ("cv", "CV"),
    ("rcp_verdict", "RCP"),
    ("compliance_verdict", "Compliance"),
    ("throughput", "Throughput (samples/s)"),
    ("accelerator_minutes", "Accelerator-minutes"),
    ("speedup", "Speedup vs baseline"),
    ("reasons", "Not ranked because"),
)


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def cells(entry: dict[str, Any]) -> dict[str, str]:
    """One entry's values as display strings, by column key."""
    interval = entry["score_interval_95"]
    projection = entry.get("projection") or {}
    return {
        "rank": str(entry["rank"]) if entry["rank"] else "-",
        "submitter": entry["submitter"],
        "system": entry["label"],
        "round": entry["round"] or "",
        "hardware": "; host ".join(t for t in hardware_text(entry) if t),
        "profile": entry["profile"] or "",
        "division": entry["division"],
        "availability": entry["availability"],
        "runs": runs_text(entry),
        "score": _num(entry["score_minutes"], ".4f"),
        "interval": f"{interval[0]:.4f}-{interval[1]:.4f}" if interval else "",
        "projected": _num(projection.get("minutes"), ".4f"),
        "projected_ratio": _num(projection.get("ratio"), ".2f"),
        "cv": _num(entry["coefficient_of_variation"], ".1%"),
        "rcp_verdict": entry["rcp_verdict"],
        "compliance_verdict": entry["compliance_verdict"],
        "throughput": _num(entry["throughput_samples_per_s"], ",.0f"),
        "accelerator_minutes": _num(entry["accelerator_minutes"], ".2f"),
        "speedup": _num(entry["speedup_vs_baseline"], ".2f") + ("x" if entry["speedup_vs_baseline"] else ""),
        "reasons": "; ".join(entry["reasons"]),
    }


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def render_markdown(board: dict[str, Any]) -> str:
    out = [f"# Leaderboard\n\nGenerated {board['generated_at']} by dlrm-harness {board['harness_version']}"
           + (f"; baseline system: {_md_cell(board['baseline_system'])}" if board["baseline_system"] else "") + ".\n"]
    for group in board["benchmarks"]:
        target = f", target AUC {group['target_auc']}" if group["target_auc"] is not None else ""
        out.append(f"\n## {_md_cell(group['benchmark'])}{target}\n")
        for title, ranked in (("Ranked", True), ("Not ranked", False)):
            rows = [cells(e) for e in group["entries"] if e["ranked"] is ranked]
            if not rows:
                continue
            keys = [k for k, _ in COLUMNS if ranked is False or k != "reasons"]
            out.append(f"\n### {title}\n\n| " + " | ".join(dict(COLUMNS)[k] for k in keys) + " |")
            out.append("|" + "---|" * len(keys))
            out.extend("| " + " | ".join(_md_cell(r[k]) for k in keys) + " |" for r in rows)
    return "\n".join(out) + "\n"


def _interval(entry: dict[str, Any], i: int) -> float | None:
    interval = entry["score_interval_95"]
    return finite(interval[i]) if interval else None


def _projection(entry: dict[str, Any], key: str) -> float | None:
    return finite((entry.get("projection") or {}).get(key))


#: The CSV's columns after ``benchmark``: title (with its unit) and the entry's raw value.
CSV_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("ranked", lambda e: e["ranked"]),
    ("Rank", lambda e: e["rank"]),
    ("Submitter", lambda e: e["submitter"]),
    ("System", lambda e: e["label"]),
    ("Round", lambda e: e["round"]),
    ("Accelerators", lambda e: e["accelerator_count"]),
    ("Accelerator model", lambda e: e["accelerator_model"] if e["accelerator_count"] > 0 else None),
    ("Nodes", lambda e: e["nodes"]),
    ("Host", lambda e: e["host"]),
    ("Profile", lambda e: e["profile"]),
    ("Division", lambda e: e["division"]),
    ("Availability", lambda e: e["availability"]),
    ("Emulated", lambda e: e["emulated"]),
    ("Runs", lambda e: e["runs"]),
    ("Converged runs", lambda e: e["converged_runs"]),
    ("Required runs", lambda e: e["required_runs"]),
    ("Score (min)", lambda e: finite(e["score_minutes"])),
    ("95% interval low (min)", lambda e: _interval(e, 0)),
    ("95% interval high (min)", lambda e: _interval(e, 1)),
    ("Projected (min)", lambda e: _projection(e, "minutes")),
    ("Projected / measured (ratio)", lambda e: _projection(e, "ratio")),
    ("CV (fraction of the mean)", lambda e: finite(e["coefficient_of_variation"])),
    ("RCP", lambda e: e["rcp_verdict"]),
    ("Compliance", lambda e: e["compliance_verdict"]),
    ("Throughput (samples/s)", lambda e: finite(e["throughput_samples_per_s"])),
    ("Accelerator-minutes", lambda e: finite(e["accelerator_minutes"])),
    ("Speedup vs baseline (ratio)", lambda e: finite(e["speedup_vs_baseline"])),
    ("Not ranked because", lambda e: "; ".join(e["reasons"])),
    ("source", lambda e: e["source"]),
)


def render_csv(board: dict[str, Any]) -> str:
    """One row per entry: numbers as numbers, texts defused (:func:`_csv_safe`), nothing as an empty cell."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["benchmark", *(title for title, _ in CSV_COLUMNS)])
    for group in board["benchmarks"]:
        for entry in group["entries"]:
            writer.writerow([_csv_safe(group["benchmark"]), *(_csv_value(value(entry)) for _, value in CSV_COLUMNS)])
    return buf.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    return _csv_safe(value) if isinstance(value, str) else value


def _csv_safe(text: str) -> str:
    """Defuse spreadsheet formulas in user-supplied values (CSV injection): a text that starts like one
    is quoted with ``'``, even one that reads as a number (numbers are written as numbers, never as text)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
