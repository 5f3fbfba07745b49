"""RaggedKVCache and logits_at: a ragged batch step gives each row what it would get alone."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from afm_struct.decoding.batch_cache import MLXCacheOps, fill_holes
from afm_struct.decoding.forward import logits_at, split_head
from afm_struct.decoding.ragged_cache import RaggedKVCache


def kv(length: int, seed: int, heads: int = 2, dim: int = 4) -> KVCache:
    """A one-row KVCache holding ``length`` positions of seeded values."""
    c = KVCache()
    if length:
        rng = np.random.default_rng(seed)
        k = mx.array(rng.standard_normal((1, heads, length, dim)).astype(np.float32))
        v = mx.array(rng.standard_normal((1, heads, length, dim)).astype(np.float32))
        c.update_and_fetch(k, v)
    return c


def test_mask_lets_each_row_see_only_its_own_positions():
    cache = RaggedKVCache([1, 3])
    mask = np.array(cache.make_mask(2))
    assert mask.shape == (2, 1, 2, 5)
    # row 0: query 0 sees keys 0..1, query 1 sees 0..2; row 1: 0..3 and 0..4
    assert mask[0, 0].tolist() == [[True, True, False, False, False], [True, True, True, False, False]]
    assert mask[1, 0].tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    with pytest.raises(ValueError, match="sliding-window"):
        cache.make_mask(1, window_size=4)


def test_merge_update_extract_keep_each_rows_positions():
    solo = [kv(2, 0), kv(5, 1), kv(0, 2)]
    batch = RaggedKVCache.merge(solo)
    assert batch.lengths == [2, 5, 0] and batch.size() == 5 and not batch.empty()
    new_k = mx.arange(3 * 2 * 1 * 4, dtype=mx.float32).reshape(3, 2, 1, 4)
    keys, _values = batch.update_and_fetch(new_k, new_k + 100)
    assert batch.lengths == [3, 6, 1] and keys.shape[2] == 6
    for row, c in enumerate(solo):
        got = batch.extract(row)
        n = 0 if c.keys is None else c.offset
        assert got.offset == n + 1
        if n:
            assert mx.array_equal(got.keys[:, :, :n], c.keys[:, :, :n])
        assert mx.array_equal(got.keys[0, :, n], new_k[row, :, 0])
        assert mx.array_equal(got.values[0, :, n], new_k[row, :, 0] + 100)


def test_ragged_padding_is_dropped_and_overwritten():
    batch = RaggedKVCache.merge([kv(2, 0), kv(4, 1)])
    batch.prepare(right_padding=[2, 0])  # row 0 feeds 1 real token, row 1 feeds 3
    batch.update_and_fetch(mx.ones((2, 2, 3, 4)), mx.ones((2, 2, 3, 4)))
    batch.finalize()
    assert batch.lengths == [3, 7]
    batch.update_and_fetch(mx.full((2, 2, 1, 4), 7.0), mx.full((2, 2, 1, 4), 7.0))
    row0 = batch.extract(0)
    assert row0.offset == 4
    assert mx.all(row0.keys[0, :, 3] == 7.0).item()  # the padded slot was overwritten


def test_fill_holes_moves_one_row_per_row_that_left():
    assert fill_holes([0, 1, 2]) == [0, 1, 2]
    assert fill_holes([0, 2, 3, 4]) == [0, 4, 2, 3]  # row 4 takes row 1's place
    assert fill_holes([3, 4]) == [3, 4]
    assert fill_holes([1, 3]) == [3, 1]  # row 1 stays, row 3 fills hole 0
    assert sorted(fill_holes([0, 2, 5, 6])) == [0, 2, 5, 6]
    assert fill_holes([]) == []


def test_filter_moves_rows_in_place_and_keeps_their_content():
    rows = [kv(3 + i, 10 + i) for i in range(5)]
    batch = RaggedKVCache.merge(rows)
    keep = fill_holes([0, 2, 4])
    batch.filter(keep)
    assert batch.lengths == [rows[i].offset for i in keep]
    for j, src in enumerate(keep):
        assert mx.array_equal(batch.extract(j).keys, rows[src].keys[:, :, :rows[src].offset])
    # a new row lands in a spare row of the buffer (no rebuild) and the old rows are intact
    buffer_rows = batch.keys.shape[0]
    batch.extend(RaggedKVCache.merge([kv(6, 99)]))
    assert batch.keys.shape[0] == buffer_rows and batch.lengths[-1] == 6
    assert mx.array_equal(batch.extract(3).keys, kv(6, 99).keys[:, :, :6])
    assert mx.array_equal(batch.extract(1).keys, rows[keep[1]].keys[:, :, :rows[keep[1]].offset])


def test_filter_and_extend_reorder_rows():
    batch = RaggedKVCache.merge([kv(2, 0), kv(3, 1), kv(4, 2)])
    batch.filter([2, 0])
    assert batch.lengths == [4, 2]
    other = RaggedKVCache.merge([kv(300, 3)])  # longer than the first block: capacities differ
    batch.extend(other)
    assert batch.lengths == [4, 2, 300]
    assert mx.array_equal(batch.extract(0).keys, kv(4, 2).keys[:, :, :4])
    assert mx.array_equal(batch.extract(2).keys, kv(300, 3).keys[:, :, :300])
    empty = RaggedKVCache([0])
    empty.extend(RaggedKVCache([0, 0]))
    assert empty.lengths == [0, 0, 0] and empty.empty() and empty.nbytes == 0


def test_split_head_only_for_known_body_then_head_models(embedded):
    assert split_head(embedded.model) is not None

    class Other:
        model = object()

    assert split_head(Other()) is None


def test_logits_at_equals_full_forward(embedded):
    model, head = embedded.model, split_head(embedded.model)
    tokens = mx.array([embedded.tokenizer.encode("The quick brown fox jumps")[:5]])
    full = model(tokens, cache=embedded.make_cache())
    for last in ([4], [2]):
        got = logits_at(model, head, tokens, embedded.make_cache(), last)
        assert np.allclose(np.array(got[0]), np.array(full[0, last[0]]), atol=1e-3)


def test_ragged_batch_step_matches_each_sequence_alone(embedded):
    """Rows of different lengths feeding different numbers of tokens get their solo logits."""
    model, head, tok = embedded.model, split_head(embedded.model), embedded.tokenizer
    prompts = [tok.encode("Hello there"), tok.encode("A much longer prompt about JSON objects")]
    feeds = [tok.encode(" friend")[:1], tok.encode(' {"a": 1')[:3]]
    ops = MLXCacheOps()

    solo_logits, seq_caches = [], []
    for p, f in zip(prompts, feeds, strict=True):
        c = embedded.make_cache()
        model(mx.array([p]), cache=c)
        seq_caches.append(c)
        alone = embedded.make_cache()
        model(mx.array([p]), cache=alone)
        solo_logits.append(np.array(model(mx.array([f]), cache=alone)[0, -1]))

    batch = ops.batch_of(seq_caches)
    width = max(len(f) for f in feeds)
    rows = mx.array([f + [0] * (width - len(f)) for f in feeds])
    ops.prepare(batch, [width - len(f) for f in feeds])
    out = logits_at(model, head, rows, batch, [len(f) - 1 for f in feeds])
    ops.finalize(batch)
    for i in range(2):
        assert np.argmax(np.array(out[i])) == np.argmax(solo_logits[i])
        assert np.allclose(np.array(out[i]), solo_logits[i], atol=2e-3)
    assert [layer.lengths for layer in batch[:1]] == [[len(p) + len(f) for p, f in
                                                       zip(prompts, feeds, strict=True)]]
    # a uniform step after the ragged one still matches, and extraction keeps each row's cache
    nxt = [tok.encode(" and")[:1], tok.encode(" and")[:1]]
    out2 = logits_at(model, head, mx.array(nxt), batch)
    for i in range(2):
        alone = ops.extract(batch, i)
        assert alone[0].offset == len(prompts[i]) + len(feeds[i]) + 1
        c = embedded.make_cache()
        model(mx.array([prompts[i] + feeds[i]]), cache=c)
        ref = np.array(model(mx.array([nxt[i]]), cache=c)[0, -1])
        assert np.allclose(np.array(out2[i]), ref, atol=2e-3)


def test_packing_indices():
    from afm_struct.decoding.packed import Packing

    p = Packing.of([1, 3, 2])
    assert (p.rows, p.longest) == (3, 3)
    # padded slot (r, j) -> packed token; padding repeats the row's last token
    assert p.gather.tolist() == [0, 0, 0, 1, 2, 3, 4, 5, 5]
    assert p.scatter.tolist() == [0, 3, 4, 5, 6, 7]
    assert p.last.tolist() == [0, 3, 5]


def test_packed_ragged_step_matches_each_sequence_alone(embedded):
    """A packed pass (rows feeding 1, 4 and 2 tokens) gives each row its solo logits, and the
    cache continues correctly afterwards."""
    from afm_struct.decoding.packed import Packing, enable_packing, packed_logits

    model, head, tok = embedded.model, split_head(embedded.model), embedded.tokenizer
    assert enable_packing(model) and enable_packing(model)  # idempotent
    prompts = [tok.encode("Hello there"), tok.encode("A longer prompt about JSON objects"),
               tok.encode("Third")]
    feeds = [tok.encode(" friend")[:1], tok.encode(' {"a": 12, "b"')[:4], tok.encode(" one two")[:2]]
    ops = MLXCacheOps()
    seq_caches = []
    for p in prompts:
        c = embedded.make_cache()
        model(mx.array([p]), cache=c)
        seq_caches.append(c)
    batch = ops.batch_of(seq_caches)
    sizes = [len(f) for f in feeds]
    packing = Packing.of(sizes)
    ops.prepare_packed(batch, packing, sizes)
    out = packed_logits(model, head, feeds, batch, packing)
    ops.finalize(batch)
    assert batch[0].lengths == [len(p) + n for p, n in zip(prompts, sizes, strict=True)]
    assert batch[0].packing is None
    nxt = [tok.encode(" and")[:1]] * 3
    out2 = logits_at(model, head, mx.array(nxt), batch)
    for i in range(3):
        c = embedded.make_cache()
        model(mx.array([prompts[i]]), cache=c)
        ref = np.array(model(mx.array([feeds[i]]), cache=c)[0, -1])
        assert np.argmax(np.array(out[i])) == np.argmax(ref)
        assert np.allclose(np.array(out[i]), ref, atol=2e-3)
        ref2 = np.array(model(mx.array([nxt[i]]), cache=c)[0, -1])
        assert np.allclose(np.array(out2[i]), ref2, atol=2e-3)


def test_packing_needs_llama_attention():
    from afm_struct.decoding.packed import enable_packing

    class NotLlama:
        model = None

    assert not enable_packing(NotLlama())


def test_reserve_rows_allocates_once_for_the_rows_to_come():
    batch = RaggedKVCache.merge([kv(5, 0)])
    batch.reserve_rows(8)
    assert batch.keys.shape[0] == 8
    for i in range(1, 8):
        batch.extend(RaggedKVCache.merge([kv(3 + i, i)]))
    assert batch.keys.shape[0] == 8 and len(batch.lengths) == 8
    assert mx.array_equal(batch.extract(7).keys, kv(10, 7).keys[:, :, :10])
    assert mx.array_equal(batch.extract(0).keys, kv(5, 0).keys[:, :, :5])
    empty = RaggedKVCache([0])
    empty.reserve_rows(4)  # no buffers yet: the first update allocates 4 rows
    empty.update_and_fetch(mx.ones((1, 2, 1, 4)), mx.ones((1, 2, 1, 4)))
    assert empty.keys.shape[0] == 4 and empty.lengths == [1]


def test_refill_reuses_an_emptied_batch_and_append_adds_a_row():
    batch = RaggedKVCache.merge([kv(7, 0), kv(9, 1)])
    batch.reserve_rows(4)
    buffers = batch.keys
    assert batch.refill([kv(3, 5), kv(0, 6), kv(4, 7)])
    assert batch.keys is buffers and batch.lengths == [3, 0, 4]
    assert mx.array_equal(batch.extract(2).keys, kv(4, 7).keys[:, :, :4])
    batch.append(kv(5, 8))
    assert batch.lengths == [3, 0, 4, 5] and batch.keys.shape[0] == 4
    assert mx.array_equal(batch.extract(3).keys, kv(5, 8).keys[:, :, :5])
    assert not batch.refill([kv(1, 0)] * 5)  # more rows than the buffers hold: untouched
    assert batch.lengths == [3, 0, 4, 5]
    assert not batch.refill([kv(2, 0, heads=4)])  # other shapes: untouched
    assert not RaggedKVCache([0]).refill([kv(2, 0)])  # no buffers to reuse


def test_generator_reuses_the_last_batch_cache(embedded):
    from afm_struct.decoding.generator import GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams

    tok = embedded.tokenizer
    gen = Generator.from_loaded(embedded)

    def wave():
        for name in ("Ada", "Alan", "Grace"):
            prompt = tok.encode_chat([{"role": "user", "content": f"Say hi to {name}."}])
            gen.add(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=3)), lambda e: None)
        while gen.has_work:
            gen.step()

    wave()
    spare = gen.batch.spare
    assert spare is not None
    wave()
    assert gen.batch.spare is spare  # the second wave's batch was built in the same buffers


def test_warm_up_prepares_a_full_batch_cache(embedded, tokenizer):
    from afm_struct.decoding.generator import Generator
    from afm_struct.testing import scripted_loaded_model

    gen = Generator.from_loaded(embedded, max_batch=6)
    gen.warm_up()
    assert gen.batch.spare is not None and gen.batch.spare[0].keys.shape[0] == 6
    scripted = Generator.from_loaded(scripted_loaded_model(tokenizer, "hi"))
    scripted.warm_up()  # scripted caches have no buffers to reuse: nothing to do
    assert scripted.batch.spare is None


def test_extend_copies_only_the_live_rows_of_a_batch_with_reserved_rows():
    """A batch prefilled together is built with room for a full batch; joining a running batch
    copies its live rows only (copying its whole buffer crashed every request of a burst that
    arrived while a lone request was decoding)."""
    running = RaggedKVCache.merge([kv(44, 0)])
    running.reserve_rows(8)
    together = RaggedKVCache.merge([kv(41, 1 + i) for i in range(7)])
    together.reserve_rows(8)
    assert together.keys.shape[0] > 7 and len(together.lengths) == 7  # spare rows in the buffer
    running.extend(together)
    assert running.lengths == [44] + [41] * 7
    for i in range(7):
        assert mx.array_equal(running.extract(1 + i).keys, kv(41, 1 + i).keys[:, :, :41])
    step = mx.ones((8, 2, 1, 4))
    keys, _ = running.update_and_fetch(step, step)
    assert keys.shape == (8, 2, 45, 4) and running.lengths == [45] + [42] * 7


def test_a_step_whose_rows_disagree_with_the_batch_fails_loudly():
    batch = RaggedKVCache.merge([kv(3, 0), kv(4, 1)])
    with pytest.raises(RuntimeError, match="holds 2 rows but the step feeds 1"):
        batch.update_and_fetch(mx.ones((1, 2, 1, 4)), mx.ones((1, 2, 1, 4)))
    assert batch.lengths == [3, 4]
