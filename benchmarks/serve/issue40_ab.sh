#!/bin/bash
# One issue-40 load run against a fresh server built from TREE (a checkout or `git archive`
# of any commit), through HTTP on an ephemeral port; the server is stopped afterwards.
#   usage: issue40_ab.sh TREE OUT.json [bench serve args, e.g. --mixes "free;json_schema"]
#   env:   PY (python with the deps; default: the venv beside this script's checkout),
#          CONC (32), REQS (64), PROFILE=OUT.raw (py-spy record of the server after a warm-up,
#          PYSPY (py-spy), PYSPY_OPTS (--idle; --gil: only samples holding the GIL))
# Prints the bench table's rows and client_cpu_s: the bench client's own CPU seconds
# (getrusage of its process), since client and server share the machine's cores.
set -u
TREE=$1; OUT=$2; shift 2
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$HERE/.venv/bin/python}
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cd "$TREE" || exit 1
PYTHONPATH=$TREE "$PY" -m afm_struct.cli serve --host 127.0.0.1 --port "$PORT" --model scripted:200 \
  --max-active 64 > "$OUT.server.log" 2>&1 &
SPID=$!
for _ in $(seq 1 100); do curl -s "http://127.0.0.1:$PORT/v1/models" > /dev/null && break; sleep 0.3; done
if [ -n "${PROFILE:-}" ]; then
  PYTHONPATH=$TREE "$PY" -m afm_struct.cli bench serve --url "http://127.0.0.1:$PORT" --concurrency 32 \
    --max-tokens 200 --mix free --requests 32 --client light --out "$OUT.warm.json" > /dev/null 2>&1
  ${PYSPY:-py-spy} record ${PYSPY_OPTS:---idle} --threads -r 200 -f raw -o "$PROFILE" --pid "$SPID" \
    --nonblocking > "$PROFILE.log" 2>&1 &
  PSP=$!
  sleep 1
fi
"$PY" -c 'import resource, subprocess, sys
subprocess.call(sys.argv[1:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("client_cpu_s", round(u.ru_utime + u.ru_stime, 2))' \
  env PYTHONPATH="$TREE" "$PY" -m afm_struct.cli bench serve --url "http://127.0.0.1:$PORT" \
  --concurrency "${CONC:-32}" --max-tokens 200 --requests "${REQS:-64}" --client light --out "$OUT" "$@" 2>&1 \
  | grep -E '^\| (free|json_schema) \| [0-9]|client_cpu_s' | sort -u
if [ -n "${PROFILE:-}" ]; then kill -INT "$PSP"; wait "$PSP"; fi
kill "$SPID"; wait "$SPID" 2> /dev/null
