"""Imports whose cost is deferred to first use, installed before anything imports them.

``jsonschema`` (with the ``format-nongpl`` extra this project needs for exact ``iri`` checks)
imports ``rfc3987_syntax`` as it is imported itself, and that module builds an Earley parser
for RFC 3987 at import: ~2.6 s of CPU in every process that validates JSON (the server, every
CLI command, each bounded compile child, each test worker and subprocess server), whether or not
an ``iri`` is ever checked.  Here ``rfc3987_syntax`` is a stand-in until its validator is first
called: jsonschema registers its ``iri`` / ``iri-reference`` checkers as before, and the first
check imports the real module (its grammar built then, once).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_NAME = "rfc3987_syntax"


def defer_rfc3987_grammar() -> None:
    """Install the stand-in for ``rfc3987_syntax`` unless it is imported already or absent."""
    if _NAME in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(_NAME)
    except (ImportError, ValueError):
        return
    if spec is None or spec.submodule_search_locations is None:
        return
    stand_in = types.ModuleType(_NAME, "rfc3987_syntax, its parser built on first use")
    # Its submodules import from the real package folder (``rfc3987_syntax.utils``, ...).
    stand_in.__path__ = list(spec.submodule_search_locations)
    stand_in.__spec__ = spec

    def is_valid_syntax(term: str, value: str) -> Any:
        real = importlib.import_module(f"{_NAME}.syntax_helpers")
        return real.is_valid_syntax(term, value)

    def __getattr__(name: str) -> Any:  # the module's other names, from the real one
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(f"{_NAME}.syntax_helpers"), name)

    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[_NAME] = stand_in
