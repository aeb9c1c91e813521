"""Every shared default is written once, in :mod:`svit_cluster.defaults`.

The environment settings, ``ClusterConfig``, ``ClusterSpec``, ``StoreConfig``,
the dead-letter, process and timer page limits (library, gateway, SDK) and the
CLI options all take these defaults and ranges from the constants there. Two
checks, both pure:

* the values each place ends up with equal the constants (pydantic field
  defaults and bounds, dataclass defaults, click defaults and ranges);
* the source of those places names a constant rather than a literal, so a
  default cannot drift by being typed again (read with :mod:`ast`).

The chart's ``values.yaml`` cannot import Python; ``tests/helm/test_values_defaults.py``
compares it with the same constants.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import click
import pytest

from svit_cluster import defaults as d
from svit_cluster.cli import cli
from svit_cluster.cli.dispatch import dead_letters
from svit_cluster.cli.process import list_ as list_command
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.dispatch import DeadLetters
from svit_cluster.gateway._processes import MAX_PROCESS_PAGE
from svit_cluster.gateway._timers import MAX_TIMER_PAGE
from svit_cluster.local import ClusterSpec
from svit_cluster.ownership import DEFAULT_TTL_S
from svit_cluster.settings import ClusterSettings, NodeSettings, StoreSettings
from svit_cluster.store._log_config import StoreConfig

PKG = Path(__file__).resolve().parents[2] / "svit_cluster"

#: ``ClusterConfig`` / ``ClusterSettings`` field -> the constant of its default.
CLUSTER_DEFAULTS: dict[str, Any] = {
    "lease_ttl_s": d.DEFAULT_LEASE_TTL_S,
    "snapshot_every": d.DEFAULT_SNAPSHOT_EVERY,
    "passivate_after_s": d.DEFAULT_PASSIVATE_AFTER_S,
    "signal_retention": d.DEFAULT_SIGNAL_RETENTION,
    "max_events": d.DEFAULT_MAX_EVENTS,
    "max_active_per_host": d.DEFAULT_MAX_ACTIVE_PER_HOST,
    "max_actors_pss_mib": d.DEFAULT_MAX_ACTORS_PSS_MIB,
    "max_starting_per_host": d.DEFAULT_MAX_STARTING_PER_HOST,
    "redis_url": d.DEFAULT_REDIS_URL,
    "cluster": d.DEFAULT_CLUSTER,
}

#: ``up`` option -> (default, IntRange min, IntRange max); None: not an IntRange bound.
UP_OPTIONS: dict[str, tuple[Any, int | None, int | None]] = {
    "hosts": (d.DEFAULT_LOCAL_HOSTS, 1, d.LOCAL_HOSTS_MAX),
    "lease_ttl_s": (d.DEFAULT_LEASE_TTL_S, d.LEASE_TTL_S_MIN, d.LEASE_TTL_S_MAX),
    "snapshot_every": (d.DEFAULT_SNAPSHOT_EVERY, 1, None),
    "passivate_after_s": (d.DEFAULT_PASSIVATE_AFTER_S, None, None),
    "dispatchers": (d.DEFAULT_LOCAL_DISPATCHERS, 0, d.LOCAL_DISPATCHERS_MAX),
    "max_active_per_host": (d.DEFAULT_MAX_ACTIVE_PER_HOST, 0, d.MAX_ACTIVE_PER_HOST_MAX),
    "signal_retention": (d.DEFAULT_SIGNAL_RETENTION, d.RETENTION_MIN, d.RETENTION_MAX),
    "max_events": (d.DEFAULT_MAX_EVENTS, d.RETENTION_MIN, d.RETENTION_MAX),
}


def _command(name: str) -> click.Command:
    command = cli.commands[name]
    assert isinstance(command, click.Command)
    return command


def _params(name: str) -> dict[str, click.Parameter]:
    return {str(p.name): p for p in _command(name).params}


def test_settings_defaults_and_bounds_are_the_constants() -> None:
    fields = ClusterSettings.model_fields
    for name, want in CLUSTER_DEFAULTS.items():
        assert fields[name].default == want, name
    assert fields["etcd_endpoints"].default == d.DEFAULT_ETCD_ENDPOINT

    def bounds(field: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for rule in fields[field].metadata:
            for key in ("ge", "gt", "le"):
                if getattr(rule, key, None) is not None:
                    out[key] = getattr(rule, key)
        return out

    assert bounds("lease_ttl_s") == {"ge": d.LEASE_TTL_S_MIN}
    for name in ("signal_retention", "max_events"):
        assert bounds(name) == {"ge": d.RETENTION_MIN, "le": d.RETENTION_MAX}, name
    assert bounds("max_active_per_host") == {"ge": 0, "le": d.MAX_ACTIVE_PER_HOST_MAX}
    assert bounds("max_starting_per_host") == {"ge": 0, "le": d.MAX_STARTING_PER_HOST_MAX}
    store = StoreSettings.model_fields
    assert store["redis_wait_replicas"].default == d.DEFAULT_WAIT_REPLICAS
    assert store["redis_wait_timeout_ms"].default == d.DEFAULT_WAIT_TIMEOUT_MS
    assert store["redis_eviction_check_s"].default == d.DEFAULT_EVICTION_CHECK_S
    assert NodeSettings.model_fields["gateway_port"].default == d.DEFAULT_GATEWAY_PORT


def test_configs_take_the_constants() -> None:
    config = ClusterConfig()
    for name, want in CLUSTER_DEFAULTS.items():
        assert getattr(config, name) == want, name
    assert config.etcd_endpoint == d.DEFAULT_ETCD_ENDPOINT
    spec = ClusterSpec(state_dir=Path("unused"))
    assert (spec.cluster, spec.hosts, spec.dispatchers) == (
        d.LOCAL_CLUSTER, d.DEFAULT_LOCAL_HOSTS, d.DEFAULT_LOCAL_DISPATCHERS)
    for name in ("lease_ttl_s", "snapshot_every", "passivate_after_s", "signal_retention",
                 "max_events", "max_active_per_host"):
        assert getattr(spec, name) == CLUSTER_DEFAULTS[name], name
    store = StoreConfig()
    assert (store.snapshot_every, store.signal_retention) == (
        d.DEFAULT_SNAPSHOT_EVERY, d.DEFAULT_SIGNAL_RETENTION)
    assert DEFAULT_TTL_S == d.DEFAULT_LEASE_TTL_S


@pytest.mark.parametrize("name", sorted(UP_OPTIONS))
def test_up_options_show_the_constants(name: str) -> None:
    default, low, high = UP_OPTIONS[name]
    param = _params("up")[name]
    assert isinstance(param, click.Option) and param.show_default
    assert param.default == default
    if isinstance(param.type, click.IntRange):
        assert (param.type.min, param.type.max) == (low, high)
    else:
        assert low is None and high is None


def test_gateway_port_and_healthcheck_use_the_default_port() -> None:
    port = _params("gateway")["port"]
    assert port.default == d.DEFAULT_GATEWAY_PORT
    url = _params("healthcheck")["url"]
    assert isinstance(url, click.Option) and url.help is not None
    assert f"127.0.0.1:{d.DEFAULT_GATEWAY_PORT}/healthz" in url.help


def _limit(command: click.Command) -> tuple[Any, Any, Any]:
    param = {p.name: p for p in command.params}["limit"]
    assert isinstance(param.type, click.IntRange)
    return param.default, param.type.min, param.type.max


def test_page_limits_are_the_constants() -> None:
    """Dead-letter, process and timer pages: the library, the gateway, the SDK
    and the CLI take one default and one maximum each."""
    letters = dead_letters.commands
    timers = cli.commands["timers"]
    assert isinstance(timers, click.Group)
    assert _limit(letters["list"]) == (d.DEFAULT_DEAD_LETTER_PAGE, 1, d.DEAD_LETTER_PAGE_MAX)
    assert _limit(letters["redrive"]) == (d.DEFAULT_REDRIVE_LIMIT, 1, d.DEAD_LETTER_PAGE_MAX)
    assert _limit(list_command) == (d.DEFAULT_PROCESS_PAGE, 1, d.PROCESS_PAGE_MAX)
    assert _limit(timers.commands["list"]) == (d.DEFAULT_TIMER_PAGE, 1, d.TIMER_PAGE_MAX)
    assert (MAX_PROCESS_PAGE, MAX_TIMER_PAGE) == (d.PROCESS_PAGE_MAX, d.TIMER_PAGE_MAX)

    def default(fn: Any, name: str = "limit") -> Any:
        return inspect.signature(fn).parameters[name].default

    assert default(DeadLetters.list) == d.DEFAULT_DEAD_LETTER_PAGE
    assert default(DeadLetters.redrive) == d.DEFAULT_REDRIVE_LIMIT
    for client in (SvitClient, AsyncSvitClient):
        assert default(client.list_processes) == d.DEFAULT_PROCESS_PAGE
        assert default(client.timers) == d.DEFAULT_TIMER_PAGE


def test_client_timeout_and_state_dir_are_the_constants() -> None:
    from svit_cluster.settings import DEFAULT_CLUSTER_JSON

    for client in (SvitClient, AsyncSvitClient):
        timeout = inspect.signature(client.__init__).parameters["timeout_s"].default
        assert timeout == d.DEFAULT_HTTP_TIMEOUT_S
    assert _params("list")["timeout_s"].default == d.DEFAULT_HTTP_TIMEOUT_S
    assert _params("up")["state_dir"].default == d.DEFAULT_STATE_DIR
    assert DEFAULT_CLUSTER_JSON.parent == d.DEFAULT_STATE_DIR


def test_range_checks_follow_the_constants() -> None:
    """The two range checks outside pydantic (``ClusterSpec.validate``,
    ``StoreConfig``) take their bounds and messages from the constants."""
    from svit_cluster.errors import ConfigurationError

    for value in (d.RETENTION_MIN - 1, d.RETENTION_MAX + 1):
        with pytest.raises(ConfigurationError, match=f"{d.RETENTION_MIN}..{d.RETENTION_MAX}"):
            ClusterSpec(state_dir=Path("unused"), signal_retention=value).validate()
        with pytest.raises(ConfigurationError, match=f"{d.RETENTION_MIN}..{d.RETENTION_MAX}"):
            StoreConfig(signal_retention=value)
    for ttl in (d.LEASE_TTL_S_MIN - 1, d.LEASE_TTL_S_MAX + 1):
        with pytest.raises(ConfigurationError, match="lease TTL"):
            ClusterSpec(state_dir=Path("unused"), lease_ttl_s=ttl).validate()


# -- the source names the constants ------------------------------------------------------

#: (module file, class) -> fields whose default (and ``Field`` bounds) must be a name.
CLASS_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("settings.py", "StoreSettings"): (
        "redis_eviction_check_s", "redis_wait_replicas", "redis_wait_timeout_ms"),
    ("settings.py", "ClusterSettings"): (
        "cluster", "etcd_endpoints", "redis_url", "lease_ttl_s", "snapshot_every",
        "passivate_after_s", "signal_retention", "max_events", "max_active_per_host",
        "max_actors_pss_mib", "max_starting_per_host"),
    ("settings.py", "NodeSettings"): ("gateway_port",),
    ("cluster/_config.py", "ClusterConfig"): (
        "cluster", "etcd_endpoint", "redis_url", "lease_ttl_s", "snapshot_every",
        "passivate_after_s", "signal_retention", "max_events", "max_active_per_host",
        "max_actors_pss_mib", "max_starting_per_host"),
    ("local/_cluster.py", "ClusterSpec"): (
        "hosts", "lease_ttl_s", "snapshot_every", "passivate_after_s", "cluster",
        "dispatchers", "max_active_per_host", "signal_retention", "max_events"),
    ("store/_log_config.py", "StoreConfig"): ("snapshot_every", "signal_retention"),
}
#: ``Field`` keywords that must name a constant (besides ``default``), per field.
FIELD_BOUNDS: dict[str, tuple[str, ...]] = {
    "lease_ttl_s": ("ge",), "signal_retention": ("ge", "le"), "max_events": ("ge", "le"),
    "max_active_per_host": ("le",), "max_starting_per_host": ("le",),
    "redis_wait_replicas": ("le",), "redis_wait_timeout_ms": ("le",),
}
#: (module file, command function) -> options whose default and range must be names.
CLICK_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cli/local.py", "up"): ("--hosts", "--lease-ttl", "--snapshot-every",
                             "--passivate-after", "--dispatchers", "--max-active-per-host",
                             "--signal-retention", "--max-events"),
    ("cli/serve.py", "gateway"): ("--port",),
    ("cli/admin.py", "timers_list"): ("--limit",),
    ("cli/process.py", "list_"): ("--limit",),
    ("cli/dispatch.py", "list_letters"): ("--limit",),
    ("cli/dispatch.py", "redrive"): ("--limit",),
}
#: Range checks written outside pydantic: module file -> upper bounds that must not
#: appear there as literals (only values no other setting of that file shares: 16,
#: for one, is also the Redis Cluster's largest master count and the trim margin).
RANGE_LITERALS: dict[str, set[int]] = {
    "local/_cluster.py": {d.RETENTION_MAX, d.LEASE_TTL_S_MAX, d.MAX_ACTIVE_PER_HOST_MAX},
    "store/_log_config.py": {d.RETENTION_MAX, d.WAIT_TIMEOUT_MS_MAX},
    "cli/local.py": {d.RETENTION_MAX, d.LEASE_TTL_S_MAX, d.MAX_ACTIVE_PER_HOST_MAX},
    "dispatch/_deadletter.py": {d.DEAD_LETTER_PAGE_MAX},
    "cli/dispatch.py": {d.DEAD_LETTER_PAGE_MAX},
    "gateway/_deadletters.py": {d.DEAD_LETTER_PAGE_MAX},
}


def _is_literal(node: ast.expr | None) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool | type(None))


#: Literal ``IntRange`` bounds that are facts, not settings: 0, 1 and the largest TCP port.
FIXED_BOUNDS = (0, 1, 65535)


def _is_bound_literal(node: ast.expr) -> bool:
    return (_is_literal(node) and isinstance(node, ast.Constant)
            and node.value not in FIXED_BOUNDS)


def literal_fields(tree: ast.Module, cls: str, names: tuple[str, ...]) -> list[str]:
    """``cls``'s fields among ``names`` whose default or guarded bound is a literal."""
    found: list[str] = []
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and stmt.target.id in names):
                continue
            name = stmt.target.id
            seen.add(name)
            value = stmt.value
            if isinstance(value, ast.Call):
                kw = {k.arg: k.value for k in value.keywords}
                default = kw.get("default", value.args[0] if value.args else None)
                if _is_literal(default):
                    found.append(f"{cls}.{name} default")
                found += [f"{cls}.{name} {key}" for key in FIELD_BOUNDS.get(name, ())
                          if _is_literal(kw.get(key))]
            elif _is_literal(value):
                found.append(f"{cls}.{name} default")
    missing = set(names) - seen
    assert not missing, f"{cls} has no field {sorted(missing)}: update this test"
    return found


