"""closing_suffix: every prefix of every JSON value, completed, parses."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.tools.json_close import closing_suffix

SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False,
                                                                            allow_infinity=False) | st.text()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(value=VALUES, ascii_only=st.booleans(), spaced=st.booleans())
def test_every_prefix_completes_to_json(value, ascii_only, spaced) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=1 if spaced else None,
                      separators=None if spaced else (",", ":"))
    for i in range(len(text) + 1):
        prefix = text[:i]
        try:
            json.loads(prefix + closing_suffix(prefix))
        except ValueError as exc:
            raise AssertionError(f"{prefix!r} + {closing_suffix(prefix)!r}: {exc}") from None


@pytest.mark.parametrize(("prefix", "suffix"), [
    ('{"city": "", "unit"', ": null}"),  # the Phi-3 case: cut after a key
    ('{"city": "Paris", ', '"": null}'),
    ('{"a": ', "null}"),
    ('{"a": [1, ', "null]}"),
    ('{"a": tr', "ue}"),
    ('{"a": 1.', "0}"),
    ('{"a": "x\\', '\\"}'),
    ('{"a": "\\u00', '00"}'),
    ('{"a": {"b": [', "]}}"),
    ('{"a": 12', "}"),
    ("", "null"),
])
def test_known_cuts(prefix, suffix) -> None:
    assert closing_suffix(prefix) == suffix
    json.loads(prefix + suffix)
