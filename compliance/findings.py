"""What a check says: findings, each tied to a rule and, where there is one, a file and line."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Severity(enum.Enum):
    ERROR = "error"  # the input breaks a rule: the verdict is fail
    WARNING = "warning"  # worth a reviewer's eye; does not fail (MLPerf's checker in --quiet drops these)


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one place: ``(rule id, severity, message, file:line)``."""

    rule: str
    severity: Severity
    message: str
    path: Path | None = None
    line: int | None = None
    key: str | None = None  # the MLLOG key a keyed finding is about (a later rule file may override it)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    @property
    def where(self) -> str:
        if self.path is None:
            return ""
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "message": self.message,
            "file": str(self.path) if self.path is not None else None,
            "line": self.line,
        }

    def human(self) -> str:
        where = f"{self.where}: " if self.where else ""
        return f"{where}{self.severity.value}: {self.message} [{self.rule}]"


def passed(findings: list[Finding]) -> bool:
    return not any(f.is_error for f in findings)
