"""Streamed ``tool_calls`` fragments → whole calls: the one assembler of the wire's call deltas.

OpenAI streams a call as fragments sharing an ``index``: the first carries ``id``, ``type`` and
the whole ``function.name``, later ones append ``function.arguments``.  The server's router
(while it streams), its non-streaming body (from the same deltas) and the client
(:class:`afm_struct.client.StreamAssembler`) all assemble calls with :class:`ToolCallAssembler`,
so the three cannot disagree.  Standard library only: the client imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class FragmentError(ValueError):
    """A ``tool_calls`` fragment that cannot be placed (no integer ``index``)."""


@dataclass
class ToolCall:
    """One tool call assembled from its fragments."""

    index: int
    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_dict(self) -> dict[str, Any]:
        """OpenAI's message ``tool_calls[i]`` shape."""
        return {"id": self.id, "type": self.type or "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ToolCallAssembler:
    """Merges fragments by index: the first non-null ``id``/``type``/``name`` wins, arguments
    append.  :attr:`calls` is in order of first appearance (the server numbers calls in order)."""

    calls: list[ToolCall] = field(default_factory=list)
    _by_index: dict[int, ToolCall] = field(default_factory=dict, repr=False)

    def add(self, fragment: dict[str, Any]) -> ToolCall:
        """Merge one fragment; return its call.  :class:`FragmentError` without an integer index."""
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise FragmentError(f"a tool_calls delta has no integer index: {fragment!r}")
        call = self._by_index.get(index)
        if call is None:
            call = self._by_index[index] = ToolCall(index)
            self.calls.append(call)
        fn = fragment.get("function") or {}
        call.id = call.id or fragment.get("id")
        call.type = call.type or fragment.get("type")
        call.name = call.name or fn.get("name")
        call.arguments += fn.get("arguments") or ""
        return call

    def add_delta(self, delta: dict[str, Any]) -> None:
        """Merge every fragment of one delta's ``tool_calls`` (none: nothing to do)."""
        for fragment in delta.get("tool_calls") or ():
            self.add(fragment)

    def to_list(self) -> list[dict[str, Any]]:
        """The calls in index order, in OpenAI's message shape."""
        return [c.to_dict() for c in sorted(self.calls, key=lambda c: c.index)]
