"""What the budget-aware closer's searches cost: searches, search time and tokens per request.

Runs constrained generations cut by ``max_tokens`` (so the whole output lies in the closer's
zone) and counts the searches the closer makes (``BudgetCloser._search`` in
``afm_struct.decoding.length_close``; not the admission search of ``check_budget``), with their
wall time, and the closer's whole time (``before_sample`` + ``review``: searches, probes,
repairs):

* ``random``: the random-logits model (``afm_struct.testing.RandomModel``, temperature 1) on
  JSONSchemaBench dev-set schemas (``tests/dev_set.py``) compiled strict, ``max_tokens`` drawn in
  [``--min-budget``, ``--max-budget``], embedded tokenizer;
* ``scripted``: the scripted model as ``serve --model scripted`` runs it (its script is numbers, so
  under a schema it follows its noise), same schemas and budgets;
* ``cmoa``: tests/fuzz/test_regressions.py's CMOA record: a tiny qwen3 (byte-level 151k
  vocabulary) through HTTP, temperature 1.5, ``max_tokens`` 400, thinking on and off.

Each length-ended output is judged by the constraint's ``validate`` (``invalid`` must stay 0).
``--profile FILE`` writes a cProfile of the closer alone (pstats).

    PYTHONPATH=<tree> python benchmarks/closing/search_cost.py --n 40 --seed 3 --out FILE.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Counter:
    """The closer's searches, their wall time and all its time, per request (reset by the
    caller)."""

    def __init__(self, profile: cProfile.Profile | None) -> None:
        self.searches = 0
        self.seconds = 0.0
        self.closer_seconds = 0.0
        self.profile = profile


@contextmanager
def counting(profile: cProfile.Profile | None) -> Iterator[Counter]:
    """Wrap the closer (``BudgetCloser``): its searches (``_search``: not the admission search
    of ``check_budget``) counted and timed, and its whole time per token (``before_sample``
    and ``review``: searches, probes, repairs) timed."""
    from afm_struct.decoding.length_close import BudgetCloser

    counter = Counter(profile)
    originals: dict[str, Callable[..., Any]] = {
        name: getattr(BudgetCloser, name) for name in ("_search", "before_sample", "review")}

    def searched(*args: Any, **kwargs: Any) -> Any:
        counter.searches += 1
        t0 = time.perf_counter()
        try:
            return originals["_search"](*args, **kwargs)
        finally:
            counter.seconds += time.perf_counter() - t0

    def timed(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            if counter.profile is not None:
                counter.profile.enable()
            try:
                return originals[name](*args, **kwargs)
            finally:
                if counter.profile is not None:
                    counter.profile.disable()
                counter.closer_seconds += time.perf_counter() - t0
        return call

    BudgetCloser._search = searched  # type: ignore[method-assign]
    BudgetCloser.before_sample = timed("before_sample")  # type: ignore[method-assign]
    BudgetCloser.review = timed("review")  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        for name, original in originals.items():
            setattr(BudgetCloser, name, original)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means and totals over the requests of one kind."""
    if not rows:
        return {"requests": 0}
    searches = [r["searches"] for r in rows]
    ms = [r["search_ms"] for r in rows]
    closer = [r["closer_ms"] for r in rows]
    return {
        "requests": len(rows),
        "tokens_mean": round(statistics.mean(r["tokens"] for r in rows), 1),
        "searches_mean": round(statistics.mean(searches), 2),
        "searches_total": sum(searches),
        "search_ms_mean": round(statistics.mean(ms), 2),
        "search_ms_max": round(max(ms), 1),
        "search_ms_total": round(sum(ms), 1),
        "ms_per_search": round(sum(ms) / max(1, sum(searches)), 3),
        "closer_ms_mean": round(statistics.mean(closer), 2),
        "closer_ms_total": round(sum(closer), 1),
        "length_valid": sum(r["finish"] == "length" and r["valid"] for r in rows),
        "length_invalid": sum(r["finish"] == "length" and not r["valid"] for r in rows),
        "stop": sum(r["finish"] == "stop" for r in rows),
    }


