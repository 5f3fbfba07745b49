"""A deterministic scripted model behind the same interface as a real one, for fast tests.

It favours the next token of a script (a string, or a function of the prompt) at every
position, with fixed pseudo-random logits elsewhere, so masks and samplers behave as with a
real model while the output is known in advance.  It can also fail or slow down on purpose.

As a benchmark stand-in (``serve --model scripted:N``) it costs what it declares: a script's
token ids are encoded once per distinct text (not per sequence, and the served script before
the first request), a call builds its logits in a fixed handful of lazy MLX ops whatever the
batch, and ``Script.forward_s`` is spent like a device's forward pass, asynchronously: the
pass is "done" that long after it was launched (passes queue one after another), and
:meth:`ScriptedModel.settle` waits for it where the generator reads logits, so the CPU work the
loop overlaps with a real pass overlaps with this one too.  Its own measured cost per step is in
docs/benchmarks.md ("The scripted stand-in").
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import numpy as np

from .models.loader import LoadedModel, ModelInfo
from .models.tokenizer import Tokenizer


class ScriptedCache:
    """Tracks how many tokens the model has seen (all a scripted model needs of a KV cache)."""

    def __init__(self) -> None:
        self.offset = 0
        self.prompt_len: int | None = None
        self.fed: list[int] = []
        self.calls = 0  # forward calls on this cache (a restored prefix starts at offset > 0)
        self.script: list[int] | None = None  # what the model says for this sequence

    @property
    def state(self) -> list[mx.array]:
        """Something evaluable, like a real cache's state."""
        return [mx.array(self.offset)]


class ScriptedBatch:
    """A batch of scripted caches (row i is ``rows[i]``), with pending right padding."""

    def __init__(self, rows: list[ScriptedCache]) -> None:
        self.rows = rows
        self.right_padding: list[int] | None = None

    @property
    def state(self) -> list[mx.array]:
        """Something evaluable."""
        return [mx.array(len(self.rows))]


class ScriptedCacheOps:
    """The generator's batch-cache operations for scripted and random models."""

    def batchable(self, seq_cache: list[Any]) -> bool:
        """Always: scripted rows are independent."""
        return True

    def append(self, batch: list[Any], seq_cache: list[Any]) -> None:
        """Add a row."""
        batch[0].rows.append(seq_cache[0])

    def reserve_rows(self, batch: list[Any], rows: int) -> None:
        """Nothing to allocate."""

    def refill(self, spare: list[Any], seq_caches: list[list[Any]]) -> list[Any] | None:
        """No memory to reuse: build a new batch."""
        return None

    def batch_of(self, seq_caches: list[list[Any]]) -> list[Any]:
        """The rows, batched."""
        return [ScriptedBatch([c[0] for c in seq_caches])]

    def extract(self, batch: list[Any], row: int) -> list[Any]:
        """One row."""
        return [batch[0].rows[row]]

    def extend(self, batch: list[Any], other: list[Any]) -> None:
        """Append rows."""
        batch[0].rows.extend(other[0].rows)

    def filter(self, batch: list[Any], keep: list[int]) -> None:
        """Keep rows."""
        batch[0].rows = [batch[0].rows[i] for i in keep]

    def prepare(self, batch: list[Any], right_padding: list[int]) -> None:
        """Remember the padding of the next call."""
        batch[0].right_padding = right_padding

    def finalize(self, batch: list[Any]) -> None:
        """Forget it."""
        batch[0].right_padding = None

    def snapshot(self, seq_cache: list[Any]) -> Any | None:
        """The tokens fed so far."""
        return list(seq_cache[0].fed)

    def restore(self, snapshot: Any, length: int) -> list[Any]:
        """A cache that has seen the first ``length`` of them."""
        c = ScriptedCache()
        c.fed, c.offset = list(snapshot[:length]), length
        return [c]


