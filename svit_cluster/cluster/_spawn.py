"""The ``spawn`` port on the cluster: a child is a process of its own.

:class:`RaySpawner` forks the parent's last committed state into the child id
and creates the child through the normal create path (the host agent's
``activate`` with a fork snapshot: etcd ownership, a Redis fence, the child's
own commit log), exactly like ``POST /processes/{id}/fork``. It then runs one
child activation through the child's owner as an svit-control@1 request whose
``request_id`` comes from the parent call's idempotency key (which covers the
spawn input), so a retried parent activation of the same request finds the
same child (``conflict`` on create: it already exists) and gets the same
receipt instead of a second child activation.

Since the child has its own ownership record and log, any host can serve it
later (after its owner dies, the next request places it elsewhere).
"""

from __future__ import annotations

from typing import Any

from svit_cluster import tracing
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import CreateSpec, Outcome
from svit_cluster.control import decode_request, decode_response
from svit_cluster.errors import ErrorCode, ScriptFailed, UnavailableError
from svit_cluster.process import encode_value
from svit_cluster.values import Value

__all__ = ["RaySpawner"]

_CLIENT_ID = "svit-port-spawn"


class RaySpawner:
    """:class:`~svit_cluster.ports.Spawner` over the cluster's host agents.

    Args:
        config: the cluster configuration (namespace, call timeout).
        agent_name: the Ray name of the host agent that creates the child
            (the parent's host; ownership then follows the normal rules).
    """

    def __init__(self, config: ClusterConfig, agent_name: str) -> None:
        self.cfg = config
        self.agent_name = agent_name

    def _get(self, ref: Any, what: str, timeout_s: float = 90.0) -> Any:
        import ray

        try:
            result = ray.get(ref, timeout=timeout_s)
        except Exception as exc:  # Ray errors: the outcome is unknown; the key makes retry safe
            raise UnavailableError(f"spawn: {what} did not answer ({type(exc).__name__})"
                                   ) from exc
        return result

    def spawn(self, parent: Any, child: str, script: str, input: Value,
              request_id: str) -> dict[str, Value]:
        """Fork ``parent`` into ``child`` (or find it), then run ``script`` once there.

        Raises:
            UnavailableError: an agent or actor did not answer.
            ScriptFailed: the child could not be created, or its activation was
                rejected (the message carries the child's error code).
        """
        import ray

        agent = ray.get_actor(self.agent_name, namespace=self.cfg.namespace)
        snapshot = parent.fork(child).snapshot()
        placed: Outcome[Any] = self._get(
            agent.activate.remote(child, CreateSpec(snapshot=snapshot)), "create")
        if placed.code == ErrorCode.CONFLICT:
            placed = self._get(agent.activate.remote(child, None), "activate")  # a retry
        activated = placed.unwrap()
        actor, token = activated.actor, activated.token
        if not actor or type(token) is not int:
            raise UnavailableError(f"spawn: {child} has no serving actor yet; retry")
        handle = ray.get_actor(str(actor), namespace=self.cfg.namespace)
        info = self._get(handle.info.remote(), "child info", self.cfg.call_timeout_s)
        if info.get("token") != token:
            raise UnavailableError(f"spawn: {child}'s owner moved meanwhile; retry")
        body = {
            "protocol": "svit-control@1", "client_id": _CLIENT_ID,
            "request_id": request_id[-128:], "process_id": child,
            "expected_version": int(info.get("version") or 0),
            "command": {"operation": "activate", "script": script,
                        "input": encode_value(input)},
        }
        request = decode_request(body)
        answered: Outcome[Any] = self._get(
            handle.control.remote(token, request.model_dump_json().encode(), "",
                                  tracing.current_traceparent()), "child activation",
            self.cfg.call_timeout_s)
        outcome = decode_response(answered.unwrap().body).outcome
        if outcome.status == "committed":
            act = outcome.activation
            return {"output": act.output, "version": act.version}
        if outcome.status == "conflict":
            raise ScriptFailed(f"child {child} changed under the spawn; retry")
        raise ScriptFailed(f"child {child} rejected the activation: {outcome.failure.code}: "
                           f"{outcome.failure.message}")
