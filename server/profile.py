"""``X-AFM-Profile``: per-request performance profiles (``true``) and time series (``extended``).

The summary is built from the generator's :class:`Finished` (tokens, timings) plus what the
platform exposes: memory from MLX and the process, the chip name, CPU package power through
Linux RAPL when readable.  What a platform does not expose is ``null`` with a reason under
``unavailable`` — never a made-up number.  The extended series comes from a sampler thread that
wakes every ``interval_s`` (<= 250 ms) while the request generates.
"""

from __future__ import annotations

import functools
import platform
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from afm_struct.turn.outputs import Finished

if TYPE_CHECKING:  # the loader imports MLX; the profile only reads a loaded model's fields
    from afm_struct.models.loader import LoadedModel

PROFILE_TRUE = "afm_profile"
PROFILE_EXTENDED = "afm_profile_extended"
_RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")


def parse_profile_header(value: str | None) -> str | None:
    """The profile event key asked for by ``X-AFM-Profile`` (None when absent or off)."""
    v = (value or "").strip().lower()
    if v in ("true", "1", "yes", "on"):
        return PROFILE_TRUE
    if v == "extended":
        return PROFILE_EXTENDED
    return None


@functools.cache
def chip_name() -> str | None:
    """The CPU / SoC name ('Apple M3 Max', 'AMD EPYC', ...), or None."""
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=2, check=False)
            return out.stdout.strip() or None
        except OSError:
            return None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def rss_bytes() -> int | None:
    """Current resident set size of this process."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize()
    except (OSError, IndexError, ValueError):
        return None


def rss_peak_bytes() -> int:
    """Peak resident set size (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def mlx_memory() -> tuple[int | None, int | None]:
    """(active, peak) bytes allocated by MLX in this process."""
    # Imported here: the server otherwise stays free of MLX (only the engine owns it).
    try:
        import mlx.core as mx

        return int(mx.get_active_memory()), int(mx.get_peak_memory())
    except Exception:  # an MLX build without the memory API
        return None, None


def read_energy_uj() -> int | None:
    """CPU package energy counter (Linux RAPL), when readable."""
    try:
        return int(_RAPL.read_text())
    except (OSError, ValueError):
        return None


def kv_bytes_estimate(loaded: LoadedModel, tokens: int) -> int | None:
    """KV cache size for ``tokens`` positions from the model's shape (None if unknown)."""
    args = getattr(loaded.model, "args", None)
    layers = getattr(args, "num_hidden_layers", None)
    heads = getattr(args, "num_attention_heads", None)
    kv_heads = getattr(args, "num_key_value_heads", None) or heads
    head_dim = getattr(args, "head_dim", None)
    if head_dim is None and heads:
        hidden = getattr(args, "hidden_size", None)
        head_dim = hidden // heads if hidden else None
    if not (layers and kv_heads and head_dim):
        return None
    item = 4 if loaded.info.weights in ("float32", "as-stored") else 2
    return 2 * layers * kv_heads * head_dim * tokens * item


class TokenCounter:
    """A logits processor that only records how many tokens its sequence has generated.

    The generator calls processors on its own thread with the tokens so far; reading ``count``
    from the sampler thread is a benign race on an int.
    """

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, tokens: Sequence[int], logits: Any) -> Any:
        self.count = len(tokens)
        return logits


