"""Random traffic through the generator as a hypothesis state machine (scripted or real model).

The machine draws a generator configuration (batch 1-12, prefill slice sizes, tail joins, prefix
cache on or off, prompts prefilled together or not), then interleaves at random: arrivals of
0-8 requests (admitted at once, or held until rows free their slots, admitted between the
generator's ``sample_and_emit`` and ``launch_forward`` phases as the scheduler's join wait
admits them), iterations of the phases, and cancels of any request (running, prefilling, not
yet started, finished).
Requests come in the shapes that stress the caches: equal token lengths, shared prefixes, exact
repeats (prefix-cache hits), prompts longer than a prefill slice; json_schema, json_object, a
tool call (stops do not cut it) or free text; stop strings; max_tokens; budget-aware closing on
or off; greedy or seeded sampling.

After every rule, and between the phases of every iteration, it checks the structure
(``check_structure``):

* every batched group's cache holds one row per sequence, in every layer, and each row holds
  exactly ``prompt + tokens decided so far - tokens not yet fed`` positions (the scripted model:
  exactly those tokens; the real one: that many positions);
* a sequence still prefilling holds ``prefilled`` positions; no two groups (nor a group and the
  spare batch) share a cache; no sequence is both prefilling and in a group;
* every request's events end with at most one ``Finished`` and nothing after it.

At the end (teardown) the generator drains to idle, and then:

* every request got exactly one ``Finished``, last, and never ``error``;
* a request cancelled before it finished ends ``cancelled``;
* a request that was not cancelled ends as it does alone on a fresh generator: text and finish
  reason exactly (scripted); greedy requests on the real model too, unless the first token where
  they diverge was a near tie in the logits (``TIE_EPS``), which floating point explains;
* the generator is idle: no groups, nothing prefilling, the spare batch holds no live padding.

``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples instead of the CI-sized default.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest, ToolCallRequest, ToolDef
from afm_struct.testing import ScriptedBatch, ScriptedCache

from .phases import iterate

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 4},
]
TOOLS = (ToolDef("get_weather", {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
    "additionalProperties": False}), ToolDef("get_time", {"type": "object", "properties": {
        "zone": {"type": "string"}}, "required": ["zone"], "additionalProperties": False}))
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
KINDS = ["free", "free", "schema0", "schema1", "json_object", "tool"]
STOPS = [(), (), ("}",), ("a",), (" z", "ta"), ("\n",)]
# A greedy token on the real model may flip between a batched and a lone run when its two best
# logits are closer than floating point noise between the two (BLAS blocks by batch size).
TIE_EPS = 0.25


def examples(default: int) -> int:
    """How many examples: ``AFM_STRUCT_RANDOM_EXAMPLES`` overrides the CI-sized default."""
    return int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or default


def machine_settings(default_examples: int, steps: int) -> settings:
    """Reproducible in CI: derandomized, no example database, no deadline."""
    return settings(max_examples=examples(default_examples), stateful_step_count=steps,
                    deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


_CONSTRAINTS: dict[tuple[int, str], Any] = {}


def constraint_for(tokenizer: Any, kind: str) -> Any:
    """Compiled once per tokenizer and kind."""
    key = (id(tokenizer), kind)
    if key not in _CONSTRAINTS:
        if kind.startswith("schema"):
            spec: Any = JsonSchemaRequest(SCHEMAS[int(kind[-1])], strict=True)
        elif kind == "json_object":
            spec = JsonObjectRequest()
        else:
            spec = ToolCallRequest(TOOLS)
        _CONSTRAINTS[key] = compile_constraint(tokenizer, spec)
    return _CONSTRAINTS[key]


@dataclass(frozen=True)
class Spec:
    """What one request is, before it is built (so the lone run can build the same one)."""

    prompt: tuple[int, ...]
    kind: str
    max_tokens: int
    stop: tuple[str, ...]
    temperature: float
    seed: int
    close_on_length: bool
    fast_forward: bool


class Recorder:
    """A logits processor that changes nothing and records, for each decision, the tokens so
    far and the margin between the two best (masked) logits."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], float]] = []

    def __call__(self, tokens: list[int], logits: mx.array) -> mx.array:
        top = mx.topk(logits[0].astype(mx.float32), 2)
        hi, lo = sorted(top.tolist(), reverse=True)
        self.calls.append((list(tokens), float(hi - lo)))
        return logits


