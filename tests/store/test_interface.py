"""The ResponseStore interface, on every implementation (SQLite and PostgreSQL, parametrized):
owners, items, pagination, chains, replacement, restarts and deletes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from afm_struct.errors import InvalidRequestError, NotFoundError
from afm_struct.store import ResponseStore, StoredResponse, StoreError

A, B = "name:tenant-a", "key:" + "b" * 64


def response(id: str, owner: str = A, *, inputs: int = 1, outputs: int = 1,
             previous: str | None = None, **fields: Any) -> StoredResponse:
    """A response with numbered message items (``id`` in their text, to tell them apart)."""
    return StoredResponse(
        id=id, owner=owner, status=fields.pop("status", "completed"), created_at=1_700_000_000,
        model="m", previous_response_id=previous,
        input_items=[{"type": "message", "role": "user", "content": f"{id} in {i}"} for i in range(inputs)],
        output_items=[{"type": "message", "role": "assistant", "content": f"{id} out {i}"}
                      for i in range(outputs)], **fields)


def contents(items: list[dict[str, Any]]) -> list[str]:
    return [item["content"] for item in items]


def test_round_trip_keeps_every_field_and_gives_items_ids(store: ResponseStore) -> None:
    sent = StoredResponse(
        id="resp_1", owner=A, status="incomplete", created_at=1_700_000_123, model="smol",
        input_items=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "é ☃"}]},
                     {"type": "function_call_output", "call_id": "c1", "output": "{}", "id": "fco_1"}],
        output_items=[{"z": 1, "a": [1.5, None, True]}], metadata={"k": "v"},
        extra={"usage": {"input_tokens": 3}, "instructions": None})
    stored = store.put(sent)
    assert stored.input_items[1]["id"] == "fco_1"  # a given id is kept
    assert all(item["id"].startswith("item_") for item in (stored.input_items[0], stored.output_items[0]))
    got = store.get(A, "resp_1")
    assert got == stored
    assert list(got.output_items[0]) == ["z", "a", "id"]  # key order as given


def test_another_owner_is_told_exactly_what_an_unknown_id_is(store: ResponseStore) -> None:
    store.put(response("resp_a", A, inputs=3))
    unknown = _not_found_answers(store, A, "resp_none")
    other = _not_found_answers(store, B, "resp_a")
    assert other == unknown
    assert store.get(A, "resp_a").input_items  # the owner's response is untouched


def _not_found_answers(store: ResponseStore, owner: str, rid: str) -> list[str]:
    """The error bodies of every call naming ``rid`` (with the id masked)."""
    calls: list[Callable[[], object]] = [
        lambda: store.get(owner, rid), lambda: store.delete(owner, rid),
        lambda: store.input_items(owner, rid), lambda: store.conversation(owner, rid),
        lambda: store.put(response("resp_next", owner, previous=rid))]  # continuing it
    answers = []
    for call in calls:
        with pytest.raises(NotFoundError) as err:
            call()
        answers.append(str(err.value.to_dict()).replace(rid, "ID"))
    return answers


def test_ids_are_per_owner(store: ResponseStore) -> None:
    store.put(response("resp_x", A))
    store.put(response("resp_x", B, inputs=2))
    assert len(store.get(A, "resp_x").input_items) == 1
    assert len(store.get(B, "resp_x").input_items) == 2
    store.delete(B, "resp_x")
    assert store.get(A, "resp_x").id == "resp_x"
    with pytest.raises(NotFoundError):
        store.get(B, "resp_x")


def test_put_again_replaces_the_response_and_its_items(store: ResponseStore) -> None:
    store.put(response("r", status="in_progress", inputs=2, outputs=0))
    store.put(response("r", status="completed", inputs=2, outputs=3))
    got = store.get(A, "r")
    assert (got.status, len(got.input_items), len(got.output_items)) == ("completed", 2, 3)
    assert store.input_items(A, "r", limit=100).has_more is False


def test_a_replacement_cannot_relink_nor_make_a_cycle(store: ResponseStore) -> None:
    store.put(response("r1"))
    store.put(response("r2", previous="r1"))
    with pytest.raises(InvalidRequestError) as err:
        store.put(response("r2", previous=None))
    assert err.value.param == "previous_response_id"
    # r1 deleted and made again continuing r2 would close a loop r2 -> r1 -> r2.
    store.delete(A, "r1")
    with pytest.raises(InvalidRequestError):
        store.put(response("r1", previous="r2"))
    with pytest.raises(ValueError):
        response("r3", previous="r3")


def test_conversation_is_the_chain_oldest_first(store: ResponseStore) -> None:
    store.put(response("r1", inputs=2, outputs=1))
    store.put(response("r2", previous="r1", inputs=1, outputs=2))
    store.put(response("r3", previous="r2", inputs=1, outputs=0))
    store.put(response("branch", previous="r1", inputs=1, outputs=1))
    assert contents(store.conversation(A, "r3")) == [
        "r1 in 0", "r1 in 1", "r1 out 0", "r2 in 0", "r2 out 0", "r2 out 1", "r3 in 0"]
    assert contents(store.conversation(A, "branch")) == ["r1 in 0", "r1 in 1", "r1 out 0",
                                                        "branch in 0", "branch out 0"]
    with pytest.raises(NotFoundError):
        store.conversation(B, "r3")


def test_a_deleted_link_ends_the_chain_in_a_gap(store: ResponseStore) -> None:
    store.put(response("r1"))
    store.put(response("r2", previous="r1"))
    store.put(response("r3", previous="r2"))
    store.delete(A, "r2")
    with pytest.raises(NotFoundError) as err:
        store.conversation(A, "r3")
    assert err.value.param == "previous_response_id"
    assert contents(store.get(A, "r3").input_items) == ["r3 in 0"]  # its own items stay
    assert contents(store.conversation(A, "r1")) == ["r1 in 0", "r1 out 0"]


def test_long_chains_resolve(store: ResponseStore) -> None:
    previous = None
    for n in range(120):
        store.put(response(f"r{n}", previous=previous, outputs=0))
        previous = f"r{n}"
    assert contents(store.conversation(A, "r119")) == [f"r{n} in 0" for n in range(120)]


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_input_items_pages_like_openai(store: ResponseStore, order: str) -> None:
    stored = store.put(response("r", inputs=7))
    ids = [item["id"] for item in stored.input_items]
    if order == "desc":
        ids.reverse()
    seen: list[str] = []
    after = None
    while True:
        page = store.input_items(A, "r", after=after, limit=3, order=order)  # type: ignore[arg-type]
        seen += [item["id"] for item in page.data]
        assert page.to_dict()["first_id"] == (page.data[0]["id"] if page.data else None)
        if not page.has_more:
            break
        after = page.last_id
    assert seen == ids
    assert store.input_items(A, "r", order=order).data == store.input_items(  # type: ignore[arg-type]
        A, "r", limit=100, order=order).data  # type: ignore[arg-type]
    last = store.input_items(A, "r", after=ids[-1], order=order)  # type: ignore[arg-type]
    assert (last.data, last.has_more, last.first_id) == ([], False, None)


def test_input_items_defaults_to_newest_first_twenty(store: ResponseStore) -> None:
    store.put(response("r", inputs=25))
    page = store.input_items(A, "r")
    assert contents(page.data) == [f"r in {i}" for i in range(24, 4, -1)]
    assert page.has_more


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"limit": True}, "limit"),
    ({"order": "newest"}, "order"), ({"after": "item_nope"}, "after")])
def test_bad_pages_are_400s_naming_the_parameter(store: ResponseStore, kwargs: dict[str, Any],
                                                 param: str) -> None:
    store.put(response("r", inputs=2))
    with pytest.raises(InvalidRequestError) as err:
        store.input_items(A, "r", **kwargs)
    assert err.value.param == param


def test_responses_are_kept_across_a_restart(reopen: Callable[[], ResponseStore]) -> None:
    first = reopen()
    stored = first.put(response("r1", inputs=2))
    first.put(response("r2", B, previous=None))
    first.close()
    second = reopen()
    assert second.get(A, "r1") == stored
    second.put(response("r3", previous="r1"))  # previous_response_id after the restart
    assert contents(second.conversation(A, "r3")) == ["r1 in 0", "r1 in 1", "r1 out 0", "r3 in 0", "r3 out 0"]
    with pytest.raises(NotFoundError):
        second.get(A, "r2")


def test_delete_really_removes_it(reopen: Callable[[], ResponseStore]) -> None:
    first = reopen()
    first.put(response("r1", inputs=3))
    first.delete(A, "r1")
    with pytest.raises(NotFoundError):
        first.get(A, "r1")
    with pytest.raises(NotFoundError):
        first.delete(A, "r1")
    first.close()
    second = reopen()
    for call in (lambda: second.get(A, "r1"), lambda: second.input_items(A, "r1"),
                 lambda: second.conversation(A, "r1")):
        with pytest.raises(NotFoundError):
            call()


def test_a_closed_store_refuses_calls_with_a_store_error(store: ResponseStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError) as err:
        store.get(A, "r")
    assert err.value.status == 503 and "closed" in err.value.message
