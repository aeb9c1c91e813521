#!/usr/bin/env bash
# What .ci/run runs beside the main test suite, one after another, at the
# lowest CPU share this machine offers: the image build
# (.ci/image.sh), then the container check (pytest -m container
# tests/deploy, which needs the image), then every benchmark --quick
# (.ci/benchmarks.sh). Each stage's log is printed as it ends, with its time;
# its exit code goes to .ci-artifacts/side-<stage>.rc for .ci/run to act on.
# A failed image build skips the container check (its rc file then says 1).
#
# The share: with the kernel's autogroup scheduling on (sched_autogroup_enabled; on here), nice
# only orders a process against others of its session, and every Ray node,
# container and benchmark cluster starts a session of its own; so this script
# moves itself (and so everything it starts) into a cgroup v1 `cpu` group with
# cpu.shares 2 (the main suite's processes share 1024 per session) when
# /sys/fs/cgroup/cpu is writable, and points podman's container cgroups there
# (PODMAN_CGROUP_PARENT, read by .ci/chart-containers.py). Without it, it says
# so and runs at the nice and I/O class it was started with.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .ci-artifacts
CPU_CGROUP=/sys/fs/cgroup/cpu
side_group="svit-ci-side-$$"
if mkdir "$CPU_CGROUP/$side_group" 2>/dev/null \
    && echo 2 > "$CPU_CGROUP/$side_group/cpu.shares" \
    && echo $$ > "$CPU_CGROUP/$side_group/cgroup.procs"; then
  export PODMAN_CGROUP_PARENT="/$side_group"
  echo "[side] in cpu cgroup $CPU_CGROUP/$side_group (cpu.shares 2)"
  # shellcheck disable=SC2064  # the group's path is fixed now
  # at exit: back to the root group, then remove the group and the groups podman
  # made in it (conmon's), deepest first; a group still holding a process stays
  trap "echo \$\$ > $CPU_CGROUP/cgroup.procs 2>/dev/null; find $CPU_CGROUP/$side_group -depth -type d -exec rmdir {} + 2>/dev/null" EXIT
else
  rmdir "$CPU_CGROUP/$side_group" 2>/dev/null
  echo "[side] no writable cgroup v1 cpu controller at $CPU_CGROUP: running at nice $(nice) only"
fi
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
