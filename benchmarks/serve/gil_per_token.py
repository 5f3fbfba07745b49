"""The server's GIL-holding time per generated token, by thread and by part (issue 40).

Reads a ``py-spy record --gil --threads -r RATE -f raw`` profile of a server and the
``bench serve`` JSON of the run it covered (one mix), and prints microseconds of GIL held per
token: the event loop's (MainThread) and the scheduler thread's, each split by the first
matching part of its stack.  At a target rate R tokens/s, the two together must stay under
1e6 / R µs per token for one process (one GIL) to keep up at all.

    python benchmarks/serve/gil_per_token.py PROFILE.raw RUN.json [--rate 200]
"""

from __future__ import annotations

import argparse
import collections
import json

# (frame name in the stack, part) for each thread, first match wins.
PARTS = {
    "sched": [("sample_rows", "sampling"), ("BudgetCloser", "closer (checks, searches)"),
              ("fill_rows", "masks"), ("_advance", "matcher advance, forced runs"),
              ("emit_run", "emit (detokenize, turn, post)"), ("LoopMailbox", "loop wake-ups"),
              ("_forward", "forward launch (stand-in's call)")],
    "loop": [("sse_body", "SSE: events to bytes"), ("RequestResponseCycle.send", "ASGI send, h11, socket"),
             ("Run.answer", "run: event routing"), ("run_asgi", "request handling, admission"),
             ("LoopMailbox", "mailbox drain")],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile")
    p.add_argument("run")
    p.add_argument("--rate", type=float, default=200.0, help="py-spy's samples per second")
    args = p.parse_args()
    tokens = json.load(open(args.run))["runs"][0]["tokens"]
    threads: collections.Counter[str] = collections.Counter()
    parts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in open(args.profile):
        stack, count = line.rstrip().rsplit(" ", 1)
        n = int(count)
        head = stack.split(";", 1)[0]
        thread = "sched" if "afm-scheduler" in head else "loop" if "MainThread" in head else "other"
        threads[thread] += n
        part = next((name for key, name in PARTS.get(thread, []) if key in stack), "other")
        parts[(thread, part)] += n

    def us(n: int) -> float:
        return n / args.rate / tokens * 1e6

    print(f"{tokens} tokens; GIL held per token: "
          + ", ".join(f"{t} {us(n):.0f} µs" for t, n in threads.most_common())
          + f"; total {us(sum(threads.values())):.0f} µs")
    for (thread, part), n in parts.most_common():
        if us(n) >= 5:
            print(f"  {thread:5s} {part:36s} {us(n):5.0f} µs")


if __name__ == "__main__":
    main()
