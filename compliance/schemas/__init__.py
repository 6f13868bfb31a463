"""JSON Schemas for everything the harness reads or writes, and one way to validate."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any

from harness.errors import ErrorCategory, HarnessError


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema ``compliance/schemas/<name>.schema.json``."""
    path = resources.files(__package__).joinpath(f"{name}.schema.json")
    if not path.is_file():
        raise HarnessError(f"no schema named {name!r}", ErrorCategory.NOT_FOUND)
    return json.loads(path.read_text())


if TYPE_CHECKING:
    import jsonschema


@functools.cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    import jsonschema  # here: its import (its metaschemas' registry) is most of a check's start-up

    schema = load_schema(name)
    # not checked against its metaschema here (CPU time in every process that validates anything, a
    # run's ranks included; measured: docs/performance.md, "Figures behind the code's choices"): the
    # schemas ship with the code, and
    # tests/compliance/test_schemas.py checks every one of them
    return jsonschema.validators.validator_for(schema)(schema)


def schema_errors(instance: Any, name: str) -> list[str]:
    """Every violation of schema ``name`` by ``instance``, as ``path: message`` strings."""
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors]


def validate(instance: Any, name: str, *, what: str) -> None:
    """Raise one clear :class:`HarnessError` when ``instance`` violates schema ``name``.

    ``what`` names the thing for the message, e.g. ``"profile zionex-8gpu.yaml"``.
    """
    errors = schema_errors(instance, name)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise HarnessError(f"{what} is invalid: {errors[0]}{more}", ErrorCategory.BAD_INPUT)
