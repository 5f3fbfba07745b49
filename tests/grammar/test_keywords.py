"""One keyword table (grammar/schema/keywords.py) drives the rewrites, their triggers, outlines'
unenforced list and the downgrade reasons: nothing keeps a second list."""

from __future__ import annotations

import jsonschema

from afm_struct.grammar.engines import outlines_engine as outlines_backend
from afm_struct.grammar.engines.key_presence import ASSERTIONS
from afm_struct.grammar.ladder import failure_reason
from afm_struct.grammar.schema import keywords, rewrites


def test_every_rewrite_is_named_by_a_keyword_and_every_name_runs() -> None:
    named = {name for k in keywords.TABLE.values() for name in k.rewrites}
    assert named == set(rewrites.REGISTRY)
    # A node carrying any keyword a rewrite names reaches the walker (the trigger set is derived).
    for keyword in keywords.TABLE.values():
        if keyword.rewrites:
            assert keyword.name in keywords.TRIGGERS
            assert set(keyword.rewrites) <= keywords.rewrites_for(frozenset({keyword.name}))


def test_the_table_covers_every_assertion_jsonschema_knows() -> None:
    for cls in (jsonschema.Draft4Validator, jsonschema.Draft7Validator, jsonschema.Draft201909Validator,
                jsonschema.Draft202012Validator):
        assert set(cls.VALIDATORS) <= set(keywords.TABLE), cls
    assert ASSERTIONS == frozenset(keywords.TABLE)


def test_outlines_unenforced_list_is_the_tables() -> None:
    assert outlines_backend._UNENFORCED == frozenset(k for k, v in keywords.TABLE.items() if not v.outlines)
    assert {"not", "oneOf", "uniqueItems", "minimum"} <= outlines_backend._UNENFORCED


def test_reasons_come_from_the_table() -> None:
    assert failure_reason('Unimplemented keys: ["not"]', {}) == "unsupported_keyword:not"
    assert failure_reason("oneOf constraints are not supported", {}) == "unsupported_keyword:oneOf"
    assert failure_reason("circular references with sibling keys", {}) == "unsupported_ref_siblings"
    assert failure_reason('Unimplemented keys: ["madeUp"]', {}) == "unsupported_keyword:madeUp"
