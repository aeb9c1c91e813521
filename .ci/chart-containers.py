#!/usr/bin/env python3
"""Run the chart's own commands in the built image (the closest to `helm install` here).

Renders helm/svit-cluster with `helm template`, then starts, with podman on the
host network, the containers the manifests describe, each with its rendered
command, args and environment (ConfigMap values resolved; Secret and field
references replaced by local values):

  Ray head, one worker host (svit-node host -> svit-cluster host-agent), the
  gateway (svit-node gateway) and the outbox dispatcher.

etcd and Redis run as local processes (svit_cluster.local), not containers.
SVIT_ETCD_ENDPOINTS lists a dead member first, so every component must fail
over to the live one. The check then:

  1. runs every probe of every container as the kubelet would (exec probes
     with `podman exec`, httpGet probes over HTTP) until all pass;
  2. runs the chart's `helm test` command (svit-cluster smoke) against the
     gateway: one authenticated activation, committed on the worker host;
  3. stops the host container (SIGTERM) and measures how long its host key
     stays in etcd (the agent revokes its lease on SIGTERM).

Prints the time of each step; exits non-zero on the first failure. Needs the
image built by .ci/image.sh (IMAGE, default localhost/svit-cluster:ci) and
Helm (.ci/helm.sh). Not wired into .ci/run.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from svit_cluster.local import EtcdServer, RedisServer  # noqa: E402
from svit_cluster.local._servers import free_port  # noqa: E402
from svit_cluster.ownership import open_client  # noqa: E402

IMAGE = os.environ.get("IMAGE", "localhost/svit-cluster:ci")
HELM = os.environ.get("HELM_BIN", str(ROOT / ".helm" / "bin" / "helm"))
PREFIX = f"svitchk-{os.getpid()}"
ADMIN_TOKEN = "chk-admin-" + os.urandom(12).hex()
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def render() -> list[dict[str, Any]]:
    out = subprocess.run([HELM, "template", "svit", str(ROOT / "helm" / "svit-cluster"),
                          "--namespace", "svit"], capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def pod_container(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    d = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    c: dict[str, Any] = d["spec"]["template"]["spec"]["containers"][0]
    return c


class Check:
    def __init__(self, docs: list[dict[str, Any]], state: Path) -> None:
        self.docs = docs
        self.config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
        self.state = state
        self.etcd = EtcdServer(state / "etcd", die_with_parent=True)
        self.redis = RedisServer(state / "redis", die_with_parent=True)
        self.gcs = free_port()
        self.gateway_port = free_port()
        self.dead_etcd = free_port()
        self.names: list[str] = []
        hard = int(subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True,
                                  text=True).stdout.strip() or "1024")
        self.ulimits = ["--ulimit", f"nofile={hard}:{hard}", "--ulimit", "nproc=32768:32768"]
        self.tokens = state / "tokens.json"
        self.tokens.write_text(json.dumps({"tokens": [{"token": ADMIN_TOKEN, "admin": True}]}))
        self.tokens.chmod(0o644)

    def env(self, c: dict[str, Any], pod: str) -> dict[str, str]:
        env = dict(self.config)
        for var in c.get("env") or []:
            if "value" in var:
                env[var["name"]] = var["value"]
        env.update(
            POD_NAME=pod, POD_IP="127.0.0.1", SVIT_HOST_ID=pod, SVIT_NODE_IP="127.0.0.1",
            SVIT_REDIS_URL=self.redis.url, SVIT_TOKEN=ADMIN_TOKEN,
            SVIT_ETCD_ENDPOINTS=f"127.0.0.1:{self.dead_etcd},{self.etcd.endpoint}",
            SVIT_RAY_ADDRESS=f"127.0.0.1:{self.gcs}", SVIT_RAY_GCS_PORT=str(self.gcs),
            SVIT_GATEWAY_PORT=str(self.gateway_port),
            SVIT_GATEWAY_URL=f"http://127.0.0.1:{self.gateway_port}",
        )
        return env

    def start(self, c: dict[str, Any], pod: str, extra: tuple[str, ...] = (),
              volumes: tuple[str, ...] = ()) -> str:
        name = f"{PREFIX}-{pod}"
        cmd = ["nice", "-n", "10", "podman", "--runtime", "runc", "run", "-d", "--name", name,
               "--network", "host", "--read-only", "--tmpfs", "/tmp", "--shm-size", "512m",
               "--user", "10001:10001", *self.ulimits]
        for v in volumes:
            cmd += ["-v", v]
        for k, v in self.env(c, pod).items():
            cmd += ["-e", f"{k}={v}"]
        cmd += ["--entrypoint", c["command"][0], IMAGE, *c["command"][1:], *c["args"], *extra]
        subprocess.run(cmd, check=True, capture_output=True)
        self.names.append(name)
        return name

    def probe(self, name: str, c: dict[str, Any], kind: str) -> bool:
        p = c[kind]
        timeout = p.get("timeoutSeconds", 1)
        if "exec" in p:
            try:
                return subprocess.run(["podman", "exec", name, *p["exec"]["command"]],
                                      capture_output=True, timeout=timeout).returncode == 0
            except subprocess.TimeoutExpired:
                return False
        action = p.get("httpGet") or p.get("tcpSocket")
        if action is None:
            raise AssertionError(f"unknown probe {p}")
        ports = {cp["name"]: cp["containerPort"] for cp in c.get("ports", [])}
        port = ports.get(action["port"], action["port"])
        # On the host network the chart's fixed ports are free ports here.
        port = {int(self.config["SVIT_RAY_GCS_PORT"]): self.gcs,
                8080: self.gateway_port}.get(port, port)
        try:
            if "httpGet" in p:
                url = f"http://127.0.0.1:{port}{action['path']}"
                return bool(urllib.request.urlopen(url, timeout=timeout).status == 200)
            socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
            return True
        except Exception:
            return False

    def wait_probes(self, pods: dict[str, dict[str, Any]], started: float,
                    limit_s: float = 300) -> dict[tuple[str, str], float]:
        passed: dict[tuple[str, str], float] = {}
        wanted = {(n, k) for n, c in pods.items()
                  for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c}
        while wanted - set(passed) and time.monotonic() - started < limit_s:
            for n, k in sorted(wanted - set(passed)):
                if self.probe(n, pods[n], k):
                    passed[(n, k)] = round(time.monotonic() - started, 1)
            time.sleep(1)
        missing = wanted - set(passed)
        if missing:
            raise SystemExit(f"chart-containers: FAIL: probes never passed: {sorted(missing)}")
        return passed

    async def host_keys(self) -> list[str]:
        client = open_client(self.etcd.endpoint)
        try:
            got = await client.get_prefix(f"/svit/{self.config['SVIT_CLUSTER']}/hosts/".encode())
            return [bytes(kv.key).decode().rsplit("/", 1)[1] for kv in got]
        finally:
            await client.close()

    def cleanup(self) -> None:
        for n in self.names:
            subprocess.run(["podman", "logs", "--tail", "40", n],
                           stdout=open(self.state / f"{n}.log", "w"), stderr=subprocess.STDOUT)
            subprocess.run(["podman", "rm", "-f", "-t", "5", n], capture_output=True)
        self.etcd.stop()
        self.redis.stop()


def ray_ports() -> tuple[str, ...]:
    """Free ports for Ray's fixed-by-default agent ports (other Ray nodes share this host)."""
    return (f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}")


