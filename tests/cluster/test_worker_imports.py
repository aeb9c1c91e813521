"""Process actors and host agents stay light.

Each active process is its own Ray worker, so everything the actor module imports is
paid once per active process (memory and cold-start time). The actor and the agent
need the process core, the Lisp, the controller, the store and the ownership client;
they never serve HTTP, render a terminal or plot. These tests import them in a fresh
interpreter (nothing else loaded) and list what came along.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: Top-level packages a worker must not load: the gateway's web stack, the CLI's
#: terminal stack and plotting.
FORBIDDEN = (
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "rich",
    "click",
    "pygments",
    "matplotlib",
)

#: Our own modules that pull those in (the gateway app, the local cluster launcher).
FORBIDDEN_OWN = ("svit_cluster.gateway", "svit_cluster.local._cluster")


def _loaded_after(module: str) -> list[str]:
    """Modules in ``sys.modules`` after ``import module`` in a fresh interpreter
    (without ``SVIT_*`` variables: a deployment's defaults)."""
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("SVIT_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
        env=env,
    )
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def _offenders(loaded: list[str]) -> list[str]:
    return [
        m
        for m in loaded
        if m.split(".")[0] in FORBIDDEN
        or any(m == own or m.startswith(own + ".") for own in FORBIDDEN_OWN)
    ]


@pytest.mark.parametrize("module", ["svit_cluster.cluster._actor", "svit_cluster.cluster._agent"])
def test_worker_module_imports_no_web_cli_or_plotting_stack(module: str) -> None:
    loaded = _loaded_after(module)
    assert module in loaded  # the probe really imported it
    assert _offenders(loaded) == []


#: What a process actor must not load beyond :data:`FORBIDDEN` once it is warm and
#: serving: the agent's etcd client and metrics (the actor never talks to etcd: its
#: agent owns the lease and the ownership records), pydantic-settings and dotenv
#: (``StoreConfig`` reads its ``WAIT`` defaults without them while those variables
#: are unset, as here).
ACTOR_FORBIDDEN = ("aetcd", "grpc", "prometheus_client", "tenacity", "pydantic_settings",
                   "dotenv")
ACTOR_FORBIDDEN_OWN = ("svit_cluster.ownership", "svit_cluster.cluster._agent",
                       "svit_cluster.cluster._router", "svit_cluster.settings")
#: Modules (and their submodules) a process actor must not load although their
#: package may be loaded: OpenTelemetry's SDK (redis-py probes for its metrics part
#: at import; ``svit_cluster.store._redispy`` keeps the probe from loading it; the
#: OpenTelemetry API stays, redis-py and our tracing use it).
ACTOR_FORBIDDEN_MODULES = ("opentelemetry.sdk",)

#: What a spare runs (``ProcessActor.warm``) and what ``start`` imports to serve.
_SERVING_ACTOR = (
    "svit_cluster.cluster._actor; import asyncio; "
    "from svit_cluster.cluster import ClusterConfig, ProcessActor; "
    "cfg = ClusterConfig(redis_url='redis://127.0.0.1:9/0'); "
    "asyncio.run(ProcessActor(cfg, 'h1', '', 0, 'agent:h1').warm()); "
    "from svit_cluster.store import StoreConfig, connect, load_backend_factory; "
    "from svit_cluster.events import RedisEventLog; "
    "from svit_cluster.ports import PortsConfig, build_registry; "
    "from svit_cluster.reasoning import ReasonerConfig, TurnLoop, build_reasoner; "
    "from svit_cluster.cluster._spawn import RaySpawner"
)


def _actor_offenders(loaded: list[str]) -> list[str]:
    return [
        m
        for m in loaded
        if m.split(".")[0] in FORBIDDEN + ACTOR_FORBIDDEN
        or any(m == own or m.startswith(own + ".")
               for own in FORBIDDEN_OWN + ACTOR_FORBIDDEN_OWN + ACTOR_FORBIDDEN_MODULES)
    ]


def test_a_warm_serving_actor_loads_only_the_data_path() -> None:
    """After ``warm`` and the imports of ``start`` (store, events, ports, reasoning),
    the worker has no web, CLI, etcd, metrics or settings stack (the etcd
    client alone adds about 10 MB to each of them), and no
    OpenTelemetry SDK: each of them is paid again by every active process."""
    loaded = _loaded_after(_SERVING_ACTOR)
    assert "svit_cluster.store" in loaded and "svit_cluster.reasoning" in loaded
    assert "redis" in loaded
    assert _actor_offenders(loaded) == []


def test_redis_py_loads_without_the_opentelemetry_sdk_which_stays_importable() -> None:
    """redis-py's import-time probe for OpenTelemetry's metrics SDK (installed with
    Ray's ``default`` extra) finds it absent while the store loads redis-py, so a
    worker never loads the SDK; afterwards it imports as usual (an application's
    metrics, or redis-py's own once enabled): no ``None`` entry was left behind."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    pytest.importorskip("redis.observability.metrics")  # redis-py >= 8 has the probe
    code = (
        "import sys; import svit_cluster.cluster._actor; "
        "assert 'redis' in sys.modules; "
        "sdk = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')); "
        "assert sdk == [], sdk; "
        "import opentelemetry.sdk.metrics as m; assert m.MeterProvider is not None; "
        "import redis.observability.metrics as rm; assert rm.OTEL_AVAILABLE; "
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


#: :data:`_SERVING_ACTOR`, then one traced activation (the gateway sends a
#: ``traceparent`` with every request) through the controller.
_TRACED_ACTIVATION = _SERVING_ACTOR + (
    "; import json; from svit_cluster import tracing; "
    "from svit_cluster.control import ProcessController, decode_request; "
    "from svit_cluster.process import Process, Script; "
    "proc = Process.create('svit://t/p', memory={'n': 0}, "
    "scripts={'inc': Script('(define (main input) (write \"/memory/n\" 1))')}); "
    "ctrl = ProcessController(proc); "
    "body = json.dumps({'protocol': 'svit-control@1', 'client_id': 'c', 'request_id': 'r', "
    "'process_id': 'svit://t/p', 'expected_version': 0, 'command': {'operation': 'activate', "
    "'script': 'inc', 'input': {'type': 'null'}}}).encode(); "
    "tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'; "
    "ctx = tracing.use_traceparent(tp); ctx.__enter__(); "
    "assert ctrl.execute(decode_request(body)).outcome.status == 'committed'"
)


def test_a_traced_activation_imports_no_opentelemetry_tracing() -> None:
    """Nothing set OpenTelemetry up in the worker, so a traced activation keeps the
    trace (ids propagate) without importing ``opentelemetry.trace``."""
    loaded = _loaded_after(_TRACED_ACTIVATION)
    assert "svit_cluster.lisp" in loaded
    assert [m for m in loaded if m.startswith("opentelemetry.trace")] == []


def test_the_actor_probe_detects_the_agent_stack() -> None:
    """Negative control: the agent does load the etcd client."""
    offenders = _actor_offenders(_loaded_after("svit_cluster.cluster._agent"))
    assert "aetcd" in offenders and "svit_cluster.ownership" in offenders


def test_probe_detects_a_forbidden_import() -> None:
    """Negative control: the same probe flags the gateway, which does import FastAPI."""
    offenders = _offenders(_loaded_after("svit_cluster.gateway"))
    assert "fastapi" in offenders
    assert "svit_cluster.gateway" in offenders


def test_lazy_package_names_still_resolve() -> None:
    """The names made lazy (PEP 562) still import from their packages."""
    from svit_cluster.cluster import RayRouter
    from svit_cluster.cluster._router import RayRouter as router_cls
    from svit_cluster.local import ClusterSpec, LocalCluster, stop_pid
    from svit_cluster.local._cluster import LocalCluster as cluster_cls

    assert RayRouter is router_cls
    assert LocalCluster is cluster_cls
    assert callable(stop_pid) and ClusterSpec is not None
    with pytest.raises(AttributeError):
        import svit_cluster.cluster as pkg

        _ = pkg.NoSuchName  # type: ignore[attr-defined]
