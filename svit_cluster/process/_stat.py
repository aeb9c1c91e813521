"""The ``stat`` facts record of a committed process node (the reference's shape).

``stat(path)`` describes one node so a caller can weigh a read before making
it. The record has the reference's fields:

* ``kind``: ``"directory"`` for a map or an array, ``"leaf"`` otherwise;
* ``access``: ``"read-write"`` for ``/memory``, paths below it and
  ``/lib/<name>`` (what ``write`` and ``remove`` accept), ``"read"`` for the
  rest of the namespace;
* ``locality``: ``"cache"``: committed state is resident in the owner's
  process root (its durable copy is the commit log), so a read costs no I/O;
* ``facts``: ``{content: "object" | "array", entries}`` for directories,
  ``{content: "text/plain", bytes}`` for strings (UTF-8 bytes),
  ``{content: "svit-script", bytes}`` for scripts (source bytes),
  ``{content: "scalar"}`` for null, booleans and numbers;
* ``attached``: ``true``; ``mount``: ``null``; ``source``: ``"process"``
  (mounts do not exist yet, so every node is committed process state);
* ``path``: the path asked for; ``hash``: the node's structural hash (hex).
"""

from __future__ import annotations

from svit_cluster.process._tree import ArrayNode, MapNode, Node, ScalarNode, ScriptNode
from svit_cluster.values import Value

__all__ = ["stat_record"]


def _writable(path: str) -> bool:
    return path == "/memory" or path.startswith("/memory/") or path.startswith("/lib/")


def stat_record(path: str, node: Node) -> dict[str, Value]:
    """The facts record of ``node`` found at ``path`` (see the module docstring)."""
    facts: dict[str, Value]
    if isinstance(node, MapNode):
        kind = "directory"
        facts = {"content": "object", "entries": len(node)}
    elif isinstance(node, ArrayNode):
        kind = "directory"
        facts = {"content": "array", "entries": len(node.items)}
    elif isinstance(node, ScriptNode):
        kind = "leaf"
        facts = {"bytes": len(node.script.source.encode("utf-8")), "content": "svit-script"}
    elif isinstance(node, ScalarNode) and node.kind == "string":
        kind = "leaf"
        facts = {"bytes": node.text, "content": "text/plain"}
    else:
        kind = "leaf"
        facts = {"content": "scalar"}
    return {
        "access": "read-write" if _writable(path) else "read",
        "attached": True,
        "facts": facts,
        "hash": node.hex,
        "kind": kind,
        "locality": "cache",
        "mount": None,
        "path": path,
        "source": "process",
    }
