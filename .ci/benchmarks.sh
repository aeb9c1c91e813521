#!/usr/bin/env bash
# Runs every benchmark under benchmarks/ in --quick mode so none can rot
# (issue 18 item 9). Each must exit 0 and print one JSON document on stdout;
# no timing is asserted (the figures of a shared CI machine mean little).
# Prints the seconds each took. Exit non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
out=${BENCH_OUT:-.ci-artifacts/benchmarks}
mkdir -p "$out"
for path in benchmarks/bench_*.py; do
  name=$(basename "$path" .py)
  start=$(date +%s)
  if ! "$PY" -m "benchmarks.$name" --quick > "$out/$name.json" 2> "$out/$name.err"; then
    echo "[bench] $name FAILED; stderr tail:" >&2
    tail -30 "$out/$name.err" >&2
    exit 1
  fi
  "$PY" -c 'import json,sys; json.loads(open(sys.argv[1]).read())' "$out/$name.json" || {
    echo "[bench] $name did not print one JSON document" >&2; exit 1; }
  echo "[bench] $name --quick: ok in $(( $(date +%s) - start ))s"
done
