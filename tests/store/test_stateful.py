"""A hypothesis state machine against a dict model, on each store: three owners and a small
pool of ids (so owners share ids), puts that replace, continue or cycle, gets, deletes, pages
of input items, conversations, restarts, and a clock that moves past the store's ttl (expired
responses are gone as deleted ones).  Every answer, including each not-found and each
refusal, and each owner's usage (count and bytes), must be the model's.

``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N random examples (shrinking a failure) instead of the
CI-sized default.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from afm_struct.errors import InvalidRequestError, NotFoundError
from afm_struct.store import ResponseStore, StoredResponse, StoreUsage, open_store, stored_size
from tests.store.conftest import KINDS, new_spec

EXPLORING = bool(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 12
OWNERS = st.sampled_from(["name:a", "name:b", "key:" + "c" * 64])
IDS = st.sampled_from([f"resp_{n}" for n in range(5)])
GIVEN_ITEM_IDS = st.one_of(st.none(), st.sampled_from(["item_x", "item_y"]))
Key = tuple[str, str]
T0, TTL = 1_700_000_000, 100


def expected(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)``, or the error's class and param: what the store must answer too."""
    try:
        return "ok", call()
    except (NotFoundError, InvalidRequestError) as exc:
        return type(exc).__name__, exc.param


class Model:
    """The dict the store must behave as (responses older than the ttl by ``now`` are gone)."""

    def __init__(self) -> None:
        self.responses: dict[Key, StoredResponse] = {}
        self.now = T0

    def expire(self) -> None:
        cutoff = self.now - TTL
        self.responses = {k: r for k, r in self.responses.items() if r.created_at >= cutoff}

    def _need(self, owner: str, rid: str, param: str | None = None) -> StoredResponse:
        self.expire()
        if (owner, rid) not in self.responses:
            raise NotFoundError("unknown", param=param)
        return self.responses[(owner, rid)]

    def usage(self, owner: str) -> StoreUsage:
        self.expire()
        mine = [r for (o, _), r in self.responses.items() if o == owner]
        return StoreUsage(len(mine), sum(stored_size(r.metadata, r.extra, [*r.input_items, *r.output_items])
                                         for r in mine))

    def put(self, response: StoredResponse) -> None:
        self.expire()
        key = (response.owner, response.id)
        if key in self.responses:
            if self.responses[key].previous_response_id != response.previous_response_id:
                raise InvalidRequestError("relink", param="previous_response_id")
        elif response.previous_response_id is not None:
            self._need(response.owner, response.previous_response_id, "previous_response_id")
            link: str | None = response.previous_response_id
            while link is not None and (response.owner, link) in self.responses:
                link = self.responses[(response.owner, link)].previous_response_id
                if link == response.id:
                    raise InvalidRequestError("cycle", param="previous_response_id")
        self.responses[key] = response

    def get(self, owner: str, rid: str) -> StoredResponse:
        return self._need(owner, rid)

    def delete(self, owner: str, rid: str) -> None:
        self._need(owner, rid)
        del self.responses[(owner, rid)]

    def input_items(self, owner: str, rid: str, after: str | None, limit: int, order: str) -> Any:
        items = list(enumerate(self._need(owner, rid).input_items))
        if after is not None:
            first = next((n for n, item in items if item["id"] == after), None)
            if first is None:
                raise InvalidRequestError("after", param="after")
            items = [(n, i) for n, i in items if (n > first if order == "asc" else n < first)]
        if order == "desc":
            items.reverse()
        return [item for _, item in items[:limit]], len(items) > limit

    def conversation(self, owner: str, rid: str) -> list[dict[str, Any]]:
        chain: list[StoredResponse] = []
        link: str | None = rid
        while link is not None:
            chain.append(self._need(owner, link, "previous_response_id"))
            link = chain[-1].previous_response_id
        return [item for r in reversed(chain) for item in (*r.input_items, *r.output_items)]