def _rows_of(inputs: mx.array, cache: Any) -> list[tuple[ScriptedCache, list[int], int]]:
    """(row cache, real tokens, padding) for each row of a call."""
    tokens = inputs.tolist()
    if isinstance(cache[0], ScriptedBatch):
        batch = cache[0]
        pads = batch.right_padding or [0] * len(batch.rows)
        return [(c, row[: len(row) - p], p) for c, row, p in zip(batch.rows, tokens, pads, strict=True)]
    return [(cache[0], tokens[0], 0)]


@dataclass
class Script:
    """What the scripted model says: text, or text chosen from the prompt token ids."""

    text: str | Callable[[list[int]], str]
    fail_at: int | None = None  # raise after generating this many tokens
    delay_s: float = 0.0  # sleep per forward call (to make cancellation observable)
    # A device's forward time per call: spent asynchronously (see the module docstring).
    forward_s: float = 0.0


# Distinct script texts whose token ids a model keeps (callable scripts may answer per prompt).
_ENCODED_TEXTS = 256
# Logits rows kept ready, one per favoured token (~200 KB each at a 49k vocabulary): a call is
# then one gather; a call favouring a token past them builds its rows instead (same values).
_READY_ROWS = 128


class ScriptedModel:
    """``model(tokens, cache=...) -> logits`` with the script's next token far ahead."""

    def __init__(self, tokenizer: Tokenizer, script: Script, *, vocab_size: int | None = None,
                 seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.vocab_size = vocab_size or tokenizer.vocab_size
        self.args = SimpleNamespace(vocab_size=self.vocab_size)
        rng = np.random.default_rng(seed)
        self._noise = mx.array(rng.standard_normal(self.vocab_size).astype(np.float32))
        self._eos = min(tokenizer.eos_token_ids) if tokenizer.eos_token_ids else 0
        self.calls = 0
        self.cache_ops = ScriptedCacheOps()
        # The generator's forward-cost model: a fixed part worth this many positions.
        self.fixed_cost_positions = 8.0
        probe = [{"role": "user", "content": "x"}]
        with_header = tokenizer.apply_chat_template(probe, add_generation_prompt=True)
        header = with_header[len(tokenizer.apply_chat_template(probe, add_generation_prompt=False)):]
        self._marker = tokenizer.encode(header) if header else []
        self._marker_head = self._marker[0] if self._marker else -1
        self._arange = mx.arange(self.vocab_size)
        self._row_slot: dict[int, int] = {-1: 0}  # favoured token -> its row of _rows (-1: noise)
        self._rows = self._noise[None]
        # Evaluated here: a lazy array made on this thread cannot be evaluated on the
        # scheduler's (MLX streams are per thread).
        mx.eval(self._arange, self._rows)
        self._encoded: OrderedDict[str, list[int]] = OrderedDict()
        self._encoded_lock = threading.Lock()
        self._device_free_at = 0.0  # when the last launched pass is done (forward_s)
        if not callable(script.text):
            self.script_ids_of(script.text)  # encoded now, not on the decoding thread

    def script_ids_of(self, text: str) -> list[int]:
        """The token ids of ``text`` (encoded once per text; the caller appends EOS)."""
        with self._encoded_lock:
            ids = self._encoded.get(text)
            if ids is not None:
                self._encoded.move_to_end(text)
                return ids
        ids = list(self.tokenizer.encode(text))
        with self._encoded_lock:
            self._encoded[text] = ids
            while len(self._encoded) > _ENCODED_TEXTS:
                self._encoded.popitem(last=False)
        return ids

    def settle(self) -> None:
        """Wait until the passes launched so far would be done (``Script.forward_s``); the
        generator calls it before it reads logits."""
        wait = self._device_free_at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)

    def make_cache(self) -> list[ScriptedCache]:
        """One scripted cache per sequence."""
        return [ScriptedCache()]

    def eval(self) -> ScriptedModel:
        """nn.Module compatibility."""
        return self

    def _script_ids(self, cache: ScriptedCache) -> list[int]:
        # Kept on the cache itself: keyed by id(cache), a new cache could inherit a dead one's.
        if cache.script is None:
            prompt = cache.fed[: cache.prompt_len]
            text = self.script.text(prompt) if callable(self.script.text) else self.script.text
            cache.script = [*self.script_ids_of(text), self._eos]
        return cache.script

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        self.calls += 1
        if self.script.delay_s:
            time.sleep(self.script.delay_s)
        if self.script.forward_s:
            self._device_free_at = (max(self._device_free_at, time.perf_counter())
                                    + self.script.forward_s)
        rows = _rows_of(inputs, cache)
        width = max(len(tokens) + pad for _, tokens, pad in rows)
        # The favoured token of every (row, position), -1 where the row sees noise: one
        # compare, select and add for the whole call (noise + 30 at the favoured id).
        targets = [[*self._row_logits(c, tokens), *([-1] * pad)] for c, tokens, pad in rows]
        flat = [t for row in targets for t in row]
        if self._ready(flat):
            slots = mx.array([self._row_slot[t] for t in flat], dtype=mx.int32)
            return mx.take(self._rows, slots, axis=0).reshape(len(rows), width, self.vocab_size)
        wanted = mx.array(targets, dtype=mx.int32).reshape(len(rows), width, 1)
        return self._noise + mx.where(self._arange == wanted, 30.0, 0.0)

    def _ready(self, targets: list[int]) -> bool:
        """Whether every target has a ready row (adding the missing ones while there is room)."""
        new = [t for t in dict.fromkeys(targets) if t not in self._row_slot]
        if not new:
            return True
        if len(self._row_slot) + len(new) > _READY_ROWS:
            return False
        built = self._noise + mx.where(self._arange == mx.array(new, dtype=mx.int32)[:, None], 30.0, 0.0)
        self._rows = mx.concatenate([self._rows, built])
        mx.eval(self._rows)
        for t in new:
            self._row_slot[t] = len(self._row_slot)
        return True

    def _row_logits(self, c: ScriptedCache, tokens: list[int]) -> list[int]:
        """Row ``c`` fed ``tokens``: the token favoured at each position (-1: noise), from which
        the call builds that row's logits (subclasses of tests hook here)."""
        start = c.offset
        first_call = c.calls == 0
        c.calls += 1
        c.fed.extend(tokens)
        c.offset += len(tokens)
        if c.prompt_len is None:
            # The prompt ends with the chat template's assistant header; raw prompts (no
            # template) are taken whole from the first call.
            if self._marker and c.fed[-len(self._marker):] == self._marker:
                c.prompt_len = c.offset
            elif first_call and self._marker_head not in c.fed:
                c.prompt_len = c.offset
        targets = []
        for i in range(len(tokens)):
            pos = start + i + 1  # tokens seen once this position is consumed
            if c.prompt_len is None or pos < c.prompt_len:
                targets.append(-1)
                continue
            generated = pos - c.prompt_len
            if self.script.fail_at is not None and generated >= self.script.fail_at:
                raise RuntimeError(f"scripted failure after {generated} tokens")
            ids = self._script_ids(c)
            targets.append(ids[generated] if generated < len(ids) else self._eos)
        return targets


