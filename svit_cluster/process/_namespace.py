"""The root namespace: initial contents and structural validation."""

from __future__ import annotations

from typing import Any

from svit_cluster.errors import ErrorCode, InvalidInput, SvitError
from svit_cluster.lisp import compile_script
from svit_cluster.mounts import check_mounts_value
from svit_cluster.process._transaction import LEGACY_TRANSACTION_FORMAT, TRANSACTION_FORMAT
from svit_cluster.process._tree import (
    EMPTY_MAP,
    ArrayNode,
    MapNode,
    Node,
    ScalarNode,
    ScriptNode,
    get_node,
    node_from_value,
    value_from_node,
)
from svit_cluster.values import (
    MAX_DELAY_MS,
    ROOT_KEYS,
    Limits,
    Script,
    Value,
    decode_value,
    script_json,
    validate_address,
    validate_process_id,
    validate_script_name,
)

__all__ = [
    "DELAYED_INTENT_FIELDS",
    "INTENT_FIELDS",
    "LANGUAGE",
    "MAX_PENDING_TIMERS",
    "MAX_VERSION",
    "OUTBOX_WINDOW",
    "PORT_DESCRIPTOR_FIELDS",
    "PROTOCOL",
    "RESERVED_ROOTS",
    "SNAPSHOT_FORMAT",
    "TIMER_FIELDS",
    "build_root",
    "check_script",
    "decode_root",
    "encode_node",
    "validate_root",
    "with_system",
]

LANGUAGE = "svit-lisp@2"
SNAPSHOT_FORMAT = "svit-snapshot@1"
PROTOCOL = "svit-control@1"

#: Highest process version. Versions are signed 64-bit here (they travel as
#: integer values and as Redis/JSON numbers); the reference's u64 range is
#: halved on purpose (docs/conformance.md). A commit past it is refused with
#: ``resource_limit_exceeded``, like the reference's version overflow.
MAX_VERSION = 2**63 - 1

#: The fields of one ``/system/outbox`` intent (stamped by the activation), as
#: the reference names them.
INTENT_FIELDS = frozenset({"message_id", "to", "body"})

#: The fields of a delayed intent (``send!`` with ``{"delay_ms" N}``): an
#: intent plus ``delay_ms`` (0..:data:`~svit_cluster.values.MAX_DELAY_MS`) and
#: ``due_ms`` (the host's wall clock at the activation, ms since the epoch,
#: plus ``delay_ms``). Delayed intents go beyond the reference, which has no
#: timers (docs/conformance.md D10).
DELAYED_INTENT_FIELDS = INTENT_FIELDS | {"delay_ms", "due_ms"}

#: The fields of one ``/system/timers`` entry: the timer id (its intent's
#: ``message_id``), destination and due time; never the body.
TIMER_FIELDS = frozenset({"id", "to", "due_ms"})

#: Pending timers one process may hold in ``/system/timers``; a delayed
#: ``send!`` that would hold more fails its activation with
#: ``resource_limit_exceeded``. The list is the guest's view of what it has
#: pending (docs/conformance.md D10): an entry leaves it at the first
#: activation whose timestamp reaches its ``due_ms`` (fired or firing, as far
#: as the guest can know) or that cancels it.
MAX_PENDING_TIMERS = 1000

#: Intents ``/system/outbox`` keeps: the newest ones, committed in the window
#: of the activations that sent them (docs/conformance.md D9). The outbox
#: stream in the store, written by the same commit, is what the dispatcher
#: delivers from, so an intent that leaves the window is neither lost nor
#: undelivered; its delivery status and the log keep its record. The window
#: bounds the state (and every snapshot) of a process that sends forever,
#: and keeps an append O(window), not O(intents ever sent).
OUTBOX_WINDOW = 256

#: The fields of an intent committed before ``id`` became ``message_id``; restore
#: still accepts them (those processes exist in logs written by older versions).
_LEGACY_INTENT_FIELDS = frozenset({"id", "to", "body"})

#: Root sections reserved for features this host does not have; they stay empty.
#: (``/mounts`` holds mount descriptors: :func:`svit_cluster.mounts.check_mounts_value`.)
RESERVED_ROOTS = ("children", "tasks")

