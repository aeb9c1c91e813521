#!/usr/bin/env bash
# Runs benchmarks under benchmarks/ in --quick mode so none can rot: every one
# (no argument) or those named (e.g. `bash .ci/benchmarks.sh bench_soak`). Each
# must exit 0 and print one JSON document on stdout; no timing is asserted (the
# figures of a shared CI machine mean little). Prints the seconds each took, runs
# every one even after a failure, writes the names of the failed ones to
# $BENCH_OUT/failed.txt (one per line; empty when all passed) and exits 1 if any
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
out=${BENCH_OUT:-.ci-artifacts/benchmarks}
mkdir -p "$out"
if [ "$#" -gt 0 ]; then
  names=("$@")
else
  names=()
  for path in benchmarks/bench_*.py; do names+=("$(basename "$path" .py)"); done
fi
failed=()
for name in "${names[@]}"; do
  start=$(date +%s)
  if ! "$PY" -m "benchmarks.$name" --quick > "$out/$name.json" 2> "$out/$name.err"; then
    echo "[bench] $name FAILED after $(( $(date +%s) - start ))s; stderr tail:" >&2
    tail -30 "$out/$name.err" >&2
    failed+=("$name")
    continue
  fi
  if ! "$PY" -c 'import json,sys; json.loads(open(sys.argv[1]).read())' "$out/$name.json"; then
    echo "[bench] $name did not print one JSON document" >&2
    failed+=("$name")
    continue
  fi
  echo "[bench] $name --quick: ok in $(( $(date +%s) - start ))s"
done
printf '%s\n' "${failed[@]+"${failed[@]}"}" | sed '/^$/d' > "$out/failed.txt"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "[bench] failed: ${failed[*]}" >&2
  exit 1
fi