def scripted_loaded_model(tokenizer: Tokenizer, script: Script | str, *,
                          context_length: int = 8192) -> LoadedModel:
    """A :class:`LoadedModel` whose model follows ``script``."""
    if isinstance(script, str):
        script = Script(script)
    model = ScriptedModel(tokenizer, script)
    info = ModelInfo(id="scripted", path="<scripted>", source="scripted",
                     context_length=context_length, weights="none", weight_bytes=0, device="cpu",
                     load_seconds=0.0)
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)  # type: ignore[arg-type]


class RandomModel:
    """Seeded random logits over a real tokenizer: a property-test stand-in for a model.

    Tokens that close or delimit JSON (quotes, brackets, commas, digits, literals) get a bonus,
    so that masked generation finishes in a reasonable number of steps; everything else is noise.
    """

    def __init__(self, tokenizer: Tokenizer, seed: int, *, bonus: float = 4.0,
                 row_noise: bool = False) -> None:
        self.tokenizer = tokenizer
        self.row_noise = row_noise
        self.vocab_size = tokenizer.vocab_size
        self.args = SimpleNamespace(vocab_size=self.vocab_size)
        self._rng = np.random.default_rng(seed)
        # Decoding every token costs ~0.3 s at 49k: once per tokenizer and bonus, not per model
        # (the tests make a random model per seed).
        self._favoured = tokenizer.derived.part(("random_model_bonus", bonus), "random_model_bonus",
                                                lambda: _json_bonus(tokenizer, self.vocab_size, bonus))
        self.cache_ops = ScriptedCacheOps()
        self.fixed_cost_positions = 8.0

    def make_cache(self) -> list[ScriptedCache]:
        """A position-tracking cache."""
        return [ScriptedCache()]

    def eval(self) -> RandomModel:
        """nn.Module compatibility."""
        return self

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        b, n = inputs.shape
        if self.row_noise and n > 1:
            # One draw a row, the same at every position: the generator reads one position a
            # row (decoding/forward.py ``logits_at``), and drawing noise for every prompt
            # position cost ~1.5 s of CPU for a 300-token prompt at a 150k vocabulary.
            row = self._rng.standard_normal((b, 1, self.vocab_size)).astype(np.float32) * 2.0
            return mx.broadcast_to(mx.array(row + self._favoured), (b, n, self.vocab_size))
        noise = self._rng.standard_normal((b, n, self.vocab_size)).astype(np.float32) * 2.0
        return mx.array(noise + self._favoured)


