"""The structural-tag compiler, driven by random trees: each compiles, random outputs the tree
allows are accepted by the grammar's own matcher, the same outputs with one body broken are not.

Trees are drawn with an output each (the strategies build both), in both request forms.
``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.errors import InvalidRequestError
from afm_struct.grammar.enforcement import enforcement_report
from afm_struct.grammar.spec import Mode, StructuralTagRequest
from afm_struct.grammar.structural_tag import read_structural_tag

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 10
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# (schema, valid instances), each instance self-delimiting (no number: "1" then "2" is "12").
# BROKEN is an instance of none of them, nor a const or regex below (those start with "<", "#").
SCHEMAS: list[tuple[dict[str, Any], list[str]]] = [
    ({"type": "string", "pattern": "^[a-z]{1,4}$"}, ['"ab"', '"abcd"']),
    ({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
      "additionalProperties": False}, ['{"ok": true}', '{"ok": false}']),
    ({"enum": ["x", "y z"]}, ['"x"', '"y z"']),
    ({"type": "array", "items": {"type": "string", "maxLength": 3}}, ["[]", '["ab", "c"]']),
]
BROKEN = '{"ok": 1}'
FREE = st.text(alphabet="abc xyz.,\n", max_size=12)  # free text: never holds a "<" or a digit
Drawn = tuple[dict[str, Any], str, str | None]  # (format node, an output, that output with a body broken)


@st.composite
def body(draw: st.DrawFn) -> Drawn:
    schema, valid = draw(st.sampled_from(SCHEMAS))
    return {"type": "json_schema", "json_schema": schema}, draw(st.sampled_from(valid)), BROKEN


@st.composite
def leaf(draw: st.DrawFn) -> Drawn:
    kind = draw(st.sampled_from(["const", "regex", "json"]))
    if kind == "const":
        value = "<" + draw(st.text(alphabet="abk=", min_size=0, max_size=4)) + ">"
        return {"type": "const_string", "value": value}, value, None
    if kind == "regex":
        digits = draw(st.text(alphabet="0123456789", min_size=1, max_size=3))
        return {"type": "regex", "pattern": "#[0-9]{1,3}#"}, f"#{digits}#", None
    return draw(body())


def tag(name: str, content: Drawn) -> Drawn:
    node, good, bad = content
    begin, end = f"<{name}>", f"</{name}>"
    return ({"type": "tag", "begin": begin, "content": node, "end": end}, begin + good + end,
            None if bad is None else begin + bad + end)


@st.composite
def any_text_tag(draw: st.DrawFn, name: str) -> Drawn:
    return tag(name, ({"type": "any_text"}, draw(FREE), None))


def sequence(parts: list[Drawn]) -> Drawn:
    """The parts one after another; the broken output breaks the first part that can be."""
    good = "".join(p[1] for p in parts)
    bad = next(("".join(q[1] if j != i else p[2] for j, q in enumerate(parts))
                for i, p in enumerate(parts) if p[2] is not None), None)
    return {"type": "sequence", "elements": [p[0] for p in parts]}, good, bad


@st.composite
def node(draw: st.DrawFn, depth: int = 0) -> Drawn:
    """A format node; every match starts with a fixed character (no free text outside tags)."""
    kinds = ["leaf", "tag", "any_tag"] + (["sequence", "or", "separated", "calls"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(leaf())
    if kind == "tag":
        return tag(f"t{depth}", draw(node(depth + 1)))
    if kind == "any_tag":
        return draw(any_text_tag(f"a{depth}"))
    if kind == "calls":  # free text with calls inside a tag: it ends at the tag's end
        return tag(f"r{depth}", draw(triggered()))
    if kind == "sequence":
        return sequence(draw(st.lists(node(depth + 1), min_size=1, max_size=3)))
    if kind == "or":
        branches = [tag(f"o{i}", draw(node(depth + 1))) for i in range(draw(st.integers(2, 3)))]
        chosen = branches[draw(st.integers(0, len(branches) - 1))]
        return {"type": "or", "elements": [b[0] for b in branches]}, chosen[1], chosen[2]
    tags = [tag(f"s{i}", draw(body())) for i in range(2)]
    picks = draw(st.lists(st.sampled_from(tags), min_size=1, max_size=3))
    separated = {"type": "tags_with_separator", "tags": [t[0] for t in tags], "separator": ";"}
    return (separated, ";".join(p[1] for p in picks),
            ";".join([picks[0][2] or "", *(p[1] for p in picks[1:])]))


@st.composite
def triggered(draw: st.DrawFn) -> Drawn:
    """Free text with tagged calls: a trigger, then one of the tags it starts."""
    tags = [tag(f"fn={name}", draw(body())) for name in ("a", "bb")]
    calls = draw(st.lists(st.sampled_from(tags), max_size=3))
    texts = draw(st.lists(FREE, min_size=len(calls) + 1, max_size=len(calls) + 1))
    good = texts[0] + "".join(c[1] + t for c, t in zip(calls, texts[1:], strict=True))
    bad = None if not calls else texts[0] + calls[0][2] + texts[1] + "".join(
        c[1] + t for c, t in zip(calls[1:], texts[2:], strict=True))
    form = {"type": "triggered_tags", "triggers": ["<fn="], "tags": [t[0] for t in tags]}
    return form, good, bad


def compiled(compiler: Any, tree: dict[str, Any]) -> Any:
    result = compiler.compile(StructuralTagRequest(json.dumps(tree)))
    assert result.mode is Mode.ENFORCED, result.reason
    return result


@SETTINGS
@given(drawn=st.one_of(node(), triggered()), tail=FREE)
def test_random_trees_accept_their_outputs_and_reject_broken_bodies(compiler, drawn, tail) -> None:
    format_, good, bad = drawn
    # free text closes the tree when it can: a sequence ending in any text
    tree = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        format_, {"type": "const_string", "value": "<end>"}, {"type": "any_text"}]}}
    result = compiled(compiler, tree)
    assert result.validate(good + "<end>" + tail).ok, (tree, good)
    if bad is not None:
        assert not result.validate(bad + "<end>" + tail).ok, (tree, bad)
    assert not result.validate(good).ok  # the closing string is required


@SETTINGS
@given(drawn=triggered())
def test_the_vllm_form_is_the_triggered_form(compiler, drawn) -> None:
    format_, good, bad = drawn
    structures = [{"begin": t["begin"], "schema": t["content"]["json_schema"], "end": t["end"]}
                  for t in format_["tags"]]
    result = compiled(compiler, {"type": "structural_tag", "structures": structures, "triggers": ["<fn="]})
    assert result.validate(good).ok, good
    if bad is not None:
        assert not result.validate(bad).ok, bad
    # a trigger must go on as one of its tags: a stray one is refused
    assert not result.validate(good + "<fn=zz>1</fn>").ok


def test_the_flags_of_triggered_tags(compiler) -> None:
    call = {"type": "tag", "begin": "<f>", "end": "</f>",
            "content": {"type": "json_schema", "json_schema": {"type": "integer"}}}

    def accepts(flags: dict[str, bool], text: str) -> bool:
        tree = {"format": {"type": "triggered_tags", "triggers": ["<f"], "tags": [call], **flags}}
        return compiled(compiler, tree).validate(text).ok

    assert accepts({}, "no call") and accepts({}, "a<f>1</f>b<f>2</f>c")
    assert not accepts({"at_least_one": True}, "no call") and accepts({"at_least_one": True}, "a<f>1</f>b")
    first = {"stop_after_first": True}
    assert accepts(first, "a<f>1</f>") and not accepts(first, "a<f>1</f>b") and accepts(first, "no call")


def test_a_body_below_exact_downgrades_the_tag_and_names_it(compiler) -> None:
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    result = compiler.compile(StructuralTagRequest(json.dumps(
        {"structures": [{"begin": "<f>", "schema": unique, "end": "</f>"}], "triggers": ["<f"]}), "rf"))
    assert result.mode is Mode.DOWNGRADED and result.flag_downgraded
    assert result.reason == "rf.structures.0.schema:unsupported_keyword:uniqueItems"
    assert result.validate("x<f>[1, 2]</f>").ok and not result.validate("x<f>{}</f>").ok
    # the enforcement report names each body's keywords by that body's own rung
    report = enforcement_report(result)
    assert (report["kind"], report["rung"], report["reason"]) == ("structural_tag", "relaxed", result.reason)
    statuses = {(e["body"], e["path"], e["keyword"]): e["status"] for e in report["keywords"]}
    assert statuses == {("rf.structures.0.schema", "", "type"): "enforced",
                        ("rf.structures.0.schema", "", "items"): "enforced",
                        ("rf.structures.0.schema", "/items", "type"): "enforced",
                        ("rf.structures.0.schema", "", "uniqueItems"): "validated"}
    integer = {"begin": "<f>", "schema": {"type": "integer"}, "end": "</f>"}
    exact = compiled(compiler, {"structures": [integer], "triggers": ["<f"]})
    assert [e["status"] for e in enforcement_report(exact)["keywords"]] == ["enforced"]


@pytest.mark.parametrize("tree, param", [
    ({"format": {"type": "sequence", "elements": [{"type": "any_text"}, {"type": "regex", "pattern": "a"}]}},
     "p.format.elements.0"),
    ({"format": {"type": "tag", "begin": "<a>", "end": "", "content": {"type": "any_text"}}}, None),
    ({"format": {"type": "triggered_tags", "triggers": ["<a"], "tags": [
        {"begin": "<b>", "content": {"type": "any_text"}, "end": "</b>"}]}}, "p.format.tags.0.begin"),
    ({"format": {"type": "const_string", "value": 3}}, "p.format.value"),
    ({"format": {"type": "or", "elements": [{"type": "const_string"}]}}, "p.format.elements.0.value"),
    ({"format": {"type": "tag", "begin": "<", "end": ">", "content": {"type": "qwen_xml_parameter"}}},
     "p.format.content.type"),
    ({"structures": [], "triggers": ["<a"]}, "p.structures"),
    ({"format": {}, "structures": []}, "p.structures"),
])
def test_what_cannot_be_served_is_refused_naming_the_part(compiler, tree, param) -> None:
    if param is None:  # any_text up to the end of the output: served
        assert compiled(compiler, tree).validate("<a>anything").ok
        return
    with pytest.raises(InvalidRequestError) as caught:
        read_structural_tag(tree, "p")
        compiler.compile(StructuralTagRequest(json.dumps(tree), "p"))
    assert caught.value.param == param, caught.value.message


def test_markup_that_is_a_special_token_is_the_token(compiler, tokenizer) -> None:
    """SmolLM2's <jupyter_code> is a special token (id 13): a trigger, begin or end spelled so
    is written as the token, which the model then writes (Llama 3.1's <|python_tag|> case)."""
    call = {"begin": "<jupyter_code>", "schema": {"type": "integer"}, "end": "<jupyter_output>"}
    result = compiled(compiler, {"structures": [call], "triggers": ["<jupyter_code>"]})
    text = "run it: <jupyter_code>12<jupyter_output> done"
    assert tokenizer.encode("<jupyter_code>")[-1] == 13 and result.validate(text).ok
    assert not result.validate("run it: <jupyter_code>ab<jupyter_output>").ok
    assert not result.validate("run it: <jupyter_code>12").ok  # a call opened must close


def test_a_body_only_the_any_order_grammar_takes_is_served_relaxed(compiler) -> None:
    """``contains`` is exact only in the any-order grammar, which is no ``%json`` block: the
    body is served relaxed (and said so), not refused as a grammar that does not compile."""
    some_three = {"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}}
    result = compiler.compile(StructuralTagRequest(json.dumps(
        {"structures": [{"begin": "<f>", "schema": some_three, "end": "</f>"}], "triggers": ["<f"]}), "rf"))
    assert result.mode is Mode.DOWNGRADED
    assert result.reason == "rf.structures.0.schema:unsupported_keyword:contains"
    assert result.validate("<f>[1, 3]</f>").ok and not result.validate('<f>["3"]</f>').ok
