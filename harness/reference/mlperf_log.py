"""The run's MLPerf log: every record goes through ``mlperf_logging.mllog``, validated first.

Only rank 0 writes. Each record is checked against ``compliance/schemas/mllog_record.schema.json``
before it is written, and must be strict JSON (no NaN): a record that would be invalid is a
bug, raised at once rather than written (mllog itself would swallow an encoding error).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import mllog

from compliance.schemas import schema_errors
from harness.errors import ErrorCategory, HarnessError

PREFIX = ":::MLLOG "


class EventType(enum.Enum):
    POINT = "POINT_IN_TIME"
    START = "INTERVAL_START"
    END = "INTERVAL_END"


class MLPerfLog:
    """An MLPerf result log file written through mllog.

    Args:
        path: the log file (appended to).
        enabled: False on every rank but 0, which makes every call a no-op.
    """

    def __init__(self, path: Path, *, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled
        self._handler: logging.Handler | None = None
        if not enabled:
            return
        logger = logging.getLogger(f"harness.mllog.{os.getpid()}.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        self._handler = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        logger.addHandler(self._handler)
        # stack offset 2: the metadata names the trainer hook that called event/start/end
        self._mllogger = mllog.MLLogger(logger=logger, default_stack_offset=3, root_dir=str(_root_dir()))
        self._methods = {
            EventType.POINT: self._mllogger.event,
            EventType.START: self._mllogger.start,
            EventType.END: self._mllogger.end,
        }

    def event(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._emit(EventType.POINT, key, value, metadata)

    def start(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._emit(EventType.START, key, value, metadata)

    def end(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._emit(EventType.END, key, value, metadata)

    def _emit(self, kind: EventType, key: str, value: Any, metadata: dict[str, Any] | None) -> None:
        if not self.enabled:
            return
        time_ms = int(time.time() * 1000)
        record = {
            "namespace": "",
            "time_ms": time_ms,
            "event_type": kind.value,
            "key": key,
            "value": value,
            "metadata": {"file": "harness", "lineno": 0, **(metadata or {})},
        }
        errors = schema_errors(record, "mllog_record")
        if errors:
            raise HarnessError(f"refusing to log an invalid MLLOG record for {key!r}: {errors[0]}", ErrorCategory.RUN_FAILED)
        try:
            json.dumps(record, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise HarnessError(f"MLLOG record for {key!r} is not strict JSON: {err}", ErrorCategory.RUN_FAILED) from None
        # The one source line through which every record of the run is written.
        self._methods[kind](key=key, value=value, metadata=metadata, time_ms=time_ms, stack_offset=3)

    def close(self) -> None:
        if self._handler is not None:
            self._handler.flush()
            self._handler.close()
            self._handler = None


def _root_dir() -> Path:
    return Path(__file__).resolve().parents[2]


def mllog_payloads(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text after the prefix)`` of each MLLOG line of a log file.

    Lines without the prefix (other output) are skipped; the prefix may follow a rank
    marker (``0: :::MLLOG {...}``). Lines are split by :func:`compliance.logread.iter_lines`,
    the checker's own reader, so no line costs more memory than its bound. An unreadable
    file, or an MLLOG line over that bound, is one HarnessError.
    """
    from compliance.logread import MAX_LINE_BYTES, iter_lines

    prefix = PREFIX.encode()
    try:
        for line in iter_lines(path):
            if line.too_long:
                if line.has_token:
                    raise HarnessError(f"{path}:{line.lineno}: MLLOG line longer than {MAX_LINE_BYTES} bytes")
                continue
            at = line.data.find(prefix)
            if at >= 0:
                yield line.lineno, line.data[at + len(prefix) :].decode("utf-8", errors="replace")
    except OSError as err:
        raise HarnessError(f"{path}: cannot read ({err.strerror})", ErrorCategory.BAD_INPUT) from None


def parse_records(path: Path) -> list[dict[str, Any]]:
    """The MLLOG records of a log file, in order (lines without the prefix are skipped).

    A line with the prefix whose JSON is malformed raises HarnessError naming file and line.
    """
    records = []
    for lineno, text in mllog_payloads(path):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise HarnessError(f"{path}:{lineno}: malformed MLLOG line: {err.msg}") from None
        if not isinstance(record, dict) or "key" not in record:
            raise HarnessError(f"{path}:{lineno}: MLLOG record is not an object with a key")
        records.append(record)
    return records
