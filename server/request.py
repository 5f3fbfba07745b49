"""Admission checks every protocol's adapter shares: values no engine can take, the model name.

They need no model and raise typed 400/404 errors that carry the offending parameter.  Each
protocol's own fields are read by its adapter (``server/chat/adapter.py``); tools and
``tool_choice`` are checked where they are parsed, :mod:`afm_struct.tools.definitions`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from afm_struct.errors import NotFoundError
from afm_struct.serving.value_checks import check_values as check_json_values

from .model_alias import ModelAlias, resolve_alias


def check_values(body: BaseModel) -> None:
    """400 ``invalid_value`` for a value no part of the engine can take (a lone UTF-16
    surrogate, a non-finite number), wherever it is in the request, with ``param`` = its path
    (:func:`afm_struct.serving.value_checks.check_values`; every string, key and number, once)."""
    check_json_values(body.model_dump(by_alias=True, exclude_unset=True))


def check_model(requested: str | None, served: tuple[str, ...], *, listing: str = "GET /v1/models",
                aliases: Sequence[ModelAlias] = ()) -> str:
    """The name to echo as ``model``: ``requested`` if it is one of ``served`` (the first when
    omitted), or the served name an alias maps it to (``--model-alias``); 404 otherwise,
    naming what to send and where the protocol lists the names (``listing``)."""
    if requested is None:
        return served[0]
    if requested not in served:
        target = resolve_alias(requested, aliases)
        if target is not None and target in served:
            return target
        names = " or ".join(repr(n) for n in served)
        raise NotFoundError(f"model {requested!r} is not served here; send {names} ({listing})",
                            param="model", code="model_not_found")
    return requested
