"""Every `svit-cluster …` invocation the chart renders parses with the real CLI.

For the default values and every values file under helm/svit-cluster/ci/, the
chart is rendered with `helm template`; for every container (Deployments,
StatefulSets, hook Pods, RayCluster groups) the command + args and each exec
probe are turned into `svit-cluster` argument lists, which are parsed by the
real click command object (``make_context`` with ``resilient_parsing=False``).
A usage error (unknown option, missing required option, bad value, no command)
fails the test, so the chart and the CLI cannot drift apart.

Containers run ``tini -- svit-node ROLE``; the ``exec svit-cluster …`` line of
that role is read from deploy/svit-node.sh, with ``${VAR:-default}`` expanded
from the container's environment. Options read from environment variables
(``--host-id`` from SVIT_HOST_ID, ``--token`` from SVIT_TOKEN) see the
container's environment: literal values, the ConfigMap behind ``envFrom``, and a
placeholder for ``valueFrom`` (field or Secret references).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from svit_cluster.cli import cli

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
SVIT_NODE = REPO / "deploy" / "svit-node.sh"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
VALUES_CASES = [None, *CI_VALUES]
VALUES_IDS = ["default", *(p.stem for p in CI_VALUES)]

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def parse_cli(argv: list[str], env: dict[str, str]) -> list[str]:
    """Parse ``svit-cluster ARGV`` down to the leaf command; return the command path.

    Raises:
        click.UsageError: unknown command or option, missing or bad value.
        AssertionError: the arguments end at a group, or ask for --help/--version.
    """
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        cmd: click.Command = cli
        name, args, parent = "svit-cluster", list(argv), None
        path = []
        while True:
            try:
                ctx = cmd.make_context(name, args, parent=parent, resilient_parsing=False)
            except click.exceptions.Exit as exc:  # --help, --version: not a real run
                raise AssertionError(f"{argv} exits early (code {exc.exit_code})") from exc
            if not isinstance(cmd, click.Group):
                return path
            rest = [*ctx._protected_args, *ctx.args]
            sub_name, sub, rest = cmd.resolve_command(ctx, rest)
            assert sub is not None and sub_name is not None
            path.append(sub_name)
            cmd, name, args, parent = sub, sub_name, rest, ctx
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _svit_node_roles() -> dict[str, list[str] | None]:
    """role -> the `exec svit-cluster …` words of that role in svit-node.sh (None: none)."""
    roles: dict[str, list[str] | None] = {}
    current: str | None = None
    for line in SVIT_NODE.read_text().splitlines():
        arm = re.fullmatch(r"\s{4}([a-z][a-z-]*)\)", line)
        if arm:
            current = arm.group(1)
            roles[current] = None
            continue
        m = re.match(r"\s+exec svit-cluster (.*)$", line)
        if m and current is not None:
            roles[current] = shlex.split(m.group(1))
    assert {"host", "gateway", "ray-head"} <= roles.keys(), roles
    return roles


def _expand(word: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        return env.get(m.group(1), m.group(2) or "")

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}", sub, word)


def _invocations(argv: list[str], env: dict[str, str]) -> Iterator[list[str]]:
    """The `svit-cluster` argument lists that running ARGV executes."""
    if argv and Path(argv[0]).name == "tini":
        argv = argv[argv.index("--") + 1:] if "--" in argv else argv[1:]
    if not argv:
        return
    prog = Path(argv[0]).name
    if prog == "svit-cluster":
        yield argv[1:]
    elif prog == "svit-node":
        roles = _svit_node_roles()
        role = argv[1] if len(argv) > 1 else ""
        assert role in roles, f"svit-node has no role {role!r} (roles: {sorted(roles)})"
        words = roles[role]
        if words is not None:
            yield [_expand(w, env) for w in words]
    elif prog in ("sh", "bash") and "-c" in argv:
        words = shlex.split(argv[argv.index("-c") + 1])
        for i, w in enumerate(words):
            if Path(w).name == "svit-cluster":
                tail = []
                for t in words[i + 1:]:
                    if t in ("|", "||", "&&", ";"):
                        break
                    tail.append(t)
                yield tail


def _containers(manifests: list[Manifest]) -> Iterator[tuple[str, dict[str, Any]]]:
    for m in manifests:
        owner = f"{m['kind']}/{m['metadata']['name']}"
        specs: list[dict[str, Any]] = []
        if m["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            specs = [m["spec"]["template"]["spec"]]
        elif m["kind"] == "Pod":
            specs = [m["spec"]]
        elif m["kind"] == "RayCluster":
            specs = [m["spec"]["headGroupSpec"]["template"]["spec"]] + [
                g["template"]["spec"] for g in m["spec"]["workerGroupSpecs"]
            ]
        for spec in specs:
            for c in spec.get("initContainers", []) + spec["containers"]:
                yield f"{owner}/{c['name']}", c


def _container_env(container: dict[str, Any], manifests: list[Manifest]) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    config_maps = {m["metadata"]["name"]: m.get("data") or {}
                   for m in manifests if m["kind"] == "ConfigMap"}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            env.update(config_maps[source["configMapRef"]["name"]])
    for var in container.get("env") or []:
        env[var["name"]] = var.get("value", f"<from {sorted(var.get('valueFrom', {}))}>")
    return env


def chart_invocations(manifests: list[Manifest]) -> list[tuple[str, list[str], dict[str, str]]]:
    """(where, svit-cluster argv, env) for every command, args list and exec probe."""
    found = []
    for where, c in _containers(manifests):
        env = _container_env(c, manifests)
        main = [*c.get("command", []), *c.get("args", [])]
        for argv in _invocations(main, env):
            found.append((f"{where} command", argv, env))
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            exec_ = (c.get(probe) or {}).get("exec")
            if exec_:
                for argv in _invocations(exec_["command"], env):
                    found.append((f"{where} {probe}", argv, env))
    return found


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_every_chart_cli_invocation_parses(render: Render, values: Path | None) -> None:
    invocations = chart_invocations(render(values))
    errors = []
    for where, argv, env in invocations:
        try:
            parse_cli(argv, env)
        except (click.UsageError, AssertionError) as exc:
            errors.append(f"{where}: svit-cluster {shlex.join(argv)}\n    {exc}")
    assert not errors, "chart invocations the CLI rejects:\n" + "\n".join(errors)
    commands = {tuple(parse_cli(argv, env)) for _, argv, env in invocations}
    # The walk found the chart's svit components (a parser that sees nothing passes nothing).
    assert ("gateway",) in commands and ("host-agent",) in commands, commands


def test_every_chart_cli_invocation_parses_guard(render: Render) -> None:
    """Negative control: the parser rejects what click rejects, with the chart's env."""
    manifests = render()
    invocations = chart_invocations(manifests)
    assert any(a[:1] == ["healthcheck"] for _, a, _ in invocations)
    env = invocations[0][2]
    with pytest.raises(click.NoSuchOption):
        parse_cli(["healthcheck", "--agent"], env)
    with pytest.raises(click.MissingParameter):
        parse_cli(["host-agent"], {})  # no SVIT_HOST_ID in the environment
    with pytest.raises(click.UsageError):
        parse_cli(["no-such-command"], env)
    with pytest.raises(click.UsageError):
        parse_cli(["dispatcher"], env)  # a group without its command
