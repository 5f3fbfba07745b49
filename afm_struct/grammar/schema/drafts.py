"""Which JSON Schema draft a schema declares, and the jsonschema validator class for it."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from ...errors import SchemaError


def draft_of(schema: Any) -> int:
    """The draft number a schema declares (3, 4, 6, 7, 2019, 2020); 0 when it declares none."""
    uri = schema.get("$schema", "") if isinstance(schema, dict) else ""
    for marker, draft in (("draft-03", 3), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7),
                          ("2019-09", 2019), ("2020-12", 2020)):
        if marker in str(uri):
            return draft
    return 0


def validator_class(schema: Any) -> Any:
    """The jsonschema validator class a schema declares (Draft 2020-12 when undeclared)."""
    if isinstance(schema, dict) and "$schema" in schema and not isinstance(schema["$schema"], str):
        raise SchemaError("'$schema' must be a string", path="$.$schema", param="schema")
    return validator_for(schema, default=Draft202012Validator)


@functools.cache
def asserting_keywords(draft: int) -> frozenset[str]:
    """The keywords jsonschema checks in ``draft`` (0: undeclared, read as 2020-12); any other
    key of a schema is an annotation there."""
    cls = {3: jsonschema.Draft3Validator, 4: jsonschema.Draft4Validator, 6: jsonschema.Draft6Validator,
           7: jsonschema.Draft7Validator, 2019: jsonschema.Draft201909Validator}.get(
        draft, jsonschema.Draft202012Validator)
    out = set(cls.VALIDATORS)
    if "if" in out:
        out |= {"then", "else"}
    if "contains" in out and draft not in (6, 7):
        out |= {"minContains", "maxContains"}
    if draft in (3, 4):  # booleans that modify minimum / maximum
        out |= {"exclusiveMinimum", "exclusiveMaximum"}
    return frozenset(out)
