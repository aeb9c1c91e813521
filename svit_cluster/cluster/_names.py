"""Ray names of the cluster's actors: one host agent per host, fresh process actors.

Every module that looks an actor up by name (the router, placement, the spawn
port, bootstrap) imports these from here, below the agent that creates them.
"""

from __future__ import annotations

import uuid

__all__ = ["actor_name", "agent_name"]


def agent_name(host: str) -> str:
    """Ray name of host ``host``'s agent."""
    return f"agent:{host}"


def actor_name(host: str) -> str:
    """A fresh, never reused Ray name for a process actor on ``host``."""
    return f"svit:{host}:{uuid.uuid4().hex}"