def run_local(kind: str, n: int, seed: int, budgets: tuple[int, int],
              counter: Counter) -> list[dict[str, Any]]:
    """``n`` generations on dev-set schemas with the random or scripted model."""
    from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
    from afm_struct.decoding.length_close import check_budget
    from afm_struct.decoding.sampling import SamplingParams
    from afm_struct.errors import AfmError
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct.models import load_tokenizer
    from afm_struct.testing import SERVED_SCRIPT, random_loaded_model, scripted_loaded_model
    from tests.dev_set import dev_files

    tok = load_tokenizer()
    files = dev_files()
    rng = random.Random(seed)
    prompt = tok.encode_chat([{"role": "user", "content": "JSON please"}])
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        path = rng.choice(files)
        budget = rng.randint(*budgets)
        sample_seed = rng.randrange(1 << 30)
        try:
            schema = json.loads(path.read_text())["schema"]
            constraint = compile_constraint(tok, JsonSchemaRequest(schema, strict=True))
            if constraint.new_matcher() is None or constraint.mode != "enforced":
                continue
            check_budget(constraint, tok, budget, param="max_tokens")
        except (AfmError, ValueError):
            continue
        loaded = (random_loaded_model(tok, sample_seed) if kind == "random"
                  else scripted_loaded_model(tok, SERVED_SCRIPT))
        gen = Generator.from_loaded(loaded)
        params = SamplingParams(temperature=1.0, seed=sample_seed, max_tokens=budget)
        counter.searches, counter.seconds, counter.closer_seconds = 0, 0.0, 0.0
        fin = list(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))[-1]
        assert isinstance(fin, Finished)
        rows.append({"file": path.name, "budget": budget, "seed": sample_seed,
                     "tokens": fin.usage.completion_tokens,
                     "finish": fin.reason.value, "valid": constraint.validate(fin.text).ok,
                     "searches": counter.searches, "search_ms": round(counter.seconds * 1000, 2),
                     "closer_ms": round(counter.closer_seconds * 1000, 2)})
    return rows


def run_cmoa(counter: Counter, repeat: int) -> list[dict[str, Any]]:
    """The CMOA record through HTTP on a tiny qwen3 (thinking on and off)."""
    import tempfile

    import httpx

    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct.models.loader import load_model
    from server.live import start_server
    from tests.dev_set import dev_files
    from tests.models import gguf_factory

    record = next(p for p in dev_files() if p.name == "Github_hard---o23555.json")
    schema = json.loads(record.read_text())["schema"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = gguf_factory.qwen3()
        gguf_factory.build_reference(tiny)
        loaded = load_model(str(gguf_factory.write_gguf(tiny, Path(tmp) / "qwen3.gguf")))
        constraint = compile_constraint(loaded.tokenizer, JsonSchemaRequest(schema, strict=True))
        server = start_server(loaded)
        try:
            for _ in range(repeat):
                for thinking in (False, True):
                    body: dict[str, Any] = {
                        "temperature": 1.5, "seed": 168225439, "max_tokens": 400,
                        "messages": [{"role": "system", "content": "You are terse."},
                                     {"role": "user", "content": "city weather x id value a count"}],
                        "response_format": {"type": "json_schema", "json_schema": {
                            "name": "answer", "strict": True, "schema": schema}}}
                    if not thinking:
                        body["chat_template_kwargs"] = {"enable_thinking": False}
                    counter.searches, counter.seconds, counter.closer_seconds = 0, 0.0, 0.0
                    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300).json()
                    if "choices" not in reply:
                        raise SystemExit(f"cmoa: {reply}")
                    choice = reply["choices"][0]
                    text = choice["message"]["content"] or ""
                    rows.append({"thinking": thinking, "tokens": reply["usage"]["completion_tokens"],
                                 "finish": choice["finish_reason"], "valid": constraint.validate(text).ok,
                                 "searches": counter.searches, "search_ms": round(counter.seconds * 1000, 2),
                     "closer_ms": round(counter.closer_seconds * 1000, 2)})
        finally:
            server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="requests per local kind")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--min-budget", type=int, default=20)
    parser.add_argument("--max-budget", type=int, default=200)
    parser.add_argument("--kinds", default="random,scripted,cmoa")
    parser.add_argument("--cmoa-repeat", type=int, default=1)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the searches here")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    import afm_struct

    profile = cProfile.Profile() if args.profile else None
    report: dict[str, Any] = {"tree": str(Path(afm_struct.__file__).parents[1]), "seed": args.seed,
                              "budgets": [args.min_budget, args.max_budget], "kinds": {}}
    t0 = time.perf_counter()
    with counting(profile) as counter:
        for kind in args.kinds.split(","):
            if kind == "cmoa":
                rows = run_cmoa(counter, args.cmoa_repeat)
            else:
                rows = run_local(kind, args.n, args.seed, (args.min_budget, args.max_budget), counter)
            report["kinds"][kind] = {"summary": summary(rows), "requests": rows}
            print(kind, json.dumps(report["kinds"][kind]["summary"]), flush=True)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    if profile is not None:
        profile.dump_stats(str(args.profile))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