def build(tokenizer: Any, spec: Spec, request_id: str, *,
          record: bool) -> tuple[GenerationRequest, Recorder]:
    """The request ``spec`` describes, with a fresh recorder (that records if ``record``)."""
    recorder = Recorder()
    constraint = None if spec.kind == "free" else constraint_for(tokenizer, spec.kind)
    params = SamplingParams(temperature=spec.temperature, seed=spec.seed, max_tokens=spec.max_tokens,
                            stop=spec.stop)
    request = GenerationRequest(list(spec.prompt), params, constraint=constraint,
                                logits_processors=[recorder] if record else [],
                                fast_forward=spec.fast_forward, close_on_length=spec.close_on_length,
                                stops_cut_grammar=spec.kind != "tool", request_id=request_id)
    return request, recorder


@dataclass
class Tracked:
    """One request of a run and what happened to it."""

    spec: Spec
    request: GenerationRequest
    recorder: Recorder
    cancel: threading.Event
    events: list[Any] = field(default_factory=list)
    # Set when the cancel came while the request had not finished (it must end cancelled).
    cancelled_live: bool = False

    @property
    def finished(self) -> bool:
        return any(isinstance(e, Finished) for e in self.events)


def shapes(max_words: int) -> st.SearchStrategy[tuple[str, int, int]]:
    """(shape, a, b): how to make a prompt (see ``TrafficMachine.prompt``)."""
    return st.tuples(st.sampled_from(["equal", "equal", "prefix", "repeat", "long", "short"]),
                     st.integers(0, 10_000), st.integers(1, max_words))


def spec_parts(max_tokens: int, temperatures: list[float]) -> st.SearchStrategy[tuple[Any, ...]]:
    """Everything of a request but its prompt."""
    return st.tuples(st.sampled_from(KINDS), st.integers(1, max_tokens), st.sampled_from(STOPS),
                     st.sampled_from(temperatures), st.integers(0, 999), st.booleans(),
                     st.sampled_from([True, True, False]), st.booleans())


