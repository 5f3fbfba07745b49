"""The scripted stand-in's own cost per call (issue 40): the served script, no forward time, B rows
of one token each; wall and process CPU per call + eval, and the Python call alone (graph building).

    python benchmarks/serve/standin_cost.py
"""

import time

import mlx.core as mx

from afm_struct.models.loader import load_tokenizer
from afm_struct.testing import SERVED_SCRIPT, Script, ScriptedCacheOps, ScriptedModel


def main() -> None:
    tok = load_tokenizer()
    m = ScriptedModel(tok, Script(SERVED_SCRIPT))
    ops = ScriptedCacheOps()
    prompt = tok.encode_chat([{"role": "user", "content": "hi"}])
    for rows in (1, 8, 32, 64):
        caches = []
        for _ in range(rows):
            c = m.make_cache()
            mx.eval(m(mx.array([prompt]), cache=c))
            caches.append(c)
        batch = ops.batch_of(caches)
        step = mx.zeros((rows, 1), dtype=mx.int32)
        for _ in range(5):
            mx.eval(m(step, cache=batch))
        n = 50
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            mx.eval(m(step, cache=batch)[:, -1, :])
        t1, cpu1 = time.perf_counter(), time.process_time()
        for _ in range(n):
            m(step, cache=batch)[:, -1, :]
        t2 = time.perf_counter()
        print(f"rows={rows}: call+eval {(t1 - t0) / n * 1e6:.0f} us wall, "
              f"{(cpu1 - cpu0) / n * 1e6:.0f} us CPU; "
              f"python call alone {(t2 - t1) / n * 1e6:.0f} us")


if __name__ == "__main__":
    main()
