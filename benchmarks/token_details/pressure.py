"""Constraint pressure's device cost per step: the stacked form (2R rows, two log-sum-exps)
against the per-row form afm_struct/decoding/constraint_pressure.py uses, alternated in one
process (numbers in README.md beside this file).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/token_details/pressure.py
"""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np

from afm_struct.decoding.constraint_pressure import pressure_array
from afm_struct.decoding.logprobs import row_logsumexp

VOCAB = 49152  # SmolLM2's


def stacked(raw: list[mx.array], masked: list[mx.array]) -> mx.array:
    """The first version: one (2R, V) array, two log-sum-exps."""
    lse = row_logsumexp(mx.concatenate([*raw, *masked], axis=0))[:, 0]
    return mx.clip(1.0 - mx.exp(lse[len(raw):] - lse[:len(raw)]), 0.0, 1.0)


def main() -> None:
    rng = np.random.default_rng(0)
    for rows in (1, 8, 32):
        raw = [mx.array(3 * rng.standard_normal((1, VOCAB)).astype(np.float32)) for _ in range(rows)]
        allowed = rng.random((rows, VOCAB)) < 0.01
        masked = [mx.where(mx.array(allowed[i:i + 1]), raw[i], float("-inf")) for i in range(rows)]
        mx.eval(*raw, *masked)
        assert np.allclose(np.array(stacked(raw, masked)), np.array(pressure_array(raw, masked)), atol=1e-5)
        old, new = [], []
        for _ in range(10):
            t0 = time.perf_counter()
            mx.eval(stacked(raw, masked))
            old.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            mx.eval(pressure_array(raw, masked))
            new.append(time.perf_counter() - t0)
        print(f"{rows:2d} rows: stacked {1e3 * np.median(old):7.2f} ms, "
              f"per row {1e3 * np.median(new):7.2f} ms (median of 10)")


if __name__ == "__main__":
    main()
