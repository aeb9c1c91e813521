#!/usr/bin/env bash
# What .ci/run runs beside the main test suite, one after another, at the
# priority it is started with (nice 19, idle I/O class): the image build
# (.ci/image.sh), then the container check (pytest -m container
# tests/deploy, which needs the image), then every benchmark --quick
# (.ci/benchmarks.sh). Each stage's log is printed as it ends, with its time;
# its exit code goes to .ci-artifacts/side-<stage>.rc for .ci/run to act on.
# A failed image build skips the container check (its rc file then says 1).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .ci-artifacts
rm -f .ci-artifacts/side-*.rc
step() {
  local name=$1; shift
  local start rc
  start=$(date +%s)
  echo "==> [side] $name"
  "$@" > ".ci-artifacts/$name.log" 2>&1
  rc=$?
  cat ".ci-artifacts/$name.log"
  echo "$rc" > ".ci-artifacts/side-$name.rc"
  echo "[side] $name: exit $rc in $(( $(date +%s) - start ))s"
  return "$rc"
}
if step image bash .ci/image.sh; then
  step container .venv/bin/python -m pytest -s -m container tests/deploy -p no:cacheprovider
fi
step benchmarks bash .ci/benchmarks.sh
exit 0