class TrafficMachine(RuleBasedStateMachine):
    """Subclasses set ``loaded`` (a LoadedModel), the strategies' sizes and ``exact``."""

    loaded: Any = None
    max_tokens = 30
    max_words = 60
    temperatures: tuple[float, ...] = (0.0, 0.9)
    exact = True  # scripted: every non-cancelled request equals its lone run exactly
    step_limit = 5_000

    def __init__(self) -> None:
        super().__init__()
        self.tracked: list[Tracked] = []
        self.prompts: list[tuple[int, ...]] = []
        self.gen: Generator | None = None
        # Arrivals held back, as the scheduler holds them: admitted when rows free their slots
        # in the middle of an iteration (after sample_and_emit, where the join wait admits
        # replacements).
        self.held: list[Tracked] = []
        self.base = ""
        self.steps = 0

    # -- rules ---------------------------------------------------------------------------------

    @initialize(max_batch=st.integers(1, 12), prefill_budget=st.sampled_from([8, 16, 64, 512]),
                busy=st.sampled_from([4, 16, 128]), join_tail=st.sampled_from([0, 2, 4]),
                prefix=st.sampled_from([0, 4, 16]), together=st.booleans(),
                base_words=st.lists(st.sampled_from(WORDS), min_size=2, max_size=8))
    def start(self, max_batch: int, prefill_budget: int, busy: int, join_tail: int, prefix: int,
              together: bool, base_words: list[str]) -> None:
        self.config = {"max_batch": max_batch, "prefill_budget": prefill_budget,
                       "busy_prefill_budget": busy, "join_tail": join_tail,
                       "prefix_cache_size": prefix, "batch_prefill": together}
        self.gen = self.make_generator()
        self.base = " ".join(base_words)

    def slots_freed(self, freed: int) -> None:
        """Rows left the shared group mid-iteration: held arrivals take the freed slots."""
        for t in self.held[:freed]:
            self.admit(t)
        del self.held[:freed]

    def iterate(self) -> None:
        """One iteration of the phases as the scheduler drives them, held arrivals refilling
        freed rows, the structure checked between the phases."""
        gen = self.gen
        assert gen is not None
        iterate(gen, self.slots_freed, between=lambda: check_structure(gen))

    def admit(self, t: Tracked) -> None:
        assert self.gen is not None
        self.gen.add(t.request, t.events.append, t.cancel)

    def make_generator(self) -> Generator:
        return Generator.from_loaded(self.loaded, **self.config)

    @rule(arrivals=st.lists(st.tuples(shapes(60), spec_parts(30, [0.0, 0.0, 0.9])), max_size=8),
          hold=st.sampled_from([False, False, True]))
    def arrive(self, arrivals: list[tuple[tuple[str, int, int], tuple[Any, ...]]], hold: bool) -> None:
        assert self.gen is not None
        for shape, parts in arrivals:
            kind, max_tokens, stop, temperature, seed, close, ff, cancel_first = parts
            spec = Spec(self.prompt(*shape), kind, min(max_tokens, self.max_tokens), stop,
                        temperature if temperature in self.temperatures else 0.0, seed, close, ff)
            request, recorder = build(self.loaded.tokenizer, spec, f"r{len(self.tracked)}",
                                     record=not self.exact)
            t = Tracked(spec, request, recorder, threading.Event())
            self.tracked.append(t)
            if cancel_first and seed % 8 == 0:  # a request cancelled before it is admitted
                t.cancel.set()
                t.cancelled_live = True
            if hold:
                self.held.append(t)
            else:
                self.admit(t)

    @precondition(lambda self: bool(self.held))
    @rule()
    def admit_held(self) -> None:
        for t in self.held:
            self.admit(t)
        self.held.clear()

    @rule(n=st.integers(1, 6))
    def step(self, n: int) -> None:
        assert self.gen is not None
        for _ in range(n):
            if not self.gen.has_work:
                return
            self.iterate()  # nothing may escape
            self.steps += 1
            check_structure(self.gen)

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=st.integers(0, 10_000))
    def cancel(self, pick: int) -> None:
        t = self.tracked[pick % len(self.tracked)]
        if not t.finished and not t.cancel.is_set():
            t.cancelled_live = True
        t.cancel.set()

    @invariant()
    def structure(self) -> None:
        if self.gen is not None:
            check_structure(self.gen)
        for t in self.tracked:
            ends = [i for i, e in enumerate(t.events) if isinstance(e, Finished)]
            assert len(ends) <= 1 and (not ends or ends[0] == len(t.events) - 1), (
                t.request.request_id, t.events[-3:])

    # -- prompts -------------------------------------------------------------------------------

    def prompt(self, shape: str, a: int, b: int) -> tuple[int, ...]:
        """A prompt of the drawn shape (chat-templated token ids)."""
        if shape == "repeat" and self.prompts:
            return self.prompts[a % len(self.prompts)]
        if shape == "equal":
            text = f"{self.base} item {a % 9 + 1}"  # one token length per run
        elif shape == "prefix":
            text = f"{self.base} " + " ".join(WORDS[(a + i * 7) % len(WORDS)] for i in range(b % 12 + 1))
        elif shape == "long":
            n = max(self.max_words // 2, b)
            text = " ".join(WORDS[(a * 31 + i * 5 + i * i) % len(WORDS)] for i in range(n))
        else:
            text = WORDS[a % len(WORDS)]
        ids = tuple(self.loaded.tokenizer.encode_chat([{"role": "user", "content": text}]))
        self.prompts.append(ids)
        return ids

    # -- the end -------------------------------------------------------------------------------

    def teardown(self) -> None:
        if self.gen is None:
            return
        self.admit_held()
        while self.gen.has_work:
            self.iterate()
            self.steps += 1
            check_structure(self.gen)
            assert self.steps < self.step_limit, "the generator does not make progress"
        check_idle(self.gen)
        for t in self.tracked:
            ends = [i for i, e in enumerate(t.events) if isinstance(e, Finished)]
            assert len(ends) == 1 and ends[0] == len(t.events) - 1, (t.request.request_id, t.events[-3:])
            got = t.events[-1]
            assert "".join(e.text for e in t.events[:-1]) == got.text
            self.check_end(t, got)
        self.compare_alone()

    def check_end(self, t: Tracked, got: Finished) -> None:
        """How one request must have ended: never ``error``; ``cancelled`` if cancelled live."""
        assert got.reason != "error", (t.request.request_id, got.error)
        if t.cancelled_live:
            assert got.reason == "cancelled", (t.request.request_id, got.reason, self.config)

    def compared(self, t: Tracked) -> bool:
        """Whether ``t`` must end as it does alone (subclasses exempt requests they broke)."""
        return not t.cancel.is_set() and (self.exact or t.spec.temperature == 0)

    def compare_alone(self) -> None:
        """Non-cancelled requests end as they do alone on a fresh generator."""
        for t in self.tracked:
            if not self.compared(t):
                continue
            alone, recorder = self.alone(t)
            got = t.events[-1]
            if (got.text, got.reason) == (alone.text, alone.reason):
                continue
            where = (self.config, t.request.request_id, t.spec, got.text, got.reason,
                     alone.text, alone.reason)
            assert not self.exact, where
            margin = divergence_margin(t.recorder, recorder)
            assert margin is not None and margin <= TIE_EPS, (margin, *where)
            self.ties = getattr(self, "ties", 0) + 1

    def alone(self, t: Tracked) -> tuple[Finished, Recorder]:
        """How ``t``'s request ends alone on a fresh generator (and its recorder)."""
        request, recorder = build(self.loaded.tokenizer, t.spec, t.request.request_id,
                                  record=not self.exact)
        events = list(Generator.from_loaded(self.loaded).generate(request))
        assert isinstance(events[-1], Finished)
        return events[-1], recorder


def divergence_margin(batched: Recorder, alone: Recorder) -> float | None:
    """The smaller top-2 logit margin at the first decision where the two runs' tokens differ
    (None when the recorded histories do not explain the difference)."""
    a = batched.calls[-1][0] if batched.calls else []
    b = alone.calls[-1][0] if alone.calls else []
    p = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    margins = [m for rec in (batched, alone) for tokens, m in rec.calls if len(tokens) == p]
    return min(margins) if margins else None


def _expected(seq: Any) -> list[int]:
    """The tokens a sequence's cache must hold: its prompt and decided tokens, less those not
    fed yet (a prompt tail joining the batch, or a forced run waiting its turn)."""
    fed = [*seq.request.prompt_ids, *seq.tokens]
    return fed[:len(fed) - len(seq.pending)]


def _row_lengths(layer: Any) -> list[int] | None:
    lengths = getattr(layer, "lengths", None)
    return list(lengths) if lengths is not None else None


def check_structure(gen: Generator) -> None:
    """Rows, cache contents and ownership agree, whatever happened so far."""
    groups = gen.batch.groups
    caches = [id(g.cache) for g in groups]
    assert len(set(caches)) == len(caches), "two groups share one cache"
    if gen.batch.spare is not None:
        assert id(gen.batch.spare) not in caches, "the spare batch is a live group's cache"
    in_groups = {id(s) for g in groups for s in g.rows}
    assert not in_groups & {id(s) for s in gen.prefiller.waiting}, "a sequence prefills and decodes"
    assert sum(1 for g in groups if g.shared) <= 1, "more than one shared group"
    for g in groups:
        assert g.rows, "an empty group stays"
        assert not any(s.done for s in g.rows), "a finished row stays in its group"
        if not g.batched:
            assert len(g.rows) == 1
            _check_seq_cache(g.cache, _expected(g.rows[0]))
            continue
        for layer in g.cache:
            if isinstance(layer, ScriptedBatch):
                assert len(layer.rows) == len(g.rows), (len(layer.rows), len(g.rows))
                assert layer.right_padding is None
                for row, seq in zip(layer.rows, g.rows, strict=True):
                    _check_fed(row.fed, _expected(seq), seq.request.request_id)
                continue
            lengths = _row_lengths(layer)
            assert lengths is not None, type(layer)
            assert len(lengths) == len(g.rows), (len(lengths), len(g.rows))
            assert layer.packing is None and layer._right_padding is None
            want = [len(_expected(s)) for s in g.rows]
            assert lengths == want, (lengths, want)
            if layer.keys is not None:
                assert layer.keys.shape[0] >= len(lengths) and layer.keys.shape[2] >= max(lengths, default=0)
    for seq in gen.prefiller.waiting:
        if seq.cache is not None and not seq.done:
            _check_seq_cache(seq.cache, list(seq.request.prompt_ids[:seq.prefilled]))


def _check_seq_cache(cache: list[Any], expected: list[int]) -> None:
    for layer in cache:
        if isinstance(layer, ScriptedCache):
            _check_fed(layer.fed, expected, "")
        else:
            assert layer.offset == len(expected), (layer.offset, len(expected))


def _check_fed(fed: list[int], expected: list[int], rid: str) -> None:
    if fed != expected:
        i = next((i for i, (a, b) in enumerate(zip(fed, expected, strict=False)) if a != b),
                 min(len(fed), len(expected)))
        raise AssertionError(f"{rid}: the cache holds {len(fed)} tokens, {len(expected)} expected, "
                             f"first difference at {i}: {fed[i:i + 4]} vs {expected[i:i + 4]}")


def check_idle(gen: Generator) -> None:
    """Nothing left running, and the memory kept for the next batch is in a clean state."""
    assert not gen.batch.groups and not gen.prefiller.waiting and not gen.active and gen.decoding == 0
    if gen.batch.spare is not None:
        for layer in gen.batch.spare:
            assert getattr(layer, "packing", None) is None
            assert getattr(layer, "_right_padding", None) is None
