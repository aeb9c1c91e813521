#!/usr/bin/env bash
# Build the runtime image (deploy/Dockerfile) with podman, from a Debian base
# made here: these machines have no Docker Hub, but Debian's mirror and the
# package registries are reachable.
#
#  1. apt-get install podman runc debootstrap (when missing). podman runs with
#     --runtime runc: the default crun fails here on setrlimit.
#  2. Once: debootstrap --variant=minbase bookworm with python3 and python3-venv,
#     plus this machine's CA bundle and an /etc/pip.conf that points pip at it
#     (without them pip fails inside the build with CERTIFICATE_VERIFY_FAILED),
#     imported as $BASE_IMAGE. Skipped when that image exists.
#  3. podman build --build-arg BASE=$BASE_IMAGE (the Dockerfile's default BASE
#     stays the public python image for real users), with OCI labels.
#  4. Prints the image size and checks the image: `svit-cluster --version` runs
#     as uid 10001 with a read-only root filesystem, and the host-agent probe
#     command answers (exit 1: no heartbeat yet).
#
# Prints the time of each stage. .ci/run runs it beside the main test suite (at
# nice 19 and the idle I/O class), then the container check
# (tests/deploy/test_chart_containers.py).
# Environment: IMAGE (localhost/svit-cluster:ci), BASE_IMAGE
# (localhost/debian:bookworm-min), DEBIAN_MIRROR, NICE (19), NPROC_LIMIT (32768).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${IMAGE:-localhost/svit-cluster:ci}"
BASE_IMAGE="${BASE_IMAGE:-localhost/debian:bookworm-min}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
NICE="${NICE:-19}"
PODMAN=(nice -n "$NICE" podman --runtime runc)
# podman asks for RLIMIT_NOFILE 1048576 and a large RLIMIT_NPROC by default;
# runc may not raise limits above what it inherits here ("error setting rlimit
# type 7/6: operation not permitted"), so containers get explicit limits.
nofile="$(ulimit -Hn)"
((nofile > 1048576)) && nofile=1048576
ULIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=${NPROC_LIMIT:-32768}:${NPROC_LIMIT:-32768}")

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'image.sh: FAIL: %s\n' "$*" >&2; exit 1; }
stage_start=0
begin() { say "$*"; stage_start=$(date +%s); }
end() { printf '    (%ss)\n' "$(( $(date +%s) - stage_start ))"; }
total_start=$(date +%s)

begin "tools: podman, runc, debootstrap"
missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    command -v apt-get >/dev/null 2>&1 || die "need ${missing[*]} and apt-get is not available"
    SUDO=""; [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
    echo "    apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
podman --version
end

begin "base image $BASE_IMAGE"
if podman image exists "$BASE_IMAGE"; then
    echo "    exists; reused"
else
    rootfs="$(mktemp -d /var/tmp/svit-debian.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    nice -n "$NICE" debootstrap --variant=minbase --include=python3,python3-venv \
        bookworm "$rootfs" "$DEBIAN_MIRROR" >/dev/null
    # pip inside the build trusts only what the base trusts: give it this
    # machine's CA bundle.
    mkdir -p "$rootfs/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | "${PODMAN[@]}" import - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
fi
end

begin "podman build $IMAGE (BASE=$BASE_IMAGE)"
revision="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n1)"
# --format docker keeps the HEALTHCHECK (the OCI format has none).
"${PODMAN[@]}" build --layers --format docker -f "$ROOT/deploy/Dockerfile" \
    --build-arg BASE="$BASE_IMAGE" \
    --build-arg REVISION="$revision" \
    --build-arg VERSION="$version" \
    --build-arg SOURCE="$(git -C "$ROOT" remote get-url origin 2>/dev/null || echo unknown)" \
    -t "$IMAGE" "$ROOT"
end

begin "image checks"
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
printf '    size: %s bytes (%s MiB)\n' "$size" "$((size / 1024 / 1024))"
labels=$(podman image inspect --format '{{json .Labels}}' "$IMAGE")
grep -q "\"org.opencontainers.image.revision\":\"$revision\"" <<<"$labels" \
    || die "revision label missing: $labels"
run=("${PODMAN[@]}" run --rm "${ULIMITS[@]}" --read-only --tmpfs /tmp --network none "$IMAGE")
out="$("${run[@]}" svit-cluster --version)" || die "svit-cluster --version failed"
echo "    $out"
uid="$("${run[@]}" id -u)"
[[ "$uid" == "10001" ]] || die "image runs as uid $uid, want 10001"
echo "    runs as uid $uid with a read-only root filesystem"
"${run[@]}" python3 -c 'import svit_chaos, svit_cluster.cluster, ray; print("    imports ok, ray", ray.__version__)' \
    || die "imports failed"
set +e
"${run[@]}" svit-cluster healthcheck --heartbeat /tmp/none.json >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 1 ]] || die "host-agent probe command exited $rc, want 1 (no heartbeat)"
echo "    host-agent probe command answers (exit 1 without a heartbeat)"
end

printf '\nimage.sh: OK: %s, %s MiB, %ss in total\n' "$IMAGE" "$((size / 1024 / 1024))" \
    "$(( $(date +%s) - total_start ))"
