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
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import mllog

from compliance.schemas import schema_errors
from harness.errors import ErrorCategory, HarnessError
from harness.mllog.reader import read_records


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
    return Path(__file__).resolve().parents[3]


def parse_records(path: Path) -> list[dict[str, Any]]:
    """The MLLOG records of a log file, in order (lines without the prefix are skipped), read by
    :func:`harness.mllog.reader.read_records`, the one MLLOG reader.

    A line with the prefix whose JSON is malformed raises HarnessError naming file and line.
    """
    return [record for _, record in read_records(path, what="MLLOG line")]
