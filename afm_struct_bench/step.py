"""``afm-struct bench step``: the grammar's share of a decode step, per vocabulary and batch size.

On a fast GPU a small model's step takes a few milliseconds, and the mask work (filling a
bitmask row per sequence, applying it to the logits) is what grows with the vocabulary and the
batch.  This benchmark isolates it: the forward pass is a fixed, configurable wait on another
thread (as a device computes while the CPU fills masks), the logits a fixed random (B, V)
array, and each row walks a valid instance of a JSONSchemaBench schema token by token through
the real :class:`~afm_struct.decoding.next_mask.MaskFiller` (a row that ends starts the next
schema of the pool).  Per step, every mode does what the generator does:

* ``free``: wait for the pass, sample every row as the generator does
  (:func:`~afm_struct.decoding.step_sampling.sample_rows`, rows without a grammar);
* ``rows``: launch the pass, fill the masks one row after the other, wait, apply the bitmask
  the way it was applied before issue 31 (a boolean (B, V) array and ``where``), take the
  argmax, advance the matchers: the step before issue 31;
* ``batch``: the generator's step: the masks filled together in one llguidance call while the
  pass runs, then :func:`~afm_struct.decoding.step_sampling.sample_rows` on the group's
  bitmask (rows with the loop breaker the generator gives constrained rows), and the advance.

The samplers are greedy by default (``--temperature`` for seeded sampling, where every masked
row goes through the masking op).

Modes alternate step by step (``--block``), in an order reversed every other block, so load on
the machine falls on all of them alike; each mode walks its own compile of the pool, so that
none finds the grammar states another built (before 2026-12-05 the modes shared one compile
and ran in blocks of 10 steps in a fixed order: "batch", always second, filled 1.5-2x as fast
as "rows", and ~1.0x as fast when it ran first).
Reported per vocabulary and batch size: the step's p50 (ms) and its ratio to the free step,
the mask fill per row and token (µs, p50 of a step's fill / rows), the rows/batch fill ratio,
and the single masks' p50/p99 (µs, row by row).  Wall times on a shared, loaded machine
measure the queue for a core as much as the work, so the CPU times are reported too (all the
process's threads: the fill's, and what follows the pass: apply, sample, advance; and the
calling thread's alone during the fill), with the fill and the step they imply on an idle
host: the fill one by one on one core, together as :func:`idle_batch_fill` says from the
engine's thread count; the step ``max(forward, idle fill) + after-pass CPU``, against
``forward + after-pass CPU`` free.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from .masks import DEFAULT_DIR

if TYPE_CHECKING:
    from afm_struct.models.tokenizer import Tokenizer

FREE_REQUEST = SimpleNamespace(logprobs=None, stops_cut_grammar=False)

MODES = ("free", "rows", "batch")
SERIES = ("step_ms", "fill_us", "mask_us", "fill_cpu_ms", "fill_main_cpu_ms", "post_cpu_ms")


def engine_threads() -> int:
    """The threads of llguidance's executor in this build (before ``mask_threads``: llguidance's
    default, 80 % of the CPUs, at least one)."""
    from afm_struct.grammar.engines import llguidance_engine as llguidance_backend

    threads = getattr(llguidance_backend, "mask_threads", None)
    return threads() if threads is not None else max(1, (os.cpu_count() or 1) * 4 // 5)


def idle_batch_fill(cpu_ms: float, main_ms: float, threads: int, chunked: bool) -> float:
    """The batch fill's time on an idle host, from its CPU times (all threads; the calling
    thread's alone): with one engine thread, everything one after the other; with more, the
    engine's part spread over the cores (at most 2 here), then the calling thread's part
    (``chunked``: overlapping the engine's, so at best the larger of it and all the CPU spread
    over the cores).  A lower bound where the overlap is imperfect."""
    cores = min(2, threads + 1, os.cpu_count() or 1)
    if threads <= 1:
        return cpu_ms
    if chunked:
        return max(main_ms, cpu_ms / cores)
    return (cpu_ms - main_ms) / min(cores, threads) + main_ms


def where_apply(logits: Any, bitmask: np.ndarray) -> Any:
    """The bitmask application before issue 31 (the ``rows`` baseline): unpacked on the host
    into a boolean (B, V) array, uploaded, and selected with ``where``."""
    import mlx.core as mx

    words = np.ascontiguousarray(np.asarray(bitmask, dtype=np.int32))
    unpacked = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").astype(bool)
    vocab = logits.shape[-1]
    if unpacked.shape[-1] < vocab:
        unpacked = np.pad(unpacked, ((0, 0), (0, vocab - unpacked.shape[-1])))
    allowed = mx.array(unpacked[:, :vocab])
    return mx.where(allowed, logits, mx.array(float("-inf"), dtype=logits.dtype))


def schema_pool(tokenizer: Tokenizer, folder: Path, size: int,
                timeout_s: float) -> list[tuple[Any, list[int]]]:
    """Up to ``size`` (compiled constraint, token ids of a valid instance) pairs, spread over
    the folder's files; only schemas served enforced."""
    from afm_struct.grammar.compiler import ConstraintCompiler
    from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Mode

    files = sorted(folder.glob("*.json"))
    step = max(1, len(files) // (size * 2))
    compiler = ConstraintCompiler(tokenizer, CompileOptions(timeout_s=timeout_s, cache_size=size * 2 + 1))
    pool: list[tuple[Any, list[int]]] = []
    try:
        for path in files[::step]:
            if len(pool) >= size:
                break
            doc = json.loads(path.read_text())
            valid = [t for t in doc.get("tests", []) if t.get("valid")]
            if not valid:
                continue
            try:
                constraint = compiler.compile(JsonSchemaRequest(doc["schema"]))
            except Exception:
                continue
            if constraint.mode is not Mode.ENFORCED:
                continue
            ids = tokenizer.encode(json.dumps(valid[0]["data"], indent=None, ensure_ascii=False))
            if len(ids) >= 2:
                pool.append((constraint, ids))
    finally:
        compiler.close()
    return pool


class Rows:
    """A batch of rows walking pool instances (each mode has its own, in the same order)."""

    def __init__(self, pool: list[tuple[Any, list[int]]], batch: int, logits: Any,
                 temperature: float) -> None:
        self.pool = pool
        self.next = 0
        self.logits = logits
        self.temperature = temperature
        self.rows = [self._fresh(i) for i in range(batch)]
        self.rejected = 0
        self.bitmask: np.ndarray | None = None

    def _fresh(self, i: int) -> Any:
        from afm_struct.decoding.sampling import SamplingParams, make_loop_breaker, make_sampler

        constraint, ids = self.pool[self.next % len(self.pool)]
        self.next += 1
        # As the generator's rows: (1, V) logits out of the pass's (B, V), a seeded sampler, and
        # the loop breaker constrained rows get.
        return SimpleNamespace(matcher=constraint.new_matcher(), ids=ids, pos=0, closer=None, tokens=[],
                               max_tokens=1 << 30, mask=None, mask_all=True, mask_free=True, mask_tokens=None,
                               timings=SimpleNamespace(mask_s=0.0, first_token_s=0.0), started=0.0,
                               logits=self.logits[i:i + 1], processors=[make_loop_breaker()],
                               sampler=make_sampler(SamplingParams(temperature=self.temperature, seed=i)),
                               request=SimpleNamespace(stops_cut_grammar=False, logprobs=None))

    def advance(self) -> None:
        """Every row consumes its instance's next token (a new schema after the last)."""
        for i, row in enumerate(self.rows):
            token = row.ids[row.pos]
            if not (int(row.mask[0, token >> 5]) >> (token & 31)) & 1 or not row.matcher.advance(token):
                self.rejected += 1  # an enforced grammar rejecting a valid instance: reported
                self.rows[i] = self._fresh(i)
                continue
            row.pos += 1
            row.tokens.append(token)
            if row.pos == len(row.ids):
                self.rows[i] = self._fresh(i)


def free_rows(logits: Any, temperature: float) -> list[Any]:
    """Rows without a grammar over ``logits`` (B, V), as the generator holds them."""
    from afm_struct.decoding.sampling import SamplingParams, make_sampler

    return [SimpleNamespace(matcher=None, logits=logits[i:i + 1], processors=[], tokens=[], started=0.0,
                            sampler=make_sampler(SamplingParams(temperature=temperature, seed=i)),
                            timings=SimpleNamespace(first_token_s=0.0), request=FREE_REQUEST)
            for i in range(logits.shape[0])]


def run_steps(mode: str, rows: Rows, filler: Any, free: list[Any], forward_s: float, steps: int,
              pool: ThreadPoolExecutor, out: dict[str, list[float]]) -> None:
    """``steps`` decode steps of ``mode``; step, fill and single-mask times appended to ``out``."""
    import mlx.core as mx

    from afm_struct.decoding.step_sampling import sample_rows

    filler.together = mode == "batch"
    for _ in range(steps):
        t0 = time.perf_counter()
        forward = pool.submit(time.sleep, forward_s)  # the device computes the pass meanwhile
        if mode != "free":
            before = [r.timings.mask_s for r in rows.rows]
            f0, c0 = time.perf_counter(), time.process_time()  # CPU of every thread (llguidance's too)
            m0 = time.thread_time()  # the calling thread's alone (the rows' own part, hand-offs)
            if hasattr(filler, "fill_rows"):  # into the batch's bitmask, reused (as a group's)
                rows.bitmask = filler.fill_rows(rows.rows, _raise, rows.bitmask)
            else:  # a build before issue 31 (the "before" run): a mask per row, stacked to sample
                for r in rows.rows:
                    filler(r)
            out["fill_us"].append((time.perf_counter() - f0) / len(rows.rows) * 1e6)
            out["fill_cpu_ms"].append((time.process_time() - c0) * 1e3)
            out["fill_main_cpu_ms"].append((time.thread_time() - m0) * 1e3)
            if mode == "rows":
                spent = zip(rows.rows, before, strict=True)
                out["mask_us"].extend((r.timings.mask_s - b) * 1e6 for r, b in spent)
        forward.result()
        p0 = time.process_time()
        if mode == "free":
            sample_rows(free)
        elif mode == "batch":
            sample_rows(rows.rows, bitmask=rows.bitmask)
            rows.advance()
        else:
            if hasattr(filler, "fill_rows"):
                bitmask = rows.bitmask[:len(rows.rows)]  # the step's one bitmask
            else:
                bitmask = np.concatenate([r.mask for r in rows.rows])
            mx.eval(mx.argmax(where_apply(rows.logits, bitmask), axis=-1))
            rows.advance()
        out["post_cpu_ms"].append((time.process_time() - p0) * 1e3)
        out["step_ms"].append((time.perf_counter() - t0) * 1e3)


def _raise(_row: Any, exc: Exception) -> None:
    raise exc


def bench_vocab(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every batch size and mode on one vocabulary."""
    import mlx.core as mx

    from afm_struct.decoding.next_mask import MaskFiller
    from afm_struct.models import load_tokenizer

    from .vocabularies import fetch

    tokenizer = load_tokenizer(str(fetch(name)))
    t0 = time.perf_counter()
    # A pool per mode, each compiled on its own: the matchers of one compiled grammar share its
    # lexer's cache of states, so a mode walking the states another mode walked just before
    # finds them built (measured: the second mode of each block filled ~1.5x faster whichever
    # it was, which made "batch", second, look ~2x faster than "rows" instead of ~1.3x).
    pools = {m: schema_pool(tokenizer, Path(args.schemas), args.pool, args.timeout)
             for m in MODES if m != "free"}
    pool = pools["batch"]
    if not pool:
        raise RuntimeError(f"no enforced schema with a valid instance in {args.schemas} (--schemas)")
    if any(len(p) != len(pool) for p in pools.values()):  # a compile timed out in one of them
        raise RuntimeError("the modes' schema pools differ: run again on a quieter machine, "
                           "or raise --timeout")
    setup_s = time.perf_counter() - t0
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    result: dict[str, Any] = {"vocab": name, "vocab_size": int(tokenizer.vocab_size), "schemas": len(pool),
                              "setup_s": round(setup_s, 1), "batches": {}}
    with ThreadPoolExecutor(1) as threads:
        for batch in args.batch:
            logits = mx.random.normal((batch, int(tokenizer.vocab_size)), key=mx.random.key(batch))
            mx.eval(logits)
            rows = {m: Rows(pools[m], batch, logits, args.temperature) for m in MODES if m != "free"}
            free = free_rows(logits, args.temperature)
            times: dict[str, dict[str, list[float]]] = {m: {k: [] for k in SERIES}
                                                        for m in MODES}
            for m in MODES:  # warm-up, not recorded
                run_steps(m, rows.get(m, rows["batch"]), filler, free, args.forward_ms / 1e3, 3, threads,
                          {k: [] for k in SERIES})
            for block in range(max(1, args.steps // args.block)):
                # The order reversed every other block: what one mode leaves behind (warm
                # caches, the executor's threads still spinning) falls on each mode alike.
                for m in (MODES if block % 2 == 0 else MODES[::-1]):
                    run_steps(m, rows.get(m, rows["batch"]), filler, free, args.forward_ms / 1e3,
                              args.block, threads, times[m])
            med = {m: float(np.median(times[m]["step_ms"])) for m in MODES}
            post = {m: float(np.median(times[m]["post_cpu_ms"])) for m in MODES}
            fill_cpu = {m: float(np.median(times[m]["fill_cpu_ms"])) for m in ("rows", "batch")}
            fill_main = {m: float(np.median(times[m]["fill_main_cpu_ms"])) for m in ("rows", "batch")}
            engine_n, chunked = engine_threads(), batch >= 2 * getattr(filler, "chunk_rows", 1 << 30)
            idle_fill = {"rows": fill_cpu["rows"],
                         "batch": idle_batch_fill(fill_cpu["batch"], fill_main["batch"], engine_n, chunked)}
            fwd = args.forward_ms
            # The step on an idle host, from CPU times: the fill overlaps the device's pass (one
            # core one by one, both cores together), the rest follows it.
            idle = {"free": fwd + post["free"],
                    "rows": max(fwd, fill_cpu["rows"]) + post["rows"],
                    "batch": max(fwd, idle_fill["batch"]) + post["batch"]}
            fill = {m: float(np.median(times[m]["fill_us"])) for m in ("rows", "batch")}
            # The fastest step's fill: the one least queued behind other processes for a core.
            fill_min = {m: float(np.min(times[m]["fill_us"])) for m in ("rows", "batch")}
            masks = np.asarray(times["rows"]["mask_us"])
            result["batches"][str(batch)] = {
                "step_ms_p50": {m: round(v, 3) for m, v in med.items()},
                "ratio_to_free": {m: round(med[m] / med["free"], 3) for m in ("rows", "batch")},
                "fill_us_per_row_p50": {m: round(v, 2) for m, v in fill.items()},
                "fill_rows_over_batch": round(fill["rows"] / fill["batch"], 2),
                "fill_us_per_row_min": {m: round(v, 2) for m, v in fill_min.items()},
                "fill_min_rows_over_batch": round(fill_min["rows"] / fill_min["batch"], 2),
                "fill_cpu_ms_p50": {m: round(v, 3) for m, v in fill_cpu.items()},
                "fill_main_cpu_ms_p50": {m: round(v, 3) for m, v in fill_main.items()},
                "idle_fill_rows_over_batch": round(idle_fill["rows"] / idle_fill["batch"], 2),
                "engine_threads": engine_n, "chunked": chunked,
                "post_cpu_ms_p50": {m: round(v, 3) for m, v in post.items()},
                "idle_step_ms_estimate": {m: round(v, 3) for m, v in idle.items()},
                "idle_ratio_to_free": {m: round(idle[m] / idle["free"], 3) for m in ("rows", "batch")},
                "mask_us": {"p50": round(float(np.percentile(masks, 50)), 1),
                            "p99": round(float(np.percentile(masks, 99)), 1)},
                "rejected_valid_tokens": {m: r.rejected for m, r in rows.items()},
            }
            print(f"{name} batch {batch}: {json.dumps(result['batches'][str(batch)])}", file=sys.stderr)
    return result


def markdown_table(report: dict[str, Any]) -> str:
    """One row per vocabulary and batch size."""
    lines = [f"Forward pass {report['forward_ms']} ms (scripted), temperature "
             f"{report.get('temperature', 0.0)}, {report['steps']} steps per mode; "
             f"load average {report['load_average']}, {report['cpus']} CPUs.", "",
             "| vocabulary | batch | free step (ms) | rows step (ms) / ratio | batch step (ms) / ratio | "
             "fill µs/row p50: rows / batch (x) | fill µs/row min: rows / batch (x) "
             "| mask p50 / p99 (µs) | fill CPU ms: rows / batch (batch's calling thread) "
             "| idle fill estimate rows / batch "
             "| after-pass CPU ms: free / rows / batch | idle estimate ratio: rows / batch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in report["vocabularies"]:
        for batch, r in v["batches"].items():
            s, q, f = r["step_ms_p50"], r["ratio_to_free"], r["fill_us_per_row_p50"]
            lines.append(f"| {v['vocab']} ({v['vocab_size']}) | {batch} | {s['free']:.2f} | "
                         f"{s['rows']:.2f} / "
                         f"{q['rows']:.2f}x | {s['batch']:.2f} / {q['batch']:.2f}x | {f['rows']:.1f} / "
                         f"{f['batch']:.1f} ({r['fill_rows_over_batch']:.2f}x) | "
                         f"{r['fill_us_per_row_min']['rows']:.1f} / {r['fill_us_per_row_min']['batch']:.1f} "
                         f"({r['fill_min_rows_over_batch']:.2f}x) | "
                         f"{r['mask_us']['p50']:.1f} / {r['mask_us']['p99']:.1f} | "
                         f"{r['fill_cpu_ms_p50']['rows']:.2f} / {r['fill_cpu_ms_p50']['batch']:.2f} "
                         f"({r.get('fill_main_cpu_ms_p50', {}).get('batch', float('nan')):.2f}) | "
                         f"{r.get('idle_fill_rows_over_batch', float('nan')):.2f}x | "
                         f"{r['post_cpu_ms_p50']['free']:.2f} / {r['post_cpu_ms_p50']['rows']:.2f} / "
                         f"{r['post_cpu_ms_p50']['batch']:.2f} | {r['idle_ratio_to_free']['rows']:.3f} / "
                         f"{r['idle_ratio_to_free']['batch']:.3f} |")
    return "\n".join(lines)


def plot(reports: list[dict[str, Any]], path: Path) -> None:
    """Step time against batch size, free and constrained (one by one, together), one panel
    per vocabulary: wall p50 (solid) and the idle-host estimate (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocabs = [v for r in reports for v in r["vocabularies"]]
    fig, axes = plt.subplots(1, len(vocabs), figsize=(4.2 * len(vocabs), 3.6), squeeze=False)
    for ax, v in zip(axes[0], vocabs, strict=True):
        sizes = [int(b) for b in v["batches"]]
        for mode, color in (("free", "tab:gray"), ("rows", "tab:red"), ("batch", "tab:blue")):
            wall = [v["batches"][str(b)]["step_ms_p50"][mode] for b in sizes]
            idle = [v["batches"][str(b)]["idle_step_ms_estimate"][mode] for b in sizes]
            ax.plot(sizes, wall, "-o", color=color, label=f"{mode} (wall)")
            ax.plot(sizes, idle, "--", color=color, label=f"{mode} (idle est.)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])
        ax.set_title(f"{v['vocab']} ({v['vocab_size']:,} tokens)")
        ax.set_xlabel("batch size")
        ax.set_ylabel("step (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and write the JSON report (and a markdown table beside it)."""
    from .vocabularies import VOCABULARIES

    names = args.vocab or list(VOCABULARIES)
    report: dict[str, Any] = {
        "command": " ".join(["afm-struct", "bench", "step", *sys.argv[3:]]) if len(sys.argv) > 2 else "",
        "forward_ms": args.forward_ms, "temperature": args.temperature, "steps": args.steps,
        "cpus": os.cpu_count(), "vocabularies": []}
    try:
        for name in names:
            report["vocabularies"].append(bench_vocab(name, args))
    except RuntimeError as exc:  # a vocabulary that cannot be fetched (offline, no npm)
        print(f"afm-struct: error: {exc}", file=sys.stderr)
        return 2
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    table = markdown_table(report)
    out.with_suffix(".md").write_text(f"`{report['command']}`\n\n{table}\n")
    print(table)
    if args.plot:
        plot([report], Path(args.plot))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench step``."""
    from .vocabularies import VOCABULARIES

    parser = sub.add_parser("step", help="the grammar's share of a decode step per vocabulary and batch size")
    parser.add_argument("--vocab", action="append", choices=sorted(VOCABULARIES),
                        help="a vocabulary (repeatable; default all), fetched with npm when not cached")
    parser.add_argument("--batch", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 64],
                        help="batch sizes, comma-separated (default 1,8,32,64)")
    parser.add_argument("--forward-ms", type=float, default=5.0, help="the scripted forward pass (ms)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="the rows' sampling temperature (default 0: greedy; seeded otherwise)")
    parser.add_argument("--steps", type=int, default=60, help="recorded steps per mode and batch size")
    parser.add_argument("--block", type=int, default=1, help="steps per mode before switching modes")
    parser.add_argument("--pool", type=int, default=64, help="schemas the rows walk (enforced, spread)")
    parser.add_argument("--schemas", default=str(DEFAULT_DIR), help="folder of MaskBench JSON files")
    parser.add_argument("--timeout", type=float, default=10.0, help="compile time limit (s)")
    parser.add_argument("--out", required=True, help="where to write the JSON report")
    parser.add_argument("--plot", default=None, help="also draw step time against batch size (PNG)")
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """``python -m afm_struct_bench.step --plot OUT.png REPORT.json ...``: one figure from reports."""
    parser = argparse.ArgumentParser(description="plot bench step reports")
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--plot", required=True)
    args = parser.parse_args(argv)
    plot([json.loads(Path(r).read_text()) for r in args.reports], Path(args.plot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
