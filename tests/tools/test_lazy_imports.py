"""Every import inside a function of svit_cluster or the chaos harness, and why.

An import inside a function still ties the two modules together
(``tools/import_graph.py`` counts it as an edge), so it never breaks a cycle: a
cycle is broken by moving the shared piece to a lower module, passing a callable
or a Protocol in, or splitting a module. What a lazy import does buy is time and
memory: the target is loaded when the function first runs, not when the module
is imported. Two reasons are accepted, and :data:`ALLOWED` gives one for each
``(file, imported module)`` pair:

- ``optional dependency``: the package is an extra (``pyproject.toml``) or may
  be missing on a platform; the module works without it until that function runs;
- ``start-up cost``: the target is costly to load and some process that imports
  this module never needs it (the entry says which, and what it is spared).

A new function-level import fails :func:`test_every_lazy_import_is_listed`: move
it to the top of its module, or list it here with its reason. An entry whose
import is gone fails :func:`test_every_entry_is_still_used`.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "import_graph.py"

OPTIONAL = "optional dependency: "
STARTUP = "start-up cost: "

#: The command-line programs import what a command runs inside that command.
_CLI = (STARTUP + "a CLI command imports what it runs, so `--help`, shell completion "
        "and the other commands do not load it")
#: ray is imported where a Ray call is made.
_RAY = (STARTUP + "ray (hundreds of modules) loads only where a Ray call is made; "
        "unit tests and the in-process router import this module without it")
#: What a process actor's worker must not load (tests/cluster/test_worker_imports.py).
_WORKER_SETTINGS = (STARTUP + "pydantic-settings and dotenv never load in a process "
                    "actor's worker while no SVIT_* variable asks for them "
                    "(tests/cluster/test_worker_imports.py)")
_ACTOR_DATA_PATH = (STARTUP + "a process actor answers its constructor before it loads "
                    "the data path; warm() loads it in a thread, start() uses it")
_OPENAI = (STARTUP + "the OpenAI-compatible reasoner brings httpx, which a process "
           "actor's worker loads only when that reasoner is configured "
           "(tests/cluster/test_worker_imports.py)")
_SERVE = (STARTUP + "serve.py starts either the gateway or a host agent; each loads "
          "only its own stack (the agent never loads FastAPI, the gateway never the "
          "agent's etcd lease keeping)")
_DISPATCH_IN_GATEWAY = (STARTUP + "svit_cluster.gateway is imported for GatewayMetrics "
                        "and the Router contract (cluster/_router, inprocess); the "
                        "dispatcher and the SDK it brings load only when create_app "
                        "mounts this route")

#: ``(file, imported module) -> reason`` for every import inside a function.
ALLOWED: dict[tuple[str, str], str] = {
    # the chaos harness
    ("chaos/report.py", "matplotlib"):
        OPTIONAL + "matplotlib is the `chaos` extra; only the timeline figure needs it",
    ("chaos/report.py", "matplotlib.pyplot"):
        OPTIONAL + "matplotlib is the `chaos` extra; only the timeline figure needs it",
    # command-line programs
    ("svit_cluster/cli/_util.py", "rich.console"): _CLI,
    ("svit_cluster/cli/_util.py", "rich.progress"): _CLI,
    ("svit_cluster/cli/admin.py", "svit_cluster.client"): _CLI,
    ("svit_cluster/cli/admin.py", "svit_cluster.local"): _CLI,
    ("svit_cluster/cli/admin.py", "svit_cluster.ownership"): _CLI,
    ("svit_cluster/cli/admin.py", "svit_cluster.settings"): _CLI,
    ("svit_cluster/cli/chat.py", "svit_cluster.chat"): _CLI,
    ("svit_cluster/cli/chat.py", "svit_cluster.client"): _CLI,
    ("svit_cluster/cli/chat.py", "svit_cluster.settings"): _CLI,
    ("svit_cluster/cli/dispatch.py", "svit_cluster.client"): _CLI,
    ("svit_cluster/cli/dispatch.py", "svit_cluster.settings"): _CLI,
    ("svit_cluster/cli/local.py", "svit_cluster.demo"): _CLI,
    ("svit_cluster/cli/local.py", "svit_cluster.local"): _CLI,
    ("svit_cluster/cli/local.py", "svit_cluster.reasoning"): _CLI,
    ("svit_cluster/cli/process.py", "rich.console"): _CLI,
    ("svit_cluster/cli/process.py", "rich.table"): _CLI,
    ("svit_cluster/cli/process.py", "svit_cluster.client"): _CLI,
    ("svit_cluster/cli/process.py", "svit_cluster.control"): _CLI,
    ("svit_cluster/cli/process.py", "svit_cluster.process"): _CLI,
    ("svit_cluster/cli/process.py", "svit_cluster.settings"): _CLI,
    ("svit_cluster/cli/serve.py", "svit_cluster.client"): _CLI,
    ("svit_cluster/cli/serve.py", "svit_cluster.cluster.serve"): _CLI,
    ("svit_cluster/cli/serve.py", "svit_cluster.settings"): _CLI,
    # the SDK
    ("svit_cluster/client.py", "svit_cluster.settings"):
        STARTUP + "importing the SDK does not load pydantic-settings; a client loads "
                  "it when it is built (to resolve the gateway's address)",
    # Ray hosting
    ("svit_cluster/cluster/_actor.py", "ray"): _RAY,
    ("svit_cluster/cluster/_actor.py", "svit_cluster.events"): _ACTOR_DATA_PATH,
    ("svit_cluster/cluster/_actor.py", "svit_cluster.mounts"): _ACTOR_DATA_PATH,
    ("svit_cluster/cluster/_actor.py", "svit_cluster.ports"): _ACTOR_DATA_PATH,
    ("svit_cluster/cluster/_actor.py", "svit_cluster.reasoning"): _ACTOR_DATA_PATH,
    ("svit_cluster/cluster/_agent.py", "ray"): _RAY,
    ("svit_cluster/cluster/_config.py", "svit_cluster.ports"):
        STARTUP + "every process actor's worker imports the cluster package (to "
                  "unpickle ProcessActor) before its warm-up; only launchers call "
                  "ClusterConfig.from_settings",
    ("svit_cluster/cluster/_config.py", "svit_cluster.mounts"):
        STARTUP + "as svit_cluster.ports just above: only launchers validate the "
                  "mount grants in ClusterConfig.from_settings",
    ("svit_cluster/cluster/_config.py", "svit_cluster.settings"): _WORKER_SETTINGS,
    ("svit_cluster/cluster/_health.py", "ray"): _RAY,
    ("svit_cluster/cluster/_host_lease.py", "ray"): _RAY,
    ("svit_cluster/cluster/_placement.py", "ray"): _RAY,
    ("svit_cluster/cluster/_placement.py", "ray._private"): _RAY,
    ("svit_cluster/cluster/_router.py", "ray"): _RAY,
    ("svit_cluster/cluster/_router.py", "ray.exceptions"): _RAY,
    ("svit_cluster/cluster/_spare_pool.py", "ray"): _RAY,
    ("svit_cluster/cluster/_spawn.py", "ray"): _RAY,
    ("svit_cluster/cluster/_supervisor.py", "ray"): _RAY,
    ("svit_cluster/cluster/bootstrap.py", "ray"): _RAY,
    ("svit_cluster/cluster/serve.py", "ray"): _RAY,
    ("svit_cluster/cluster/serve.py", "svit_cluster.cluster._router"): _SERVE,
    ("svit_cluster/cluster/serve.py", "svit_cluster.cluster._routes"): _SERVE,
    ("svit_cluster/cluster/serve.py", "svit_cluster.cluster.bootstrap"): _SERVE,
    ("svit_cluster/cluster/serve.py", "svit_cluster.gateway"): _SERVE,
    ("svit_cluster/cluster/serve.py", "svit_cluster.ownership"): _SERVE,
    ("svit_cluster/cluster/serve.py", "uvicorn"): _SERVE,
    ("svit_cluster/cluster/serve.py", "uvicorn.config"): _SERVE,
    ("svit_cluster/cluster/serve.py", "uvicorn.importer"): _SERVE,
    ("svit_cluster/cluster/serve.py", "uvloop"):
        OPTIONAL + "uvloop has no wheels on some platforms; http_stack() then "
                   "falls back to asyncio",
    # the gateway
    ("svit_cluster/gateway/_deadletters.py", "svit_cluster.dispatch"): _DISPATCH_IN_GATEWAY,
    ("svit_cluster/gateway/_outbox.py", "svit_cluster.dispatch"): _DISPATCH_IN_GATEWAY,
    ("svit_cluster/gateway/_summary.py", "svit_cluster.dispatch"): _DISPATCH_IN_GATEWAY,
    ("svit_cluster/gateway/_timers.py", "svit_cluster.dispatch"): _DISPATCH_IN_GATEWAY,
    # the dev cluster (PEP 562 names)
    ("svit_cluster/local/__init__.py", "svit_cluster.local._cluster"):
        STARTUP + "the launcher (httpx, click, rich) loads on first use of its names, "
                  "so the CLI's lighter commands do not pay for it",
    ("svit_cluster/local/__init__.py", "svit_cluster.local._status"):
        STARTUP + "cluster_status (and its etcd client) loads on first use",
    # mount providers
    ("svit_cluster/mounts/__init__.py", "svit_cluster.mounts._config"):
        STARTUP + "the grants are pydantic models; the process core imports this "
                  "package for the mount registry alone (PEP 562 names)",
    ("svit_cluster/mounts/_sql.py", "psycopg"):
        OPTIONAL + "psycopg is the `mounts` extra; only a sql-query mount running its "
                   "query needs it (a host without it answers mount_unavailable)",
    # ports and reasoners, inside a process actor
    ("svit_cluster/ports/_builtin.py", "httpx"):
        STARTUP + "httpx loads in a process actor's worker only when an http port is "
                  "called (tests/cluster/test_worker_imports.py)",
    ("svit_cluster/ports/_builtin.py", "svit_cluster.reasoning"):
        STARTUP + "the reasoner stack loads only when a `reason` port is built or called",
    ("svit_cluster/reasoning/__init__.py", "svit_cluster.reasoning._openai"): _OPENAI,
    ("svit_cluster/reasoning/_config.py", "svit_cluster.reasoning._openai"): _OPENAI,
    # the store, inside a process actor
    ("svit_cluster/store/_log_config.py", "svit_cluster.settings"): _WORKER_SETTINGS,
    ("svit_cluster/store/_policy.py", "svit_cluster.settings"): _WORKER_SETTINGS,
    ("svit_cluster/store/_redis.py", "svit_cluster.settings"): _WORKER_SETTINGS,
    ("svit_cluster/store/_redispy.py", "redis"):
        STARTUP + "redis-py is imported once, with OpenTelemetry's metrics SDK masked, "
                  "so no worker loads the SDK (see the module's docstring)",
    # tracing
    ("svit_cluster/tracing.py", "opentelemetry"):
        OPTIONAL + "opentelemetry is the `otel` extra; without it the traceparent "
                   "still propagates",
}


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def _lazy() -> dict[tuple[str, str], list[str]]:
    """``(file, module) -> [functions]`` for every import inside a function."""
    tool = _tool()
    found: dict[tuple[str, str], list[str]] = {}
    for root, name in (("svit_cluster", "svit_cluster"), ("chaos", "svit_chaos")):
        for file, function, module in tool.lazy_imports(REPO / root, name):
            found.setdefault((file, module), []).append(function)
    return found


def test_every_lazy_import_is_listed() -> None:
    new = {k: v for k, v in _lazy().items() if k not in ALLOWED}
    assert new == {}, (
        "imports inside functions that are not in ALLOWED (move them to the top of "
        "the module, or list them with an optional-dependency or start-up-cost reason): "
        f"{new}")


def test_every_entry_is_still_used() -> None:
    stale = sorted(set(ALLOWED) - set(_lazy()))
    assert stale == [], f"ALLOWED lists imports that are gone: {stale}"


def test_every_reason_is_one_of_the_two() -> None:
    bad = {k: r for k, r in ALLOWED.items()
           if not r.startswith((OPTIONAL, STARTUP)) or len(r) <= len(STARTUP) + 10}
    assert bad == {}


def test_the_lazy_imports_inside_one_package_are_these() -> None:
    """A lazy import between two modules of one package is the usual way a cycle is
    hidden; the ones left load public names on first use (PEP 562), or a module
    that brings a costly stack (the OpenAI reasoner's httpx, the gateway's or the
    agent's stack in serve.py)."""
    inside = sorted(
        (file, module) for file, module in ALLOWED
        if module.startswith(("svit_cluster.", "svit_chaos."))
        and module.split(".")[1] == Path(file).parts[1].removesuffix(".py"))
    assert inside == [
        ("svit_cluster/cluster/serve.py", "svit_cluster.cluster._router"),
        ("svit_cluster/cluster/serve.py", "svit_cluster.cluster._routes"),
        ("svit_cluster/cluster/serve.py", "svit_cluster.cluster.bootstrap"),
        ("svit_cluster/local/__init__.py", "svit_cluster.local._cluster"),
        ("svit_cluster/local/__init__.py", "svit_cluster.local._status"),
        ("svit_cluster/mounts/__init__.py", "svit_cluster.mounts._config"),
        ("svit_cluster/reasoning/__init__.py", "svit_cluster.reasoning._openai"),
        ("svit_cluster/reasoning/_config.py", "svit_cluster.reasoning._openai"),
    ]


def test_a_new_lazy_import_is_caught(tmp_path: Path) -> None:
    """Negative control: the scan sees an import inside a (nested) function, and not
    one under ``if TYPE_CHECKING:``."""
    pkg = tmp_path / "svit_cluster"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import json\n"
        "def f():\n    def g():\n        import ray\n    return g\n")
    assert _tool().lazy_imports(pkg) == [("svit_cluster/m.py", "f.g", "ray")]
