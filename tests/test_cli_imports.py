"""The command line imports what its subcommand needs: ``serve`` and the others do not import
the benchmark harness (afm_struct_bench: ~1 s of a replica's start), ``bench`` does."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
from afm_struct.cli import build_parser

serve = build_parser("serve").parse_args(["serve", "--no-cache"])
after_serve = sorted(m for m in sys.modules if m.startswith("afm_struct_bench"))
bench = build_parser("bench").parse_args(["bench", "masks", "--out", "unused.json"])
print(json.dumps({"serve_cache": serve.cache, "after_serve": after_serve, "bench": bench.bench,
                  "after_bench": any(m.startswith("afm_struct_bench.") for m in sys.modules),
                  "default_cache": build_parser().parse_args(["serve"]).cache}))
"""


def test_serve_does_not_import_the_bench_harness_and_bench_does() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"serve_cache": False, "after_serve": [], "bench": "masks", "after_bench": True,
                    "default_cache": True}