def main() -> None:
    state = Path(os.environ.get("CHECK_STATE", f"/tmp/{PREFIX}"))
    state.mkdir(parents=True, exist_ok=True)
    docs = render()
    head = pod_container(docs, "Deployment", "svit-ray-head")
    host = pod_container(docs, "StatefulSet", "svit-ray-worker")
    gateway = pod_container(docs, "Deployment", "svit-gateway")
    dispatcher = pod_container(docs, "Deployment", "svit-dispatcher")
    smoke = next(d for d in docs
                 if d["kind"] == "Pod" and d["metadata"]["name"] == "svit-smoke-test")
    check = Check(docs, state)
    check.etcd.start()
    check.redis.start()
    say(f"etcd {check.etcd.endpoint} (SVIT_ETCD_ENDPOINTS lists dead 127.0.0.1:{check.dead_etcd} "
        f"first), redis {check.redis.url}")
    try:
        started = time.monotonic()
        names = {
            check.start(head, "svit-ray-head-0",
                        (f"--ray-client-server-port={free_port()}", *ray_ports())): head,
            check.start(host, "svit-ray-worker-0", ray_ports()): host,
            check.start(gateway, "svit-gateway-0", ray_ports(),
                        (f"{check.tokens}:/etc/svit/tokens/tokens.json:ro",)): gateway,
            check.start(dispatcher, "svit-dispatcher-0"): dispatcher,
        }
        say("containers started: " + ", ".join(names))
        passed = check.wait_probes(names, started)
        say(f"all {len(passed)} probes passed; last after {max(passed.values())}s")
        for (n, k), t in sorted(passed.items(), key=lambda x: x[1]):
            print(f"    {t:6.1f}s  {n.removeprefix(PREFIX + '-')}  {k}")

        c = smoke["spec"]["containers"][0]
        args = [*c["args"]]
        args[args.index("--url") + 1] = f"http://127.0.0.1:{check.gateway_port}"
        t = time.monotonic()
        out = subprocess.run(
            ["podman", "--runtime", "runc", "run", "--rm", "--network", "host", "--read-only",
             "--tmpfs", "/tmp", "--user", "10001:10001", *check.ulimits,
             "-e", f"SVIT_TOKEN={ADMIN_TOKEN}", "-e", "HOME=/tmp",
             "--entrypoint", c["command"][0], IMAGE, *c["command"][1:], *args],
            capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"chart-containers: FAIL: helm test command: {out.stdout}{out.stderr}")
        say(f"helm test command ({' '.join(args[:2])}): {out.stdout.strip()} "
            f"in {time.monotonic() - t:.1f}s")

        host_name = f"{PREFIX}-svit-ray-worker-0"
        before = asyncio.run(check.host_keys())
        t = time.monotonic()
        subprocess.run(["podman", "stop", "-t", str(30), host_name], capture_output=True)
        stop_s = time.monotonic() - t
        after = asyncio.run(check.host_keys())
        say(f"SIGTERM to the host: container gone in {stop_s:.1f}s; hosts in etcd before "
            f"{before}, after {after} (lease TTL {check.config['SVIT_LEASE_TTL_S']}s)")
        if "svit-ray-worker-0" in after:
            raise SystemExit("chart-containers: FAIL: the stopped host is still registered")
    finally:
        check.cleanup()
    say("chart-containers: OK")


if __name__ == "__main__":
    main()
