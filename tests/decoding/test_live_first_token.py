"""A live request beside batch lines (issue 42): its first token is sampled, emitted and its loop
woken before the batch rows' work of that step, and a request that arrives while a step samples
joins the pass launched at the end of that step."""

from __future__ import annotations

import asyncio

from afm_struct.decoding.generator import GenerationRequest, Generator, TextDelta
from afm_struct.decoding.loop_mailbox import LoopMailbox, flush_held, held_wakeups
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.testing import Script, scripted_loaded_model


def test_a_live_first_token_goes_out_before_the_batch_rows_of_its_step(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, Script("word " * 60)))
    order: list[tuple[int, str]] = []  # (step, who) for every text delta, in emission order
    steps = [0]

    def sink(who: str):
        def put(event) -> None:
            if isinstance(event, TextDelta) and event.text:
                order.append((steps[0], who))
        return put

    def step() -> None:
        steps[0] += 1
        gen.step()

    prompt = tokenizer.encode_chat([{"role": "user", "content": "a batch line"}])
    for i in range(3):
        gen.add(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=40), background=True),
                sink(f"batch{i}"))
    for _ in range(4):  # the batch rows decode; each has emitted by now
        step()
    assert {who for _, who in order} == {"batch0", "batch1", "batch2"}
    live_prompt = tokenizer.encode_chat([{"role": "user", "content": "a live question"}])
    gen.add(GenerationRequest(live_prompt, SamplingParams(temperature=0, max_tokens=8)), sink("live"))
    while not any(who == "live" for _, who in order):
        step()
        assert steps[0] < 40, "the live request never produced a token"
    first_step = next(s for s, who in order if who == "live")
    same_step = [who for s, who in order if s == first_step]
    # The batch rows also emitted in that step, after the live row's first token.
    assert same_step[0] == "live" and len(same_step) > 1, same_step
    while gen.has_work:
        gen.step()


def test_flush_held_wakes_the_loop_for_what_was_posted_so_far():
    loop = asyncio.new_event_loop()
    try:
        box = LoopMailbox(loop)
        got: asyncio.Queue = asyncio.Queue()
        with held_wakeups():
            box.post(got.put_nowait, "first", lambda: None)
            flush_held()
            loop.run_until_complete(asyncio.sleep(0))
            assert got.qsize() == 1  # delivered while the block still holds later posts
            box.post(got.put_nowait, "rest", lambda: None)
            loop.run_until_complete(asyncio.sleep(0))
            assert got.qsize() == 1
        loop.run_until_complete(asyncio.sleep(0))
        assert [got.get_nowait() for _ in range(got.qsize())] == ["first", "rest"]
    finally:
        loop.close()
