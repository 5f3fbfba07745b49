"""After-the-fact checks for best-effort outputs: parse, validate, and salvage the JSON payload.

:func:`validate_json` validates against the caller's ORIGINAL schema (not the rewritten or
relaxed one the engine enforced), so a downgraded response is judged by what was asked for.
:func:`sanitize_json_text` is for the unconstrained rung: models wrap JSON in prose and fences.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

from .schema.drafts import validator_class
from .schema.paths import json_path
from .schema.string_formats import format_checker
from .spec import ValidationOutcome

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_MAX_ERRORS = 8


def parse_json(text: str) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, message)``."""
    try:
        return json.loads(text), None
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"invalid JSON: {exc}"


def validate_json(text: str, schema: Any | None, *, require_object: bool = False) -> ValidationOutcome:
    """Parse ``text``; check it against ``schema`` (jsonschema; formats asserted as the schema's
    draft defines them, see :mod:`.formats`)."""
    value, err = parse_json(text)
    if err is not None:
        return ValidationOutcome(False, (err,))
    if require_object and not isinstance(value, dict):
        return ValidationOutcome(False, (f"expected a JSON object, got {type(value).__name__}",), value)
    if schema is None:
        return ValidationOutcome(True, (), value)
    cls = validator_class(schema)
    validator = cls(schema, format_checker=format_checker(cls))  # the draft's own formats
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            errors = [f"{json_path(e.absolute_path)}: {e.message}"
                      for _, e in zip(range(_MAX_ERRORS), validator.iter_errors(value), strict=False)]
        except Exception as exc:  # e.g. a pattern Python's re cannot compile
            return ValidationOutcome(False, (f"cannot validate: {exc}",), value)
    return ValidationOutcome(not errors, tuple(errors), value)


def sanitize_json_text(text: str) -> str:
    """The JSON payload inside ``text``: fences stripped, leading/trailing prose dropped.

    Returns ``text`` stripped when no JSON value can be found (validation then reports why).
    """
    stripped = text.strip()
    candidates = [m.group(1).strip() for m in _FENCE.finditer(stripped)] + [stripped]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        try:
            json.loads(candidate)
            return candidate
        except (json.JSONDecodeError, RecursionError):
            pass
        for i, ch in enumerate(candidate):
            if ch in "{[":
                try:
                    _, end = decoder.raw_decode(candidate, i)
                    return candidate[i:end]
                except (json.JSONDecodeError, RecursionError):
                    continue
    return stripped
