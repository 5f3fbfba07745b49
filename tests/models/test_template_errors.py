"""A chat template that rejects the messages is a 400: its own raise_exception text passes on,
jinja's internal errors do not (they go to the log)."""

from __future__ import annotations

import jinja2.exceptions
import pytest

from afm_struct.errors import InvalidRequestError

MESSAGES = [{"role": "assistant", "content": "hi"}]


def _raise(exc: Exception):  # type: ignore[no-untyped-def]
    def apply(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise exc
    return apply


def test_the_templates_own_message_reaches_the_user(tokenizer, monkeypatch) -> None:
    said = "Conversation roles must alternate user/assistant/user/assistant/..."
    monkeypatch.setattr(tokenizer.hf, "apply_chat_template", _raise(jinja2.exceptions.TemplateError(said)))
    with pytest.raises(InvalidRequestError) as err:
        tokenizer.apply_chat_template(MESSAGES)
    assert err.value.status == 400 and err.value.param == "messages" and said in err.value.message


@pytest.mark.parametrize("exc", [jinja2.exceptions.UndefinedError("'dict object' has no attribute 'content'"),
                                 TypeError("can only concatenate str (not \"NoneType\") to str")])
def test_jinja_internals_stay_in_the_log(tokenizer, monkeypatch, caplog, exc) -> None:
    monkeypatch.setattr(tokenizer.hf, "apply_chat_template", _raise(exc))
    with pytest.raises(InvalidRequestError) as err:
        tokenizer.apply_chat_template(MESSAGES)
    assert err.value.status == 400 and "dict object" not in err.value.message
    assert "NoneType" not in err.value.message and "check roles and content" in err.value.message
    assert any(r.exc_info and r.exc_info[1] is exc for r in caplog.records)
