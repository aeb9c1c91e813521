"""The root namespace: initial contents and structural validation (DESIGN.md §1)."""

from __future__ import annotations

from typing import Any

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.process._limits import Limits
from svit_cluster.process._paths import ROOT_KEYS, validate_process_id, validate_script_name
from svit_cluster.process._transaction import TRANSACTION_FORMAT
from svit_cluster.process._tree import (
    EMPTY_MAP,
    ArrayNode,
    MapNode,
    Node,
    ScalarNode,
    ScriptNode,
    get_node,
    node_from_value,
)
from svit_cluster.process._values import Script, Value, decode_value, script_json

__all__ = [
    "LANGUAGE",
    "PROTOCOL",
    "SNAPSHOT_FORMAT",
    "build_root",
    "decode_root",
    "encode_node",
    "with_system",
]

LANGUAGE = "svit-lisp@2"
SNAPSHOT_FORMAT = "svit-snapshot@1"
PROTOCOL = "svit-control@1"


def _system(process_id: str, limits: Limits, authenticated: bool, parent: str | None) -> Value:
    return {
        "identity": {"address": process_id, "authenticated": authenticated},
        "lineage": {"parent": parent},
        "limits": dict(limits.to_dict()),
        "runtime": {
            "language": LANGUAGE,
            "snapshot_format": SNAPSHOT_FORMAT,
            "transaction_format": TRANSACTION_FORMAT,
        },
        "api": {"control": PROTOCOL},
        "capabilities": [],
        "outbox": [],
    }


def build_root(
    process_id: str,
    limits: Limits,
    *,
    memory: Value = None,
    scripts: dict[str, Script] | None = None,
    authenticated: bool = False,
    parent: str | None = None,
) -> MapNode:
    """Build a fresh root map.

    Args:
        process_id: a valid ``svit://`` id.
        limits: validated limits, recorded under ``/system/limits``.
        memory: initial ``/memory`` map (plain values) or None for empty.
        scripts: initial ``/lib`` entries.
        authenticated: recorded in ``/system/identity``.
        parent: lineage parent id (set by fork).

    Raises:
        InvalidInput: a bad id, script name or memory value (not a map).
        LimitExceeded: memory exceeds the value limits.
    """
    validate_process_id(process_id)
    mem = node_from_value(
        {} if memory is None else memory,
        max_depth=limits.max_value_depth,
        max_entries=limits.max_value_entries,
        max_text_bytes=limits.max_text_bytes,
    )
    if not isinstance(mem, MapNode):
        raise InvalidInput("initial memory must be a map", code=ErrorCode.INVALID_VALUE)
    lib: dict[str, Node] = {}
    for name, script in (scripts or {}).items():
        validate_script_name(name)
        lib[name] = ScriptNode(script)
    system = node_from_value(_system(process_id, limits, authenticated, parent))
    items: dict[str, Node] = {key: EMPTY_MAP for key in ROOT_KEYS}
    items.update(
        memory=mem,
        lib=MapNode.from_items(lib),
        inbox=ArrayNode(()),
        system=system,
    )
    return MapNode.from_items(items)


def with_system(root: MapNode, process_id: str, limits: Limits, parent: str | None) -> MapNode:
    """Return ``root`` with a fresh ``/system`` for a fork (new identity, empty outbox)."""
    auth = get_node(root, ("system", "identity", "authenticated"))
    authenticated = isinstance(auth, ScalarNode) and auth.value is True
    system = node_from_value(_system(process_id, limits, authenticated, parent))
    return root.with_key("system", system)


def encode_node(node: Node) -> dict[str, Any]:
    """Tagged wire encoding of a node (same output as ``encode_value`` of its value)."""
    if isinstance(node, ScalarNode):
        if node.kind == "null":
            return {"type": "null"}
        return {"type": node.kind, "value": node.value}
    if isinstance(node, MapNode):
        return {"type": "map", "value": {k: encode_node(n) for k, n in node.items()}}
    if isinstance(node, ArrayNode):
        return {"type": "array", "value": [encode_node(n) for n in node.items]}
    assert isinstance(node, ScriptNode)
    return {"type": "script", "value": script_json(node.script)}


def decode_root(data: Any, process_id: str, limits: Limits) -> MapNode:
    """Decode and validate a tagged root map, as found in a snapshot.

    Checks the namespace shape: exactly the root keys; ``/memory``, ``/lib``,
    ``/thread`` and the reserved roots are maps; ``/inbox`` is an array; scripts
    appear only as ``/lib/<valid name>``; ``/system/identity/address`` equals
    ``process_id``; ``/system/outbox`` is an array. Value limits apply.

    Raises:
        InvalidInput: (``invalid_snapshot``) any structural violation.
        LimitExceeded: a value bound is exceeded.
    """
    def bad(msg: str) -> InvalidInput:
        return InvalidInput(f"invalid root: {msg}", code=ErrorCode.INVALID_SNAPSHOT)

    if type(data) is not dict or data.get("type") != "map" or type(data.get("value")) is not dict:
        raise bad("root must be a tagged map")
    sections = data["value"]
    if set(sections) != set(ROOT_KEYS) or len(data) != 2:
        raise bad("root keys must be exactly " + ",".join(ROOT_KEYS))
    items: dict[str, Node] = {}
    for key in ROOT_KEYS:
        raw = sections[key]
        if key == "lib":
            if (
                type(raw) is not dict
                or len(raw) != 2
                or raw.get("type") != "map"
                or type(raw.get("value")) is not dict
            ):
                raise bad("/lib must be a map")
            lib: dict[str, Node] = {}
            for name, entry in raw["value"].items():
                validate_script_name(name)
                script = decode_value(entry)
                if not isinstance(script, Script):
                    raise bad(f"/lib/{name} is not a script")
                if len(script.source.encode("utf-8")) > limits.max_script_bytes:
                    raise bad(f"/lib/{name} exceeds max_script_bytes")
                lib[name] = ScriptNode(script)
            items[key] = MapNode.from_items(lib)
            continue
        value = decode_value(
            raw,
            max_depth=limits.max_value_depth + 4,
            max_entries=max(limits.max_tree_nodes, 1),
            max_text_bytes=limits.max_tree_text_bytes,
        )
        node = node_from_value(
            value,
            max_depth=limits.max_value_depth + 4,
            max_entries=max(limits.max_tree_nodes, 1),
            max_text_bytes=limits.max_tree_text_bytes,
        )
        want_array = key == "inbox"
        if want_array != isinstance(node, ArrayNode) or not isinstance(node, ArrayNode | MapNode):
            raise bad(f"/{key} has the wrong kind")
        items[key] = node
    root = MapNode.from_items(items)
    address = get_node(root, ("system", "identity", "address"))
    if not isinstance(address, ScalarNode) or address.value != process_id:
        raise bad("/system/identity/address does not match the snapshot id")
    if not isinstance(get_node(root, ("system", "outbox")), ArrayNode):
        raise bad("/system/outbox must be an array")
    if root.size > limits.max_tree_nodes or root.text > limits.max_tree_text_bytes:
        raise bad("tree exceeds max_tree_nodes or max_tree_text_bytes")
    return root