class ProfileSampler:
    """Samples memory and progress every ``interval_s`` on a daemon thread while generating."""

    def __init__(self, counter: TokenCounter, interval_s: float = 0.1) -> None:
        self.counter = counter
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="afm-profile", daemon=True)

    def start(self) -> ProfileSampler:
        """Begin sampling (t = 0 is now)."""
        self._t0 = time.perf_counter()
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        """Stop, take a last sample, and return the series."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=2)
            self._sample()
        return self.samples

    def _run(self) -> None:
        # Sleep to absolute deadlines so a late wake-up (a loaded machine) does not push every
        # later sample back; if one is missed entirely, sample at once and resume the grid.
        deadline = time.perf_counter()
        while True:
            deadline += self.interval_s
            now = time.perf_counter()
            if deadline < now:
                deadline = now
            if self._stop.wait(deadline - now):
                return
            self._sample()

    def _sample(self) -> None:
        t = time.perf_counter() - self._t0
        tokens = self.counter.count
        prev = self.samples[-1] if self.samples else None
        rate = None
        if prev is not None and t > prev["t_s"]:
            rate = round((tokens - prev["tokens"]) / (t - prev["t_s"]), 3)
        active, _ = mlx_memory()
        self.samples.append({"t_s": round(t, 4), "rss_bytes": rss_bytes(), "mlx_active_bytes": active,
                             "tokens": tokens, "tok_s": rate})


def _round(x: float | None, n: int = 3) -> float | None:
    return None if x is None else round(x, n)


def build_profile(loaded: LoadedModel, finished: Finished, *, request_id: str, wall_s: float,
                  blas: str | None = None, energy_uj: tuple[int | None, int | None] = (None, None),
                  ) -> dict[str, Any]:
    """The ``afm_profile`` object for one finished request (null + reason where unavailable)."""
    usage, timings = finished.usage, finished.timings
    prefill_tps, decode_tps = timings.rates(usage)
    active, peak = mlx_memory()
    kv = kv_bytes_estimate(loaded, usage.total_tokens)
    unavailable: dict[str, str] = {}

    power_w = None
    e0, e1 = energy_uj
    if e0 is not None and e1 is not None and wall_s > 0 and e1 >= e0:
        power_w = round((e1 - e0) / 1e6 / wall_s, 3)
    elif sys.platform == "darwin":
        unavailable["power_w"] = "GPU power needs powermetrics (root), which the server does not run"
    else:
        unavailable["power_w"] = (f"no readable power counter on {sys.platform} "
                                  f"({loaded.info.device}; RAPL not exposed)")
    if kv is None:
        unavailable["kv_cache_bytes"] = "the model does not expose its attention shape"

    bandwidth = None
    weights = loaded.info.weight_bytes
    if decode_tps and weights:
        # Each decode step streams every weight once plus the KV cache: a lower bound on
        # the memory traffic the chip sustained.
        bandwidth = round((weights + (kv or 0) / 2) * decode_tps / 1e9, 3)
    else:
        unavailable["estimated_bandwidth_gbps"] = (
            "no weight bytes (scripted model)" if not weights else "no decode steps were timed")
    if peak is None:
        unavailable["memory.mlx_peak_bytes"] = "this MLX build has no memory API"

    return {
        "request_id": request_id,
        "model": loaded.info.id,
        "chip": chip_name(),
        "device": loaded.info.device,
        "blas": blas,
        "memory": {"weights_bytes": weights, "kv_cache_bytes": kv, "mlx_active_bytes": active,
                   "mlx_peak_bytes": peak, "rss_bytes": rss_bytes(), "rss_peak_bytes": rss_peak_bytes()},
        "tokens": {"prompt": usage.prompt_tokens, "completion": usage.completion_tokens,
                   "forced": usage.forced_tokens},
        "timing": {"queued_s": _round(timings.queued_s, 4), "prefill_s": _round(timings.prefill_s, 4),
                   "decode_s": _round(timings.decode_s, 4),
                   "time_to_first_token_s": _round(timings.first_token_s, 4),
                   "mask_s": _round(timings.mask_s, 4), "wall_s": _round(wall_s, 4)},
        "prefill_tok_s": _round(prefill_tps, 2),
        "decode_tok_s": _round(decode_tps, 2),
        "power_w": power_w,
        "estimated_bandwidth_gbps": bandwidth,
        "unavailable": unavailable,
    }


def build_extended(summary: dict[str, Any], samples: list[dict[str, Any]],
                   interval_s: float) -> dict[str, Any]:
    """The ``afm_profile_extended`` object: the summary plus the sampled time series."""
    return {"summary": {**summary, "sample_interval_s": interval_s, "sample_count": len(samples)},
            "samples": samples}
