"""Constraint set-up shared by CLI commands (``generate --schema``, ``bench decode``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequestError

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


def read_schema(path: Path) -> Any:
    """A JSON Schema from a file (MaskBench files: their ``schema`` member)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"cannot read a JSON Schema from {path}: {exc}") from exc
    if isinstance(data, dict) and "schema" in data and "tests" in data:
        return data["schema"]
    return data


def compile_for_cli(tokenizer: Tokenizer, schema_path: Path | None, *, json_object: bool = False,
                    backend: str = "llguidance") -> Any:
    """Compile ``--schema`` / ``--json-object``; say on stderr when the result is best-effort."""
    from ..grammar.compiler import compile_constraint
    from ..grammar.spec import CompileOptions, JsonObjectRequest, JsonSchemaRequest, Mode

    request = (JsonObjectRequest() if schema_path is None and json_object
               else JsonSchemaRequest(read_schema(schema_path)))  # type: ignore[arg-type]
    constraint = compile_constraint(tokenizer, request, CompileOptions(backend=backend))  # type: ignore[arg-type]
    if constraint.mode is not Mode.ENFORCED:
        print(f"[afm-struct] constraint downgraded ({constraint.rung}): {constraint.reason}",
              file=sys.stderr)
    return constraint
