"""The JSON path scanner of token details: each character's field, fed in arbitrary pieces."""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.serving.json_path_scan import JsonPathScanner, format_path

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "30"))


def _paths(text: str) -> list[str]:
    scanner, out = JsonPathScanner(), []
    for ch in text:
        scanner.feed(ch)
        out.append(scanner.path)
    return out


def test_keys_values_and_separators() -> None:
    text = '{"name": "Al", "tags": ["a", {"b c": 1}], "n": null}'
    paths = dict(zip(range(len(text)), _paths(text), strict=True))
    assert paths[0] == "$"  # the object's brace
    assert paths[text.index("Al")] == "$.name"
    assert paths[text.index('"a"') + 1] == "$.tags[0]"
    assert paths[text.index("1")] == '$.tags[1]["b c"]'
    assert paths[text.index("null")] == "$.n"
    assert paths[len(text) - 1] == "$"  # the closing brace


def test_prose_stays_at_the_root() -> None:
    assert set(_paths("Hello there, world!")) == {"$"}


def test_format_path() -> None:
    assert format_path(["a", 0, "b c", "_x1"]) == '$.a[0]["b c"]._x1'


leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
values = st.recursive(leaf, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.text(max_size=4), kids, max_size=3), max_leaves=8)


@settings(max_examples=EXAMPLES, deadline=None)
@given(values, st.data())
def test_leaf_values_get_their_path(value: object, data: st.DataObject) -> None:
    """Every scalar value's last character is attributed to that value's own path, whatever
    pieces the text is fed in."""
    expected: list[tuple[str, str]] = []  # (path, the value's JSON text)

    def walk(v: object, parts: list[str | int]) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, [*parts, k])
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, [*parts, i])
        else:
            expected.append((format_path(parts), json.dumps(v)))

    walk(value, [])
    text = json.dumps(value)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(text) - 1, 1)), max_size=5)))
    scanner, at, per_char = JsonPathScanner(), 0, []
    for cut in [*cuts, len(text)]:
        for ch in text[at:cut]:  # piecewise feeding must agree with one character at a time
            scanner.feed(ch)
            per_char.append(scanner.path)
        at = max(at, cut)
    pieces = JsonPathScanner()
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        pieces.feed(text[a:b])
        if b:
            assert pieces.path == per_char[b - 1]
    # Each scalar, found in order in the text: its last character is at its own path.
    pos = 0
    for path, written in expected:
        start = text.index(written, pos)
        end = start + len(written) - 1
        assert per_char[end] == path, (text, written, path)
        pos = end + 1