def machine(open_new: Callable[[Callable[[], float]], Callable[[], ResponseStore]],
            ) -> type[RuleBasedStateMachine]:
    """The state machine class over stores ``open_new(clock)`` makes (it returns a re-opener
    of a store with the ttl, on that clock)."""

    # (owner, id) of responses stored, drawn beside random pairs (other owners' among them).
    stored_keys = Bundle("stored")
    keys = st.one_of(stored_keys, st.tuples(OWNERS, IDS))

    class StoreMachine(RuleBasedStateMachine):
        stored = stored_keys

        def __init__(self) -> None:
            super().__init__()
            self.model = Model()
            self.reopen = open_new(lambda: self.model.now)
            self.store = self.reopen()
            self.created = itertools.count(0)

        def teardown(self) -> None:
            self.store.close()

        @rule(target=stored_keys, owner=OWNERS, rid=IDS, previous=st.one_of(st.none(), IDS),
              inputs=st.lists(GIVEN_ITEM_IDS, max_size=5), outputs=st.integers(0, 2),
              status=st.sampled_from(["completed", "in_progress", "incomplete"]))
        def put(self, owner: str, rid: str, previous: str | None, inputs: list[str | None],
                outputs: int, status: str) -> Any:
            if previous == rid:
                return multiple()
            response = StoredResponse(
                id=rid, owner=owner, status=status, created_at=self.model.now - next(self.created) % 3,
                model="m",
                previous_response_id=previous, metadata={"n": len(inputs)},
                input_items=[{"type": "message", "content": f"in {n}", **({"id": i} if i else {})}
                             for n, i in enumerate(inputs)],
                output_items=[{"type": "message", "content": f"out {n}"} for n in range(outputs)])
            try:
                stored = self.store.put(response)
            except (NotFoundError, InvalidRequestError) as exc:
                assert expected(lambda: self.model.put(response)) == (type(exc).__name__, exc.param)
                return multiple()
            given = zip(response.input_items, stored.input_items, strict=True)
            assert [i.get("id", s["id"]) for i, s in given] == [s["id"] for s in stored.input_items]
            assert expected(lambda: self.model.put(stored)) == ("ok", None)
            return (owner, rid)

        @rule(key=keys)
        def get(self, key: Key) -> None:
            owner, rid = key
            assert (expected(lambda: self.store.get(owner, rid))
                    == expected(lambda: self.model.get(owner, rid)))

        @rule(key=keys)
        def delete(self, key: Key) -> None:
            owner, rid = key
            assert (expected(lambda: self.store.delete(owner, rid))
                    == expected(lambda: self.model.delete(owner, rid)))

        @rule(key=keys, after=st.one_of(st.none(), st.sampled_from(["item_x", "item_y", "nope"]),
                                        st.integers(0, 4)),
              limit=st.integers(1, 4), order=st.sampled_from(["asc", "desc"]))
        def input_items(self, key: Key, after: str | int | None, limit: int, order: str) -> None:
            owner, rid = key
            if isinstance(after, int):  # the id of an item the store named
                known = self.model.responses.get((owner, rid))
                items = known.input_items if known else []
                after = items[after]["id"] if after < len(items) else None
            got = expected(lambda: self.store.input_items(owner, rid, after=after, limit=limit,
                                                          order=order))  # type: ignore[arg-type]
            if got[0] == "ok":
                got = ("ok", (got[1].data, got[1].has_more))
            assert got == expected(lambda: self.model.input_items(owner, rid, after, limit, order))

        @rule(key=keys)
        def conversation(self, key: Key) -> None:
            owner, rid = key
            assert (expected(lambda: self.store.conversation(owner, rid))
                    == expected(lambda: self.model.conversation(owner, rid)))

        @rule()
        def restart(self) -> None:
            self.store.close()
            self.store = self.reopen()

        @rule(seconds=st.sampled_from([1, TTL // 2, TTL, TTL + 1]))
        def advance(self, seconds: int) -> None:
            self.model.now += seconds

        @rule(owner=OWNERS)
        def usage(self, owner: str) -> None:
            assert self.store.usage(owner) == self.model.usage(owner)

        @invariant()
        def every_response_is_its_owners(self) -> None:
            self.model.expire()
            for (owner, rid), response in self.model.responses.items():
                assert self.store.get(owner, rid) == response

    return StoreMachine


@pytest.mark.parametrize("kind", KINDS)
def test_the_store_behaves_as_the_dict_model(kind: str, tmp_path: Path,
                                             request: pytest.FixtureRequest) -> None:
    def open_new(clock: Callable[[], float]) -> Callable[[], ResponseStore]:
        spec = new_spec(kind, tmp_path, request)
        return lambda: open_store(spec, ttl_s=TTL, clock=clock)

    run_state_machine_as_test(machine(open_new), settings=settings(
        max_examples=EXAMPLES, stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.too_slow], derandomize=not EXPLORING,
        # Shrinking runs hundreds of examples against a real database: minutes, past the test
        # timeout.  A failure prints its steps unshrunk; exploring runs shrink.
        phases=list(Phase) if EXPLORING else [p for p in Phase if p is not Phase.shrink]))
