#!/bin/sh
# svit-node ROLE: start the Ray side of a pod, then exec the svit process of that role.
#
#   ray-head  Ray head (GCS). No svit process; no CPUs, so no svit actor lands here.
#   host      Ray worker node + `svit-cluster host-agent` (one host = one pod).
#   gateway   Ray node with zero CPUs + `svit-cluster gateway` (so it can call actors).
#   gateway-only  `svit-cluster gateway` without joining Ray.
#
# Installed in the image as /usr/local/bin/svit-node and run under tini
# (ENTRYPOINT ["/usr/bin/tini", "--"]). For "host" and "gateway" the svit process
# replaces this shell and becomes tini's only child. `ray start` daemonizes the
# raylet and its workers; when the svit process exits, the container ends and
# the kernel kills every remaining process in the pod's PID namespace, so a
# dead host agent never leaves a raylet or actor workers behind (they outlive a
# killed raylet by 2-3 s otherwise: docs/architecture.md).
#
# Environment (set by the Helm chart's ConfigMap and pod spec):
#   SVIT_RAY_ADDRESS            host:port of the GCS (workers, gateway)
#   SVIT_NODE_IP                this pod's IP (advertised to Ray)
#   SVIT_RAY_GCS_PORT           GCS port on the head (default 6379)
#   SVIT_RAY_TEMP_DIR           Ray temp dir (default /tmp/ray)
#   SVIT_RAY_WAIT_S             seconds to wait for the GCS port (default 300)
#   SVIT_RAY_OBJECT_STORE_BYTES object store size, 0 = Ray's choice
#   SVIT_RAY_DASHBOARD          "true" to run the dashboard on the head
#   SVIT_RAY_DASHBOARD_PORT     dashboard port (default 8265)
#   SVIT_GATEWAY_PORT           gateway port (default 8080)
#   KUBERAY_GEN_RAY_START_CMD   set by KubeRay; used instead of our own `ray start`
set -eu

role="${1:-}"
[ $# -gt 0 ] && shift

# Ray workers start at this niceness (Ray's default is 15): the host agent and the
# lease keeper it starts (the process that keeps the host's etcd lease alive) stay
# there, and process actors lower their own priority to 15 once warm, so serving
# load cannot starve the lease's keepalives (svit_cluster.cluster WORKER_NICENESS_ENV).
export RAY_worker_niceness="${RAY_worker_niceness:-0}"

temp_dir="${SVIT_RAY_TEMP_DIR:-/tmp/ray}"
gcs_port="${SVIT_RAY_GCS_PORT:-6379}"
wait_s="${SVIT_RAY_WAIT_S:-300}"

log() { printf 'svit-node[%s]: %s\n' "$role" "$*" >&2; }

# Extra `ray start` flags shared by every node we start ourselves.
common_flags() {
    set --  "--temp-dir=$temp_dir" "--disable-usage-stats"
    if [ -n "${SVIT_NODE_IP:-}" ]; then
        set -- "$@" "--node-ip-address=$SVIT_NODE_IP"
    fi
    if [ "${SVIT_RAY_OBJECT_STORE_BYTES:-0}" != "0" ]; then
        set -- "$@" "--object-store-memory=$SVIT_RAY_OBJECT_STORE_BYTES"
    fi
    printf '%s\n' "$@"
}

# Block until host:port accepts TCP connections, at most $wait_s seconds.
wait_for_gcs() {
    log "waiting up to ${wait_s}s for the Ray GCS at $1"
    python3 - "$1" "$wait_s" <<'PY'
import socket, sys, time
host, _, port = sys.argv[1].rpartition(":")
deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        sys.exit(0)
    except OSError as exc:
        if time.monotonic() > deadline:
            print(f"GCS {sys.argv[1]} unreachable: {exc}", file=sys.stderr)
            sys.exit(1)
        time.sleep(1)
PY
}

# Start a non-head Ray node in the background (daemonized) and return.
start_ray_node() {
    if [ -n "${KUBERAY_GEN_RAY_START_CMD:-}" ]; then
        # KubeRay's generated command ends with --block; we need it to return.
        cmd=$(printf '%s' "$KUBERAY_GEN_RAY_START_CMD" | sed 's/ --block//g')
        log "starting Ray node (KubeRay): $cmd"
        sh -c "$cmd"
        return
    fi
    : "${SVIT_RAY_ADDRESS:?SVIT_RAY_ADDRESS must be set}"
    wait_for_gcs "$SVIT_RAY_ADDRESS"
    # shellcheck disable=SC2046 # one flag per line, no spaces inside flags
    ray start --address="$SVIT_RAY_ADDRESS" $(common_flags) "$@"
}

case "$role" in
    ray-head)
        if [ -n "${KUBERAY_GEN_RAY_START_CMD:-}" ]; then
            log "starting Ray head (KubeRay)"
            exec sh -c "$KUBERAY_GEN_RAY_START_CMD"
        fi
        dash="--include-dashboard=false"
        if [ "${SVIT_RAY_DASHBOARD:-false}" = "true" ]; then
            dash="--include-dashboard=true --dashboard-host=0.0.0.0 --dashboard-port=${SVIT_RAY_DASHBOARD_PORT:-8265}"
        fi
        # shellcheck disable=SC2046,SC2086
        exec ray start --head --port="$gcs_port" --num-cpus=0 --block $dash $(common_flags) "$@"
        ;;
    host)
        : "${SVIT_HOST_ID:?SVIT_HOST_ID must be set (the pod name)}"
        # The host agent pins its process actors with this custom resource.
        start_ray_node --resources="{\"svit_host:${SVIT_HOST_ID}\": 10000}" "$@"
        log "Ray node up; starting the host agent"
        exec svit-cluster host-agent
        ;;
    gateway)
        start_ray_node --num-cpus=0 "$@"
        log "Ray node up; starting the gateway"
        exec svit-cluster gateway --host 0.0.0.0 --port "${SVIT_GATEWAY_PORT:-8080}"
        ;;
    gateway-only)
        exec svit-cluster gateway --host 0.0.0.0 --port "${SVIT_GATEWAY_PORT:-8080}"
        ;;
    *)
        echo "usage: svit-node ray-head|host|gateway|gateway-only [extra ray start flags]" >&2
        exit 64
        ;;
esac
