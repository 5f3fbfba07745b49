"""A sampling profile of the server under load (issue 40): no py-spy here, so a thread reads
``sys._current_frames()`` every ``--interval-ms`` and counts, per thread, the functions on the
stack (inclusive) and at its top (self).

    python benchmarks/serve/sample_profile.py --tokens-per-s 200 --max-active 64 \
        --url-file /tmp/url --start-file /tmp/go --stop-file /tmp/stop &
    afm-struct bench serve --url $(cat /tmp/url) ... (a warm-up run)
    touch /tmp/go
    afm-struct bench serve --url $(cat /tmp/url) --concurrency 32 --max-tokens 200 --mix json_schema ...
    touch /tmp/stop

The server runs in this process (``server.live``), on an ephemeral 127.0.0.1 port, and stops
after ``--seconds``.  Sampling costs some CPU of its own: compare shares, not absolute times.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens-per-s", type=float, default=200.0)
    p.add_argument("--max-active", type=int, default=64)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--start-after", type=float, default=5.0, help="seconds before sampling starts")
    p.add_argument("--start-file", default=None, help="sample once this file exists (after a warm-up run)")
    p.add_argument("--stop-file", default=None, help="stop sampling once this file exists (else --seconds)")
    p.add_argument("--interval-ms", type=float, default=2.0)
    p.add_argument("--url-file", required=True)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()

    from afm_struct.testing import served_scripted_model
    from server.live import start_server
    from server.settings import ServerSettings

    live = start_server(served_scripted_model(args.tokens_per_s), ServerSettings(max_active=args.max_active))
    Path(args.url_file).write_text(live.url)
    me = threading.get_ident()
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    own: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    samples: collections.Counter[str] = collections.Counter()
    names = {}
    time.sleep(args.start_after)
    while args.start_file and not Path(args.start_file).exists():
        time.sleep(0.05)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end and not (args.stop_file and Path(args.stop_file).exists()):
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            name = names.get(ident, str(ident))
            samples[name] += 1
            seen = set()
            top = True
            f = frame
            while f is not None:
                code = f.f_code
                key = f"{Path(code.co_filename).name}:{code.co_name}"
                if top:
                    own[name][key] += 1
                    top = False
                if key not in seen:
                    inclusive[name][key] += 1
                    seen.add(key)
                f = f.f_back
        time.sleep(args.interval_ms / 1000)
    live.stop()
    for name, n in samples.most_common():
        if n < 10:
            continue
        print(f"\n== thread {name}: {n} samples")
        print("  inclusive:")
        for key, c in inclusive[name].most_common(args.top):
            print(f"    {100 * c / n:5.1f}%  {key}")
        print("  self:")
        for key, c in own[name].most_common(15):
            print(f"    {100 * c / n:5.1f}%  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
