"""Partial values for library users: typed with a pydantic model, and the client's stream
objects that yield them (``stream.partials()``).

A partial value is a prefix of the final object (:mod:`afm_struct.serving.partials`): required
fields may be missing and strings unfinished, so it rarely validates.  It is typed with
pydantic's ``model_construct`` (no validation): the fields present are set as parsed, missing
ones take their defaults or stay unset (reading one raises ``AttributeError``), and nested
objects stay plain JSON (dicts and lists), since ``model_construct`` does not recurse.  A value
that is not an object (a top-level array) is returned as parsed.  The last partial of a whole
answer is the final object: ``model_validate`` it for a checked instance.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol


class _Event(Protocol):
    kind: str
    data: Any


def typed_partial(value: Any, model: Any = None) -> Any:
    """``value`` as an instance of the pydantic class ``model`` (``model_construct``: not
    validated), or as parsed without one or when it is not an object."""
    if model is None or not isinstance(value, dict):
        return value
    return model.model_construct(**{k: v for k, v in value.items() if isinstance(k, str)})


def _not_asked() -> ValueError:
    return ValueError("partial values were not asked for: open the stream with partial=True")


class EventStream:
    """A streamed chat completion's events (iterate it as before: ``StreamEvent`` s, the last
    ``done``), and :meth:`partials`: the answer's values so far.  The request is sent when
    iteration starts."""

    def __init__(self, events: Iterator[Any], *, partial: bool) -> None:
        self._events = events
        self.partial = partial

    def __iter__(self) -> Iterator[Any]:
        return self._events

    def __next__(self) -> Any:
        return next(self._events)

    def close(self) -> None:
        """Close the stream (its connection) before its end, as the generator it wraps."""
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def partials(self, model: Any = None) -> Iterator[Any]:
        """The content's value parsed so far, once per content chunk that carries one (the
        stream's remaining events are consumed); typed with ``model`` (:func:`typed_partial`)."""
        if not self.partial:
            raise _not_asked()
        for event in self._events:
            if event.kind == "partial":
                yield typed_partial(event.data, model)


class AsyncEventStream:
    """The asynchronous :class:`EventStream`."""

    def __init__(self, events: AsyncIterator[Any], *, partial: bool) -> None:
        self._events = events
        self.partial = partial

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._events

    async def __anext__(self) -> Any:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Close the stream (its connection) before its end: ``contextlib.aclosing`` works on
        it as on the async generator it wraps."""
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()

    async def partials(self, model: Any = None) -> AsyncIterator[Any]:
        """As :meth:`EventStream.partials`."""
        if not self.partial:
            raise _not_asked()
        async for event in self._events:
            if event.kind == "partial":
                yield typed_partial(event.data, model)
