"""Tool definitions from any protocol: chat's nested shape and the Responses API's flat one
meet in one check (:func:`afm_struct.tools.check_tools`), which names each protocol's paths."""

from __future__ import annotations

import pytest

from afm_struct.errors import InvalidRequestError, SchemaError, UnknownToolError
from afm_struct.tools import Choice, check_choice, check_tools, parse_tools
from afm_struct.tools.definitions import ToolSpec, shown

from .conftest import WEATHER


def _flat(tool: dict, i: int) -> ToolSpec:
    """A Responses API tool (``{"type": "function", "name": ..., "parameters": ...}``) as a
    protocol adapter hands it over: its fields sit at ``tools.<i>`` itself."""
    return ToolSpec(name=tool.get("name"), where=f"tools.{i}", description=tool.get("description", ""),
                    parameters=tool.get("parameters"), strict=bool(tool.get("strict", False)))


def test_the_flat_shape_gives_the_same_tool_as_the_nested_one() -> None:
    fn = WEATHER["function"]
    flat = _flat({"type": "function", **fn}, 0)
    assert check_tools([flat]) == parse_tools([WEATHER])


@pytest.mark.parametrize(("tool", "param", "shown_path"), [
    ({"name": ""}, "tools.1.name", "tools[1].name"),
    ({"name": "f", "parameters": "x"}, "tools.1.parameters", "tools[1].parameters"),
    ({"name": "f", "parameters": {"type": "string"}}, "tools.1.parameters", "tools[1].parameters"),
])
def test_flat_tool_errors_name_the_flat_path(tool: dict, param: str, shown_path: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_tools([_flat({"name": "ok"}, 0), _flat(tool, 1)])
    assert exc.value.param == param and shown_path in exc.value.message


def test_a_flat_tool_schema_error_names_its_json_path() -> None:
    with pytest.raises(SchemaError) as exc:
        check_tools([_flat({"name": "f", "parameters": {"type": "object",
                                                        "properties": {"a": {"type": 5}}}}, 2)])
    assert exc.value.param == "tools.2.parameters"
    assert "$.tools[2].parameters" in exc.value.message


def test_duplicate_names_are_refused_at_the_second() -> None:
    with pytest.raises(InvalidRequestError) as exc:
        check_tools([_flat({"name": "f"}, 0), _flat({"name": "f"}, 1)])
    assert exc.value.param == "tools.1.name"


def test_check_choice_names_the_protocols_param() -> None:
    tools = check_tools([_flat({"name": "f"}, 0)])
    assert check_choice(Choice("function", "f"), tools) == Choice("function", "f")
    assert check_choice(Choice("none"), ()) == Choice("none")
    with pytest.raises(UnknownToolError) as exc:
        check_choice(Choice("function", "g"), tools, param="tool_choice.name")
    assert exc.value.param == "tool_choice.name"
    with pytest.raises(InvalidRequestError) as exc:
        check_choice(Choice("required"), ())
    assert exc.value.param == "tool_choice"


def test_shown_writes_indices_in_brackets() -> None:
    assert shown("tools.0.function.parameters") == "tools[0].function.parameters"
    assert shown("tools.12") == "tools[12]"
    assert shown("text.format.schema") == "text.format.schema"
