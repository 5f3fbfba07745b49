"""The scripted stand-in's own cost per call (issue 40): the served script, no forward_s, B rows of
one token each; wall and process CPU per call+eval, and the Python call alone (graph building).

    python benchmarks/serve/standin_cost.py
"""
import sys, time
import mlx.core as mx
from afm_struct.models.loader import load_tokenizer
from afm_struct.testing import SERVED_SCRIPT, Script, ScriptedModel, ScriptedCacheOps
tok = load_tokenizer()
m = ScriptedModel(tok, Script(SERVED_SCRIPT))
ops = ScriptedCacheOps()
for B in (1, 8, 32, 64):
    caches = []
    for _ in range(B):
        c = m.make_cache()
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True))
        mx.eval(m(mx.array([prompt]), cache=c))
        caches.append(c)
    batch = ops.batch_of(caches)
    for _ in range(5):
        mx.eval(m(mx.zeros((B, 1), dtype=mx.int32), cache=batch))
    n = 50
    t0 = time.perf_counter(); cpu0 = time.process_time()
    for _ in range(n):
        out = m(mx.zeros((B, 1), dtype=mx.int32), cache=batch)[:, -1, :]
        mx.eval(out)
    t1 = time.perf_counter(); cpu1 = time.process_time()
    t2 = time.perf_counter()
    for _ in range(n):
        out = m(mx.zeros((B, 1), dtype=mx.int32), cache=batch)[:, -1, :]
    t3 = time.perf_counter()
    print(f"B={B}: call+eval {(t1-t0)/n*1e6:.0f} us wall, {(cpu1-cpu0)/n*1e6:.0f} us CPU; python call alone {(t3-t2)/n*1e6:.0f} us")
