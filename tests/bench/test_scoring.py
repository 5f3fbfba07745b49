"""The field-accuracy scorer: normalisation, numbers, nesting, arrays, missing fields."""

from __future__ import annotations

from afm_struct_bench.scoring import count_leaves, normalize_string, scalar_equal, score_fields


def test_exact_match_scores_one() -> None:
    expected = {"name": "Priya Raman", "age": 41, "active": True}
    score = score_fields(expected, dict(expected))
    assert (score.matched, score.total, score.accuracy) == (3, 3, 1.0)
    assert score.missing == () and score.wrong == ()


def test_strings_normalised_by_case_and_whitespace() -> None:
    assert normalize_string("  Halden   Steelworks\n") == "halden steelworks"
    assert scalar_equal("Halden Steelworks", "halden  STEELWORKS ")
    assert not scalar_equal("Halden Steelworks", "Halden Steel")


def test_numbers_by_value_not_type() -> None:
    assert scalar_equal(14, 14.0)
    assert scalar_equal(350.4, 350.40)
    assert not scalar_equal(2450.0, "2450.00")
    assert not scalar_equal(1, True) and not scalar_equal(True, 1)
    assert scalar_equal(False, False) and not scalar_equal(False, None)


def test_nested_objects_and_wrong_paths() -> None:
    expected = {"order": "A-1", "recipient": {"name": "Jordan Blake", "zip": "62704"}}
    predicted = {"order": "a-1", "recipient": {"name": "Jordan Blake", "zip": "62705"}}
    score = score_fields(expected, predicted)
    assert (score.matched, score.total) == (2, 3)
    assert score.wrong == ("recipient.zip",)


def test_missing_fields_and_unparsed_output() -> None:
    expected = {"a": 1, "b": {"c": "x", "d": "y"}}
    score = score_fields(expected, {"a": 1, "b": {"c": "x"}})
    assert (score.matched, score.missing) == (2, ("b.d",))
    nothing = score_fields(expected, None)
    assert (nothing.matched, nothing.total) == (0, 3)
    assert nothing.missing == ("a", "b.c", "b.d")
    assert score_fields(expected, {"a": 1, "b": "oops"}).missing == ("b.c", "b.d")


def test_arrays_of_objects_by_position() -> None:
    expected = {"items": [{"q": 4, "p": 28.5}, {"q": 2, "p": 89}]}
    swapped = score_fields(expected, {"items": [{"q": 2, "p": 89}, {"q": 4, "p": 28.5}]})
    assert swapped.matched == 0
    short = score_fields(expected, {"items": [{"q": 4, "p": 28.5}]})
    assert (short.matched, short.missing) == (2, ("items[1].q", "items[1].p"))


def test_arrays_of_scalars_as_multisets() -> None:
    expected = {"skills": ["C/C++", "ROS 2"]}
    assert score_fields(expected, {"skills": ["ros 2", "C/C++"]}).accuracy == 1.0
    assert score_fields(expected, {"skills": ["ROS 2", "ROS 2"]}).matched == 1
    assert score_fields(expected, {"skills": []}).missing == ("skills[0]", "skills[1]")


def test_extra_fields_are_free_and_empty_expected() -> None:
    assert score_fields({"a": 1}, {"a": 1, "z": 2}).accuracy == 1.0
    assert score_fields({}, {"x": 1}).accuracy == 0.0
    assert count_leaves({"a": [1, 2], "b": {"c": None}}) == 3
