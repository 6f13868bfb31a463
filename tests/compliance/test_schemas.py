"""The shipped JSON Schemas are valid schemas of the draft they name (checked here, once, rather
than at every process's first validation: compliance.schemas._validator)."""

from __future__ import annotations

from importlib import resources

import jsonschema
import pytest

from compliance.schemas import load_schema

NAMES = sorted(p.name.removesuffix(".schema.json")
               for p in resources.files("compliance.schemas").iterdir() if p.name.endswith(".schema.json"))


def test_every_schema_file_is_found():
    assert {"benchmark", "profile", "mllog_record", "sharding_plan"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_schema_is_valid_under_its_metaschema(name):
    schema = load_schema(name)
    jsonschema.validators.validator_for(schema).check_schema(schema)


def test_the_metaschema_check_catches_a_broken_schema():
    broken = {**load_schema("profile"), "type": 5}
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.validators.validator_for(broken).check_schema(broken)
