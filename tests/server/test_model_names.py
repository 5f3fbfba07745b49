"""``--served-model-name``: a deployment answers to the names its clients send."""

from __future__ import annotations

import httpx
import openai
import pytest

from afm_struct.cli import build_parser
from server.settings import ServerSettings

from .conftest import USER

NAMES = ("gpt-4o-mini", "smollm2")


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_models_lists_every_served_name_and_each_is_accepted(serve) -> None:
    live = serve(served_model_names=NAMES)
    assert [m.id for m in _sdk(live.url).models.list().data] == list(NAMES)
    for name in NAMES:
        resp = _sdk(live.url).chat.completions.create(model=name, messages=USER, max_tokens=4)
        assert resp.model == name  # echoed as sent
    stream = _sdk(live.url).chat.completions.create(model="smollm2", messages=USER, max_tokens=4, stream=True)
    assert {c.model for c in stream} == {"smollm2"}
    omitted = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 4}).json()
    assert omitted["model"] == NAMES[0]  # no model sent: the first name


def test_the_models_own_id_is_404_once_other_names_are_served(serve) -> None:
    live = serve(served_model_names=NAMES)
    own = live.loaded.info.id
    with pytest.raises(openai.NotFoundError) as err:
        _sdk(live.url).chat.completions.create(model=own, messages=USER, max_tokens=4)
    body = err.value.body
    assert body["code"] == "model_not_found" and body["param"] == "model"
    assert "gpt-4o-mini" in body["message"] and "smollm2" in body["message"]


def test_without_names_the_model_id_is_served(serve) -> None:
    live = serve()
    assert [m.id for m in _sdk(live.url).models.list().data] == [live.loaded.info.id]


@pytest.mark.parametrize("names", [("",), ("a", "a")])
def test_bad_names_are_refused(names) -> None:
    with pytest.raises(ValueError):
        ServerSettings(served_model_names=names)


def test_the_cli_flag_is_repeatable() -> None:
    args = build_parser().parse_args(["serve", "--served-model-name", "a", "--served-model-name", "b"])
    assert args.served_model_names == ["a", "b"]
    assert build_parser().parse_args(["serve"]).served_model_names == []