#: The fields of one ``/ports/<name>`` descriptor (reference: docs/ports.md,
#: "Registry and catalog"). The catalog is descriptive only: the host installs
#: its own on every restore, and dispatch never consults it.
PORT_DESCRIPTOR_FIELDS = frozenset(
    {"name", "version", "description", "input_schema", "output", "effect", "limits"}
)

#: Ports one catalog may describe.
MAX_PORTS = 64

#: ``/system`` keys whose content is per process (checked by shape, not equality).
_SYSTEM_PER_PROCESS = frozenset({"lineage", "outbox", "timers"})

#: ``/system`` keys a root may lack: a process created before the key existed
#: keeps its root (and hash) until its first timer adds ``/system/timers``.
_SYSTEM_OPTIONAL = frozenset({"timers"})


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
        "timers": [],
    }


def build_root(
    process_id: str,
    limits: Limits,
    *,
    memory: Value = None,
    scripts: dict[str, Script] | None = None,
    parent: str | None = None,
    mounts: dict[str, Value] | None = None,
) -> MapNode:
    """Build a fresh root map.

    Args:
        process_id: a valid ``svit://`` id.
        limits: validated limits, recorded under ``/system/limits``.
        memory: initial ``/memory`` map (plain values) or None for empty.
        scripts: initial ``/lib`` entries.
        parent: lineage parent id (set by fork).
        mounts: ``/mounts``: name -> descriptor record (``{access, kind,
            locality, source}``).

    ``/system/identity/authenticated`` is always false: the address in process
    metadata is never a credential (reference: process.rs identity).

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
    system = node_from_value(_system(process_id, limits, False, parent))
    items: dict[str, Node] = {key: EMPTY_MAP for key in ROOT_KEYS}
    items.update(
        memory=mem,
        lib=MapNode.from_items(lib),
        inbox=ArrayNode(()),
        system=system,
    )
    if mounts:
        items["mounts"] = node_from_value(dict(mounts))
    return MapNode.from_items(items)


def with_system(root: MapNode, process_id: str, limits: Limits, parent: str | None) -> MapNode:
    """Return ``root`` with a fresh ``/system`` for a fork (new identity, empty
    outbox, no pending timers: the parent's timers fire for the parent)."""
    system = node_from_value(_system(process_id, limits, False, parent))
    return root.with_key("system", system)


def check_script(name: str, script: Script, limits: Limits) -> None:
    """Compile ``script`` as ``/lib/<name>`` would run (reference: scripts compile on write).

    Raises:
        ScriptFailed: (``script_failed``) a syntax error or malformed form.
        LimitExceeded: (``resource_limit_exceeded``) script bytes, syntax depth,
            integer bits.
    """
    compile_script(script.source, name=name, limits=limits)


def _root_error(path: str, reason: str) -> InvalidInput:
    return InvalidInput(f"invalid root: {path}: {reason}", code=ErrorCode.INVALID_SNAPSHOT)


def validate_root(root: Node, process_id: str, limits: Limits) -> None:
    """Check a whole root against the namespace rules, once (restore, fork, import).

    The rules (reference: process.rs root validation):

    * the root is a map with exactly :data:`~svit_cluster.process.ROOT_KEYS`;
    * ``/memory`` and ``/thread`` are maps, ``/inbox`` is an array, and every
      reserved section (:data:`RESERVED_ROOTS`) is an empty map;
    * ``/mounts`` maps mount names to descriptors ``{access, kind, locality,
      source}`` (:func:`~svit_cluster.mounts.check_mounts_value`);
    * ``/ports`` is a port catalog: at most :data:`MAX_PORTS` entries, each a
      map with exactly :data:`PORT_DESCRIPTOR_FIELDS` whose ``name`` is its
      key (a catalog of another host is accepted here and replaced by the
      serving host's, see ``Process.ports_transition``);
    * ``/lib`` maps valid script names to scripts of at most
      ``max_script_bytes`` that compile;
    * ``/system`` has exactly its eight keys (or seven without ``timers``, a
      process created before timers existed); ``identity`` (this address, not
      authenticated), ``limits`` (these limits), ``runtime``, ``api`` and
      ``capabilities`` equal what this host generates;
    * ``/system/lineage`` is ``{parent}`` with a process id or null;
    * ``/system/runtime`` names this host's formats, or the legacy transaction
      format (:data:`~svit_cluster.process.LEGACY_TRANSACTION_FORMAT`) of a
      process created before the rename;
    * ``/system/outbox`` is an array of ``{message_id, to, body}`` maps (or the
      legacy ``{id, to, body}``) with a string id and a ``to`` that is a
      process id or an external address (:func:`~svit_cluster.process.validate_address`),
      or a delayed intent with :data:`DELAYED_INTENT_FIELDS`;
    * ``/system/timers`` is an array of at most :data:`MAX_PENDING_TIMERS`
      ``{id, to, due_ms}`` maps (string id, an address, an integer ``due_ms``
      of at least 0).

    Args:
        root: the root node.
        process_id: the id the root must carry.
        limits: the limits the root must record (and compile under).

    Raises:
        InvalidInput: (``invalid_snapshot``) the first violation; the message
            names the path and the reason.
    """
    if not isinstance(root, MapNode):
        raise _root_error("/", "the root must be a map")
    if set(root.keys()) != set(ROOT_KEYS):
        raise _root_error("/", "keys must be exactly " + ",".join(ROOT_KEYS))
    for key, kind in (("memory", MapNode), ("thread", MapNode), ("inbox", ArrayNode)):
        if not isinstance(root.get(key), kind):
            raise _root_error(f"/{key}", f"must be {'an array' if kind is ArrayNode else 'a map'}")
    for key in RESERVED_ROOTS:
        node = root.get(key)
        if not isinstance(node, MapNode) or len(node) != 0:
            raise _root_error(f"/{key}", "is reserved and must be an empty map")
    mounts = root.get("mounts")
    if not isinstance(mounts, MapNode):
        raise _root_error("/mounts", "must be a map")
    try:
        check_mounts_value(value_from_node(mounts))
    except SvitError as exc:
        raise _root_error("/mounts", exc.message) from None
    check_port_catalog(root.get("ports"))
    lib = root.get("lib")
    if not isinstance(lib, MapNode):
        raise _root_error("/lib", "must be a map")
    for name, entry in lib.items():
        try:
            validate_script_name(name)
        except InvalidInput:
            raise _root_error(f"/lib/{name[:64]}", "invalid script name") from None
        if not isinstance(entry, ScriptNode):
            raise _root_error(f"/lib/{name}", "is not a script")
        if len(entry.script.source.encode("utf-8")) > limits.max_script_bytes:
            raise _root_error(f"/lib/{name}", "exceeds max_script_bytes")
        try:
            check_script(name, entry.script, limits)
        except SvitError as exc:
            raise _root_error(f"/lib/{name}", f"does not compile: {exc.message}") from None
    system = root.get("system")
    if not isinstance(system, MapNode):
        raise _root_error("/system", "must be a map")
    generated = node_from_value(_system(process_id, limits, False, None))
    assert isinstance(generated, MapNode)
    if system.keys() != generated.keys() and set(system.keys()) != (
            set(generated.keys()) - _SYSTEM_OPTIONAL):
        raise _root_error("/system", "keys must be exactly " + ",".join(generated.keys()))
    legacy_runtime = node_from_value(
        {
            "language": LANGUAGE,
            "snapshot_format": SNAPSHOT_FORMAT,
            "transaction_format": LEGACY_TRANSACTION_FORMAT,
        }
    )
    for key, want in generated.items():
        if key in _SYSTEM_PER_PROCESS or key in _SYSTEM_OPTIONAL:
            continue
        got = system.get(key)
        accepted = {want.digest, legacy_runtime.digest} if key == "runtime" else {want.digest}
        if got is None or got.digest not in accepted:
            raise _root_error(f"/system/{key}", "does not match the generated process metadata")
    lineage = system.get("lineage")
    parent = lineage.get("parent") if isinstance(lineage, MapNode) else None
    if not isinstance(lineage, MapNode) or lineage.keys() != ["parent"] or parent is None:
        raise _root_error("/system/lineage", "must be exactly {parent}")
    if parent.kind != "null":
        if not isinstance(parent, ScalarNode) or parent.kind != "string":
            raise _root_error("/system/lineage/parent", "must be a process id or null")
        try:
            validate_process_id(parent.value)
        except InvalidInput:
            raise _root_error("/system/lineage/parent", "is not a process id") from None
    outbox = system.get("outbox")
    if not isinstance(outbox, ArrayNode):
        raise _root_error("/system/outbox", "must be an array")
    for i, intent in enumerate(outbox.items):
        where = f"/system/outbox/{i}"
        keys = set(intent.keys()) if isinstance(intent, MapNode) else set()
        if not isinstance(intent, MapNode) or keys not in (
                INTENT_FIELDS, DELAYED_INTENT_FIELDS, _LEGACY_INTENT_FIELDS):
            raise _root_error(where, "must be a map {" + ",".join(sorted(INTENT_FIELDS)) + "}")
        _check_id_and_address(intent, "message_id" if "message_id" in keys else "id", where)
        if "delay_ms" in keys:
            _check_ms(intent.get("delay_ms"), f"{where}/delay_ms", MAX_DELAY_MS)
            _check_ms(intent.get("due_ms"), f"{where}/due_ms", None)
    timers = system.get("timers")
    if timers is not None:
        _check_timers(timers)


def _check_id_and_address(entry: MapNode, id_key: str, where: str) -> None:
    """``entry[id_key]`` is a string and ``entry["to"]`` a valid address."""
    entry_id, to = entry.get(id_key), entry.get("to")
    if not isinstance(entry_id, ScalarNode) or entry_id.kind != "string":
        raise _root_error(f"{where}/{id_key}", "must be a string")
    if not isinstance(to, ScalarNode) or to.kind != "string":
        raise _root_error(f"{where}/to", "must be an address string")
    try:
        validate_address(to.value)
    except InvalidInput:
        raise _root_error(f"{where}/to", "is not a process id or external address") from None


def _check_ms(node: Node | None, where: str, most: int | None) -> None:
    value = node.value if isinstance(node, ScalarNode) and node.kind == "integer" else None
    if type(value) is not int or value < 0 or (most is not None and value > most):
        bound = "" if most is None else f" of at most {most}"
        raise _root_error(where, f"must be an integer of at least 0{bound}")


def _check_timers(timers: Node) -> None:
    """Check ``/system/timers`` (see :func:`validate_root`)."""
    if not isinstance(timers, ArrayNode):
        raise _root_error("/system/timers", "must be an array")
    if len(timers.items) > MAX_PENDING_TIMERS:
        raise _root_error("/system/timers", f"holds more than {MAX_PENDING_TIMERS} timers")
    for i, timer in enumerate(timers.items):
        where = f"/system/timers/{i}"
        if not isinstance(timer, MapNode) or set(timer.keys()) != TIMER_FIELDS:
            raise _root_error(where, "must be a map {" + ",".join(sorted(TIMER_FIELDS)) + "}")
        _check_id_and_address(timer, "id", where)
        _check_ms(timer.get("due_ms"), f"{where}/due_ms", None)


def check_port_catalog(node: Node | None) -> None:
    """Check the shape of a ``/ports`` catalog (see :func:`validate_root`).

    Raises:
        InvalidInput: (``invalid_snapshot``) not a map, too many ports, or a
            descriptor of the wrong shape; the message names the path.
    """
    if not isinstance(node, MapNode):
        raise _root_error("/ports", "must be a map")
    if len(node) > MAX_PORTS:
        raise _root_error("/ports", f"holds more than {MAX_PORTS} ports")
    for name, desc in node.items():
        where = f"/ports/{name[:64]}"
        if not name or "/" in name or not isinstance(desc, MapNode):
            raise _root_error(where, "must be a port descriptor map")
        if set(desc.keys()) != PORT_DESCRIPTOR_FIELDS:
            raise _root_error(where, "keys must be exactly "
                              + ",".join(sorted(PORT_DESCRIPTOR_FIELDS)))
        got = desc.get("name")
        if not isinstance(got, ScalarNode) or got.value != name:
            raise _root_error(f"{where}/name", "must equal the port's key")


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

    Decodes the tagged sections (value limits apply), then runs the one full
    check :func:`validate_root` (restore, fork and import all share it).

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
    if root.size > limits.max_tree_nodes or root.text > limits.max_tree_text_bytes:
        raise bad("tree exceeds max_tree_nodes or max_tree_text_bytes")
    validate_root(root, process_id, limits)
    return root
