"""Reading MLLOG lines out of any file, however broken, the way MLPerf's checker tokenises them.

MLPerf's parser (``mlperf_logging.compliance_checker.mlp_parser``) reads a log as latin-1
text with universal newlines, keeps the lines that contain ``:::MLLOG ``, drops everything
up to the *last* occurrence of that token (so rank prefixes such as ``0: `` vanish) and
strips whitespace. This module does the same, with three differences that make it safe on
hostile input: it reads bytes in bounded chunks, so a 2 GB line costs no more memory than
:data:`MAX_LINE_BYTES`; a line longer than that is reported, not parsed; and line numbers
are the file's own (1-based), not the index among MLLOG lines.

It is the one reader of MLLOG files: the checker takes every record with the problems beside
them (:func:`parse_log`); scoring, the leaderboard and the harness's own readers of its logs
take the records' JSON objects and stop at the first line that is not one (:func:`read_records`).
Torch-free, as all of ``harness/mllog/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ErrorCategory, HarnessError

TOKEN = b":::MLLOG "
MAX_LINE_BYTES = 1 << 20  # 1 MiB: real MLLOG lines are well under 10 kB
_CHUNK = 1 << 20


@dataclass(frozen=True)
class RawLine:
    lineno: int
    data: bytes  # without its line ending; empty when the line was too long
    too_long: bool = False
    has_token: bool = False  # for a too-long line: whether it contained the MLLOG token


def _next_break(chunk: bytes, start: int) -> tuple[int, int]:
    """``(index, length)`` of the next line break in ``chunk`` from ``start``; ``(-1, 0)`` if none."""
    n = chunk.find(b"\n", start)
    r = chunk.find(b"\r", start, n if n >= 0 else len(chunk))
    if r >= 0:
        return (r, 2) if chunk[r + 1 : r + 2] == b"\n" else (r, 1)
    return (n, 1) if n >= 0 else (-1, 0)


def iter_lines(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[RawLine]:
    """The lines of a file as bytes, split on ``\\n``, ``\\r\\n`` and ``\\r`` as Python's text mode does.

    Raises OSError (the caller reports it); never holds more than ``max_line_bytes`` of one line.
    """
    keep = len(TOKEN) - 1
    with open(path, "rb") as f:
        lineno = 1
        pending = b""  # the line so far, or (once it overflowed) its last few bytes
        overflow = False
        token_seen = False
        pending_cr = False
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            if pending_cr:
                # a "\r" ended the previous chunk: a "\n" opening this one belongs to it
                pending_cr = False
                if chunk.startswith(b"\n"):
                    chunk = chunk[1:]
            start = 0
            while True:
                at, size = _next_break(chunk, start)
                if at < 0:
                    break
                if size == 1 and chunk[at] == 13 and at + 1 == len(chunk):
                    pending_cr = True
                piece = chunk[start:at]
                if not overflow and len(pending) + len(piece) <= max_line_bytes:
                    yield RawLine(lineno, pending + piece)
                else:
                    yield RawLine(lineno, b"", too_long=True, has_token=token_seen or TOKEN in pending + piece[:keep]
                                  or TOKEN in piece)
                lineno += 1
                pending, overflow, token_seen = b"", False, False
                start = at + size
            rest = chunk[start:]
            if not overflow and len(pending) + len(rest) > max_line_bytes:
                overflow = True
            if overflow:
                token_seen = token_seen or TOKEN in pending + rest[:keep] or TOKEN in rest
                pending = (pending + rest)[-keep:] if len(rest) < keep else rest[-keep:]
            else:
                pending += rest
        if overflow:
            yield RawLine(lineno, b"", too_long=True, has_token=token_seen)
        elif pending:
            yield RawLine(lineno, pending)


@dataclass(frozen=True)
class Record:
    """One parsed MLLOG record."""

    lineno: int
    time_ms: float
    key: str
    value: Any
    metadata: Any
    raw: dict[str, Any] = field(hash=False, compare=False)


@dataclass(frozen=True)
class ParseProblem:
    lineno: int
    message: str


def mllog_text(line: RawLine, *, encoding: str = "latin-1") -> str | None:
    """The JSON text of an MLLOG line (after the last token), or None when it is not one.

    ``latin-1`` as MLPerf's checker reads logs; the readers of values (names shown to people)
    pass ``utf-8``, the encoding logs are written in, and get U+FFFD for bytes that are not.
    """
    at = line.data.rfind(TOKEN)
    if at < 0:
        return None
    return line.data[at + len(TOKEN) :].decode(encoding, errors="replace").strip()


def mllog_texts(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES,
                encoding: str = "latin-1") -> Iterator[tuple[int, str | None]]:
    """``(line number, JSON text)`` of each MLLOG line of a file, other lines skipped; the text
    is None for an MLLOG line longer than ``max_line_bytes`` (not read). Raises OSError."""
    for line in iter_lines(path, max_line_bytes=max_line_bytes):
        if line.too_long:
            if line.has_token:
                yield line.lineno, None
            continue
        text = mllog_text(line, encoding=encoding)
        if text is not None:
            yield line.lineno, text


def _json_object(lineno: int, text: str) -> dict[str, Any] | ParseProblem:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as err:
        return ParseProblem(lineno, f"not JSON ({getattr(err, 'msg', type(err).__name__)})")
    if not isinstance(obj, dict):
        return ParseProblem(lineno, f"an MLLOG record must be a JSON object, not {type(obj).__name__}")
    return obj


def parse_object(lineno: int, text: str) -> dict[str, Any] | ParseProblem:
    """The JSON object of an MLLOG line with a string ``key`` (the other fields as they are),
    or why the line is not one. Never raises."""
    obj = _json_object(lineno, text)
    if isinstance(obj, ParseProblem):
        return obj
    if "key" not in obj:
        return ParseProblem(lineno, "MLLOG record lacks key")
    if not isinstance(obj["key"], str):
        return ParseProblem(lineno, "MLLOG record's key is not a string")
    return obj


def parse_record(lineno: int, text: str) -> Record | ParseProblem:
    """A record, or why the line is not one. Never raises."""
    obj = _json_object(lineno, text)
    if isinstance(obj, ParseProblem):
        return obj
    missing = [k for k in ("key", "time_ms", "value", "metadata") if k not in obj]
    if missing:
        return ParseProblem(lineno, f"MLLOG record lacks {', '.join(missing)}")
    if not isinstance(obj["key"], str):
        return ParseProblem(lineno, "MLLOG record's key is not a string")
    time_ms = obj["time_ms"]
    if isinstance(time_ms, bool) or not isinstance(time_ms, (int, float, str)):
        return ParseProblem(lineno, "MLLOG record's time_ms is not a number")
    try:
        t = float(time_ms)
    except (ValueError, OverflowError):
        return ParseProblem(lineno, f"MLLOG record's time_ms {str(time_ms)[:40]!r} is not a number")
    return Record(lineno, t, obj["key"], obj["value"], obj["metadata"], obj)


@dataclass
class ParsedLog:
    path: Path
    records: list[Record]
    problems: list[ParseProblem]
    unreadable: str | None = None  # why the file could not be read at all

    def first(self, key: str) -> Any:
        """The value of the first record of ``key`` (None when there is none)."""
        return next((r.value for r in self.records if r.key == key), None)


def parse_log(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> ParsedLog:
    """Every MLLOG record of a file, and every line that looked like one but is not. Never raises."""
    records: list[Record] = []
    problems: list[ParseProblem] = []
    try:
        for lineno, text in mllog_texts(path, max_line_bytes=max_line_bytes):
            if text is None:
                problems.append(ParseProblem(lineno, f"MLLOG line longer than {max_line_bytes} bytes, not read"))
                continue
            parsed = parse_record(lineno, text)
            if isinstance(parsed, Record):
                records.append(parsed)
            else:
                problems.append(parsed)
    except OSError as err:
        return ParsedLog(path, records, problems, unreadable=err.strerror or type(err).__name__)
    except MemoryError:
        return ParsedLog(path, records, problems, unreadable="out of memory")
    return ParsedLog(path, records, problems)


def read_records(path: Path, *, what: str = "MLLOG line") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of each MLLOG line of a file, in order, for the readers that
    take a log's values rather than judge it: other lines are skipped, a rank prefix
    (``0: :::MLLOG {...}``) is allowed, and a record is any JSON object with a string ``key``.

    The first MLLOG line that is not one, an MLLOG line over :data:`MAX_LINE_BYTES` and an
    unreadable file are each one HarnessError naming the file (and line): ``malformed <what>``.
    """
    try:
        for lineno, text in mllog_texts(Path(path), encoding="utf-8"):
            if text is None:
                raise HarnessError(f"{path}:{lineno}: MLLOG line longer than {MAX_LINE_BYTES} bytes")
            obj = parse_object(lineno, text)
            if isinstance(obj, ParseProblem):
                raise HarnessError(f"{path}:{lineno}: malformed {what}: {obj.message}")
            yield lineno, obj
    except OSError as err:
        raise HarnessError(f"{path}: cannot read ({err.strerror or type(err).__name__})", ErrorCategory.BAD_INPUT) from None
    except MemoryError:
        raise HarnessError(f"{path}: cannot read (out of memory)", ErrorCategory.BAD_INPUT) from None
