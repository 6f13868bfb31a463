"""The leaderboard as Markdown and CSV (the JSON is the model itself)."""

from __future__ import annotations

import csv
import io
from typing import Any

from harness.leaderboard.labels import runs_text

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
        "hardware": f"{entry['accelerator_count']} x {entry['accelerator_model']}; host {entry['host']}",
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


def render_csv(board: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["benchmark", "ranked", *(title for _, title in COLUMNS), "source"])
    for group in board["benchmarks"]:
        for entry in group["entries"]:
            row = cells(entry)
            writer.writerow([group["benchmark"], entry["ranked"], *(_csv_safe(row[k]) for k, _ in COLUMNS), entry["source"]])
    return buf.getvalue()


def _csv_safe(text: str) -> str:
    """Defuse spreadsheet formulas in user-supplied values (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@") and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return False
