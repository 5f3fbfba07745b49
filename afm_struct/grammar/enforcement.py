"""The enforcement report: per compiled constraint, which keyword at which path of the caller's
schema the grammar enforces, and how.

Read from what the ladder decided, with the one keyword table the ladder and the rewrites use
(:data:`afm_struct.grammar.schema.keywords.TABLE`), never a second classification.  Each
assertion keyword of the original schema, at the JSON pointer of the subschema holding it
(walked as the rewrites walk it), gets one status:

* ``enforced``: the grammar enforces it as written;
* ``rewritten``: a rewrite replaced it with keywords the engine enforces, the same valid
  instances (``how``: the rewrites that fired at that node and act on it,
  :mod:`afm_struct.grammar.schema.rewrites`);
* ``relaxed``: served on the relaxed rung, and the engine takes the keyword in some shapes only
  (the table's ``partial``): it may be approximated, and is checked after generation;
* ``validated``: not in the grammar at all, checked only after generation: every keyword on the
  unconstrained rung, all but the top-level ``type`` on the generic-JSON rung, and on the
  relaxed rung the keywords the engine does not take (``none``) and the one its refusal named.

Every served output is validated against the original schema afterwards whatever the statuses
say (``CompiledConstraint.validate``).  Pure functions over a compiled constraint's fields.

A structural tag's report lists the keywords of each JSON body (``body``: where the body sits
in the request), each by its own body's rung (``structural_tag_compile.BodyOutcome``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol

from .schema.keywords import TABLE
from .schema.paths import escape_pointer_part
from .schema.rewrites import SUBSCHEMA_LIST, SUBSCHEMA_MAP, SUBSCHEMA_ONE
from .spec import Rung

ENFORCED = "enforced"
REWRITTEN = "rewritten"
RELAXED = "relaxed"
VALIDATED = "validated"
STATUSES = (ENFORCED, REWRITTEN, RELAXED, VALIDATED)
# Statuses that leave a keyword out of the grammar or only approximated there.
NOT_EXACT = frozenset({RELAXED, VALIDATED})


class Compiled(Protocol):
    """What the report reads of a ``CompiledConstraint``."""

    kind: str
    rung: Rung
    reason: str | None
    backend: str
    schema: Any
    rewrite_sites: tuple[tuple[str, str], ...]


def keyword_sites(schema: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every assertion keyword of ``schema`` (the table's) as ``(pointer of its subschema,
    keyword)``, subschemas visited as the rewrites visit them."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key in TABLE:
            yield path, key
        if key in SUBSCHEMA_ONE:
            yield from keyword_sites(value, f"{path}/{key}")
        elif key in (*SUBSCHEMA_MAP, "dependencies") and isinstance(value, dict):
            for name, sub in value.items():
                yield from keyword_sites(sub, f"{path}/{key}/{escape_pointer_part(name)}")
        elif (key in SUBSCHEMA_LIST or key == "items") and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from keyword_sites(sub, f"{path}/{key}/{i}")
        elif key == "items":
            yield from keyword_sites(value, f"{path}/{key}")


def refused_keyword(reason: str | None) -> str | None:
    """The keyword a downgrade reason names (``unsupported_keyword:not``, or a table entry's
    own reason such as ``unsupported_ref_siblings``), or None."""
    if not reason:
        return None
    if reason.startswith("unsupported_keyword:"):
        return reason.split(":", 1)[1]
    return next((k.name for k in TABLE.values() if k.reason_name == reason), None)


def _engine_takes(keyword: str, backend: str) -> str:
    """How the backend takes ``keyword`` as written: native, partial or none (the table)."""
    entry = TABLE[keyword]
    if backend == "outlines":
        return "native" if entry.outlines else "none"
    return entry.llguidance


def keyword_status(keyword: str, path: str, compiled: Compiled,
                   fired: dict[str, list[str]]) -> tuple[str, list[str]]:
    """The status of ``keyword`` at ``path`` and the rewrites that took it (``how``)."""
    rung = Rung(compiled.rung)
    if rung is Rung.UNCONSTRAINED:
        return VALIDATED, []
    if rung is Rung.GENERIC_JSON:
        return (ENFORCED, []) if (path, keyword) == ("", "type") else (VALIDATED, [])
    how = [name for name in fired.get(path, ()) if name in TABLE[keyword].rewrites]
    if how:
        return REWRITTEN, how
    if rung is Rung.EXACT:
        return ENFORCED, []
    takes = _engine_takes(keyword, compiled.backend)
    if takes == "none" or keyword == refused_keyword(compiled.reason):
        return VALIDATED, []
    return (RELAXED, []) if takes == "partial" else (ENFORCED, [])


def enforcement_report(compiled: Compiled, *, rung: Rung | None = None,
                       reason: str | None = None) -> dict[str, Any]:
    """The report of ``compiled`` as JSON data: ``kind``, ``rung``, ``reason``, ``backend``,
    ``keywords`` (``path``, ``keyword``, ``status`` and, when rewritten, ``how``) and
    ``counts`` per status.  ``rung`` / ``reason`` override the compile's (a format run without
    its mask because a tool grammar owns it is served unconstrained)."""
    if rung is not None:
        compiled = _Served(compiled, rung, reason)
    fired: dict[str, list[str]] = {}
    for path, name in compiled.rewrite_sites:
        fired.setdefault(path, []).append(name)
    entries: list[dict[str, Any]] = []
    schema = compiled.schema if compiled.kind in ("json_schema", "tool_call") else None
    for path, keyword in keyword_sites(schema):
        status, how = keyword_status(keyword, path, compiled, fired)
        entry: dict[str, Any] = {"path": path, "keyword": keyword, "status": status}
        if how:
            entry["how"] = how
        entries.append(entry)
    if compiled.kind == "structural_tag":
        entries = _body_entries(compiled.schema or (), rung)
    counts = {s: sum(1 for e in entries if e["status"] == s) for s in STATUSES}
    return {"kind": compiled.kind, "rung": str(compiled.rung), "reason": compiled.reason,
            "backend": compiled.backend, "keywords": entries, "counts": counts}


def _body_entries(bodies: Any, rung: Rung | None) -> list[dict[str, Any]]:
    """Each structural-tag body's keywords, by its own rung (``rung``: the whole tag served
    without its mask, so every body too)."""
    entries: list[dict[str, Any]] = []
    for body in bodies:
        if rung is Rung.UNCONSTRAINED:
            body = dataclasses.replace(body, rung=rung)
        fired: dict[str, list[str]] = {}
        for path, name in body.rewrite_sites:
            fired.setdefault(path, []).append(name)
        for path, keyword in keyword_sites(body.schema):
            status, how = keyword_status(keyword, path, body, fired)
            entry: dict[str, Any] = {"body": body.where, "path": path, "keyword": keyword, "status": status}
            entries.append({**entry, "how": how} if how else entry)
    return entries


class _Served:
    """A compiled constraint as actually served (another rung, another reason)."""

    def __init__(self, compiled: Compiled, rung: Rung, reason: str | None) -> None:
        self.kind, self.backend, self.schema = compiled.kind, compiled.backend, compiled.schema
        self.rewrite_sites = compiled.rewrite_sites
        self.rung, self.reason = rung, reason
