"""The processes a test started: a launcher's descendants, and the ranks among them."""

from __future__ import annotations

from pathlib import Path


def _table() -> dict[int, tuple[int, str]]:
    """Every process: its parent and its command line."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_text(errors="replace").replace("\0", " ")
        except (OSError, IndexError, ValueError):
            continue
        out[int(stat.parent.name)] = (ppid, cmdline)
    return out


def descendants(pid: int, table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    """Every process below ``pid`` (torchrun starts its ranks in sessions of their own, so a process
    group does not hold them all)."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in (table if table is not None else _table()).items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def ranks_below(pid: int) -> list[int]:
    """The ranks below ``pid``: the processes a fork server forked, torchrun's ranks
    (harness.runsets.torchrun) or a one-rank run's worker (harness.reference.forked)."""
    table = _table()
    return [p for p in descendants(pid, table) if "multiprocessing.forkserver" in table.get(table[p][0], (0, ""))[1]]


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (not ended, not a zombie waiting for its parent)."""
    out = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(pid)
        except (OSError, IndexError):
            pass
    return out
