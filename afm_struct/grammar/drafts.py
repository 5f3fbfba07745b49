"""Which JSON Schema draft a schema declares, and the jsonschema validator class for it."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from ..errors import SchemaError


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