def literal_options(tree: ast.Module, function: str, options: tuple[str, ...]) -> list[str]:
    """Options of ``function`` among ``options`` with a literal default or range bound."""
    found: list[str] = []
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == function):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                    and deco.args[0].value in options):
                continue
            flag = str(deco.args[0].value)
            seen.add(flag)
            kw = {k.arg: k.value for k in deco.keywords}
            if _is_literal(kw.get("default")):
                found.append(f"{flag} default")
            kind = kw.get("type")
            if (isinstance(kind, ast.Call) and isinstance(kind.func, ast.Attribute)
                    and kind.func.attr == "IntRange"
                    and any(_is_bound_literal(a) for a in kind.args)):
                found.append(f"{flag} range")
    missing = set(options) - seen
    assert not missing, f"{function} has no option {sorted(missing)}: update this test"
    return found


def range_literals(tree: ast.Module, bounds: set[int]) -> list[str]:
    return [f"line {n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and type(n.value) is int and n.value in bounds]


def _tree(path: str) -> ast.Module:
    return ast.parse((PKG / path).read_text(), filename=path)


def test_no_shared_default_is_written_as_a_literal() -> None:
    found: list[str] = []
    for (path, cls), names in CLASS_FIELDS.items():
        found += [f"{path}: {hit}" for hit in literal_fields(_tree(path), cls, names)]
    for (path, function), options in CLICK_OPTIONS.items():
        found += [f"{path}: {function} {hit}"
                  for hit in literal_options(_tree(path), function, options)]
    for path, bounds in RANGE_LITERALS.items():
        found += [f"{path}: {hit}" for hit in range_literals(_tree(path), bounds)]
    assert not found, ("write these as the constants of svit_cluster.defaults: "
                       + "; ".join(found))


def test_the_source_check_finds_a_literal() -> None:
    """Negative control: each check reports a default typed again."""
    tree = ast.parse(
        "from pydantic import Field\n"
        "import click\n"
        "class ClusterSettings:\n"
        "    lease_ttl_s: int = Field(default=5, ge=LEASE_TTL_S_MIN)\n"
        "    max_events: int = Field(default=DEFAULT_MAX_EVENTS, ge=RETENTION_MIN, le=10)\n"
        "class ClusterSpec:\n"
        "    hosts: int = 3\n"
        "@click.option('--lease-ttl', default=5, type=click.IntRange(1, 300))\n"
        "def up(): ...\n"
        "LIMIT = 10_000_000\n")
    assert literal_fields(tree, "ClusterSettings", ("lease_ttl_s", "max_events")) == [
        "ClusterSettings.lease_ttl_s default", "ClusterSettings.max_events le"]
    assert literal_fields(tree, "ClusterSpec", ("hosts",)) == ["ClusterSpec.hosts default"]
    assert literal_options(tree, "up", ("--lease-ttl",)) == [
        "--lease-ttl default", "--lease-ttl range"]
    assert range_literals(tree, {d.RETENTION_MAX}) == ["line 10: 10000000"]


def test_every_constant_is_exported_and_documented() -> None:
    names = [n for n in vars(d) if n.isupper() and not n.startswith("_")]
    assert sorted(names) == sorted(d.__all__)
    source = (PKG / "defaults.py").read_text()
    for name in names:
        line = next(i for i, text in enumerate(source.splitlines())
                    if text.startswith(f"{name} ="))
        assert source.splitlines()[line - 1].startswith("#:"), f"{name} has no #: comment"
