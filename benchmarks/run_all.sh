#!/usr/bin/env bash
# Re-run every speed benchmark behind docs/benchmarks.md on a quiet machine (~15 min on 2 cores).
# Usage: bash benchmarks/run_all.sh        (from the repository root, after `make setup`)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
AFM=.venv/bin/afm-struct
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1
BLAS=$($PY -m afm_struct.models.blas)

echo "== engine: afm-struct generator vs mlx_lm.stream_generate (issue 2)"
LD_PRELOAD=$BLAS $PY benchmarks/engine/speed.py --runs 5 --out benchmarks/engine/openblas_fp32.json
LD_PRELOAD=$BLAS $PY benchmarks/engine/speed.py --runs 5 --weights quantized --out benchmarks/engine/openblas_q4.json
AFM_STRUCT_BLAS=none $PY benchmarks/engine/speed.py --runs 5 --max-tokens 64 --out benchmarks/engine/reference_fp32.json

echo "== decode: free vs constrained vs fast-forward (issue 4)"
$AFM bench decode --repeats 2 --out benchmarks/decode/decode.json
$AFM bench decode --repeats 1 --no-overlap --out benchmarks/decode/decode_no_overlap.json
$AFM bench decode --repeats 1 --engines llguidance,outlines --out benchmarks/decode/decode_engines.json

echo "== serve: load against a live server (issues 7, 8)"
$AFM serve --port 9990 --max-active 8 --max-queue 16 > /tmp/afm-bench-serve.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sf http://127.0.0.1:9990/health >/dev/null && break; sleep 1; done
$AFM bench serve --url http://127.0.0.1:9990 --concurrency 1,2,4,8 --requests 48 --mix json_schema \
  --max-tokens 48 --out benchmarks/serve/constrained_scaling.json || true
$AFM bench serve --url http://127.0.0.1:9990 --concurrency 1,8 --rounds 3 --requests 48 \
  --mix json_schema --max-tokens 48 --out benchmarks/serve/constrained_rounds.json || true
$AFM bench serve --url http://127.0.0.1:9990 --concurrency 1,2,4,8 --mix free,json_schema,tool \
  --max-tokens 48 --cancel-every 7 --out benchmarks/serve/mixed.json || true
$AFM bench serve --url http://127.0.0.1:9990 --concurrency 50 --requests 50 --mix free,json_schema,tool \
  --max-tokens 32 --out benchmarks/serve/burst50.json || true
kill $SERVER; trap - EXIT

echo "== report"
$AFM bench report benchmarks/masks/*.json benchmarks/decode/decode.json benchmarks/extract/*.json \
  benchmarks/serve/constrained_scaling.json --out docs/report