def _json_bonus(tokenizer: Tokenizer, vocab_size: int, bonus: float) -> np.ndarray:
    favoured = np.zeros(vocab_size, dtype=np.float32)
    for i in range(vocab_size):
        piece = tokenizer.decode([i]).strip()
        if (0 < len(piece) <= 2 and all(ch in '"{}[],:0123456789.-' for ch in piece)) \
                or piece in ("true", "false", "null"):
            favoured[i] = bonus
    favoured.setflags(write=False)  # shared by every random model of this tokenizer
    return favoured


def random_loaded_model(tokenizer: Tokenizer, seed: int, *, row_noise: bool = False) -> LoadedModel:
    """A :class:`LoadedModel` with seeded random logits.

    ``row_noise`` draws one noise vector a row per forward pass instead of one a position
    (cheap prefill of long prompts over large vocabularies; a different random stream, so
    tests pinned to a seed's outputs keep the default)."""
    info = ModelInfo(id="random", path="<random>", source="random", context_length=8192,
                     weights="none", weight_bytes=0, device="cpu", load_seconds=0.0)
    return LoadedModel(model=RandomModel(tokenizer, seed, row_noise=row_noise), tokenizer=tokenizer,
                       info=info)  # type: ignore[arg-type]


# ``afm-struct serve --model scripted[:TOKENS_PER_S]``: the scripted model over HTTP, so cluster and
# load tests measure the serving layers (HTTP, scheduler, balancer) without a real model's cost.
# It says numbers counting up, so a client can check that a stream arrived whole and in order
# (its content is a prefix of this text, cut by max_tokens).
SERVED_SCRIPT = " ".join(str(i) for i in range(1, 2001))


def served_scripted_model(tokens_per_s: float, *, tokenizer: Tokenizer | None = None) -> LoadedModel:
    """The scripted model as ``serve`` runs it: the embedded tokenizer (a byte-level one when
    the embedded package is not installed: :mod:`afm_struct.models.byte_tokenizer`),
    :data:`SERVED_SCRIPT`, and one forward pass (a batch step: one token for every running
    sequence) costing ``1 / tokens_per_s`` seconds of device time, spent asynchronously like a
    real pass."""
    from .models.byte_tokenizer import scripted_tokenizer

    return scripted_loaded_model(tokenizer or scripted_tokenizer(),
                                 Script(SERVED_SCRIPT, forward_s=1.0 / tokens_per_s))
