"""A working copy: staged mutations over a persistent root, and the commit shapes.

Host operations and activations both stage their changes in a
:class:`WorkingCopy`, then seal them into one :class:`Transition` (a new root,
its ``svit-cluster-transaction@1`` record and the :class:`Change`). Nothing is visible
until the owning :class:`~svit_cluster.process.Process` applies the transition,
so a failure anywhere leaves the process unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded
from svit_cluster.mounts import MOUNT_OPS, split_mount_path
from svit_cluster.process._transaction import Mutation, Transaction
from svit_cluster.process._tree import (
    ArrayNode,
    Node,
    ScriptNode,
    get_node,
    node_from_value,
    remove_node,
    set_node,
)
from svit_cluster.values import (
    Limits,
    Path,
    Script,
    Value,
    format_path,
    is_guest_writable,
    parse_path,
    utf8_len,
    validate_script_name,
)

__all__ = ["Change", "Transition", "WorkingCopy", "apply_mutation", "script_from_value"]


@dataclass(frozen=True, slots=True)
class Change:
    """What one commit changed (events reference: ``Committed(Change)``).

    Attributes:
        version: the process version after the commit.
        paths: sorted paths the commit's mutations touched (written, removed,
            appended to), even when the content ended up equal (reference:
            process.rs change paths are the touched paths).
        hashes: hex content hash for every touched path *and each ancestor up to*
            ``"/"``; ``None`` for a removed path. No values: a Change is an
            invalidation, not a payload.
    """

    version: int
    paths: tuple[str, ...]
    hashes: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))

    def touches(self, path: str) -> bool:
        """Whether this commit may have changed what ``path`` shows.

        True when ``path`` is a touched path, lies below one (its subtree), or is
        an ancestor of one (its listing or hash changed), ``"/"`` included; false
        for siblings and unrelated subtrees (reference: process.rs ``Change``
        covers the touched node, its subtree and every ancestor). Paths are
        compared segment by segment, so ``/memory/a`` does not touch ``/memory/ab``.
        """
        target = tuple(s for s in path.split("/") if s)
        for touched in self.paths:
            seg = tuple(s for s in touched.split("/") if s)
            n = min(len(seg), len(target))
            if seg[:n] == target[:n]:
                return True
        return False


@dataclass(frozen=True, slots=True)
class Transition:
    """A sealed, not yet applied commit: new root, record, change."""

    root: Node
    record: Transaction
    change: Change


def script_from_value(value: Value, limits: Limits) -> Script:
    """Accept a :class:`Script`, or a map ``{source, documentation?}`` of strings.

    Raises:
        InvalidInput: (``invalid_value``) any other shape, or text that is not
            valid Unicode.
        LimitExceeded: the source exceeds ``max_script_bytes``, or source and
            documentation together exceed ``max_text_bytes``.
    """
    if isinstance(value, Script):
        script = value
    elif isinstance(value, dict) and set(value) <= {"source", "documentation"}:
        src = value.get("source")
        doc = value.get("documentation")
        if type(src) is not str or (doc is not None and type(doc) is not str):
            raise InvalidInput(
                "a script needs a string source and optional string documentation",
                code=ErrorCode.INVALID_VALUE,
            )
        script = Script(src, doc)
    else:
        raise InvalidInput(
            "/lib/<name> holds only script records {source, documentation}",
            code=ErrorCode.INVALID_VALUE,
        )
    source_bytes = utf8_len(script.source)
    doc_bytes = 0 if script.documentation is None else utf8_len(script.documentation)
    if source_bytes > limits.max_script_bytes:
        raise LimitExceeded("script source exceeds max_script_bytes")
    if source_bytes + doc_bytes > limits.max_text_bytes:
        raise LimitExceeded("script text exceeds max_text_bytes")
    return script


def _value_node(path: Path, value: Value, limits: Limits) -> Node:
    if path[0] == "lib":
        return ScriptNode(script_from_value(value, limits))
    if path == ("memory",) and type(value) is not dict:
        # Decision (docs/conformance.md): /memory itself may be written, as in the
        # reference, but it stays a map, as every part of this host assumes.
        raise InvalidInput("/memory must be a map", code=ErrorCode.INVALID_VALUE)
    # /memory is one persistent value (as in the reference): its nodes may sit at
    # most max_value_depth below /memory, so a value written at /memory/a/b
    # (depth 2) may itself nest at most max_value_depth - 2 more levels. This
    # also bounds the depth of the whole tree, so snapshots always restore.
    return node_from_value(
        value,
        max_depth=limits.max_value_depth - (len(path) - 1),
        max_entries=limits.max_value_entries,
        max_text_bytes=limits.max_text_bytes,
    )


def apply_mutation(root: Node, mut: Mutation, limits: Limits) -> Node:
    """Apply one recorded mutation to ``root`` (used by replay; never runs guest code).

    ``set`` and ``remove`` follow the write rules of :meth:`WorkingCopy.write`
    (only below ``/memory`` and at ``/lib/<name>``); ``append`` and
    ``remove_front`` need an array at ``path``.

    Raises:
        InvalidInput: the mutation does not apply (bad or unwritable path,
            missing parent, ``remove_front`` on an empty array, unknown op).
        LimitExceeded: the value exceeds the value limits.
    """
    path = parse_path(mut.path)
    if mut.op in MOUNT_OPS:
        _check_mount_op(path, mut)
        return root
    if mut.op in ("set", "remove") and not _host_managed(path):
        _check_writable(path, mut.path, removing=mut.op == "remove")
    if mut.op == "set":
        return set_node(root, path, _value_node(path, mut.value, limits), allow_append=True)
    if mut.op == "remove":
        return remove_node(root, path)
    if mut.op not in ("append", "remove_front"):
        raise InvalidInput(f"unknown mutation {str(mut.op)[:32]!r}", code=ErrorCode.INVALID_VALUE)
    target = get_node(root, path)
    if not isinstance(target, ArrayNode):
        raise InvalidInput(
            f"{mut.op} needs an array at {mut.path[:200]}", code=ErrorCode.INVALID_PATH
        )
    if mut.op == "append":
        node = node_from_value(
            mut.value,
            max_depth=limits.max_value_depth,
            max_entries=limits.max_value_entries,
            max_text_bytes=limits.max_text_bytes,
        )
        return set_node(root, path, ArrayNode((*target.items, node)))
    if not target.items:
        raise InvalidInput(f"remove_front on empty {mut.path[:200]}", code=ErrorCode.INVALID_PATH)
    return set_node(root, path, ArrayNode(target.items[1:]))


def _check_mount_op(path: Path, mut: Mutation) -> None:
    """A recorded mount write names ``/mounts/<name>/<at least one segment>``
    (and ``mount_write`` carries a value); it leaves the root unchanged."""
    if len(path) < 3 or path[0] != "mounts":
        raise InvalidInput(f"{mut.op} needs a path below /mounts/<name>, not {mut.path[:200]}",
                           code=ErrorCode.INVALID_PATH)
    split_mount_path(path)


def _host_managed(path: Path) -> bool:
    """Paths only the host writes (``/thread/...``, ``/ports/...``,
    ``/mounts/<name>`` descriptors, ``/system/timers`` and below): allowed in
    records, never to guests."""
    return ((len(path) >= 2 and path[0] in ("thread", "ports"))
            or (len(path) == 2 and path[0] == "mounts")
            or path[:2] == ("system", "timers"))


def _check_writable(path: Path, text: str, *, removing: bool) -> None:
    if not is_guest_writable(path) or (removing and path == ("memory",)):
        raise InvalidInput(
            f"{text[:200]} is not writable: only /memory (write), below /memory "
            "and /lib/<name>",
            code=ErrorCode.INVALID_PATH,
        )
    if path[0] == "lib":
        validate_script_name(path[1])


class WorkingCopy:
    """Staged changes over an immutable base root.

    Every method validates first and raises without staging anything, so a
    failed call leaves the working copy as it was.
    """

    __slots__ = ("base", "limits", "mutations", "root", "touched")

    def __init__(self, root: Node, limits: Limits) -> None:
        self.base = root
        self.root = root
        self.limits = limits
        self.mutations: list[Mutation] = []
        self.touched: set[str] = set()

    # -- guest and host writes -------------------------------------------------

    def write(self, path_text: str, value: Value) -> Path:
        """Stage ``set path value`` under the guest write rules (``/memory``, ``/lib/<name>``).

        Raises:
            InvalidInput: (``invalid_path``) not writable, parent missing, or an
                array index that does not exist (no append past the end);
                (``invalid_script_name``) bad ``/lib`` name; (``invalid_value``)
                a bad value, a value bound, or a non-map at ``/memory``.
            LimitExceeded: tree bounds.
        """
        path = parse_path(path_text)
        _check_writable(path, path_text, removing=False)
        node = _value_node(path, value, self.limits)
        if isinstance(node, ScriptNode):
            value = node.script
        self._stage(set_node(self.root, path, node), Mutation("set", path_text, value))
        return path

    def remove(self, path_text: str) -> Path:
        """Stage ``remove path``. Removing a missing key is an error.

        Raises:
            InvalidInput: (``invalid_path``) not writable (e.g. ``/memory``
                itself), or nothing at ``path`` (reference: a missing removal
                target is ``invalid_path``).
        """
        path = parse_path(path_text)
        _check_writable(path, path_text, removing=True)
        self._stage(remove_node(self.root, path), Mutation("remove", path_text))
        return path

    def append(self, path_text: str, value: Value) -> None:
        """Stage ``append`` to the array at ``path`` (host-only: inbox, outbox, timers)."""
        mut = Mutation("append", path_text, value)
        self._stage(apply_mutation(self.root, mut, self.limits), mut)

    def host_set(self, path_text: str, value: Value) -> None:
        """Stage ``set`` on a host-managed path (``/thread``, ``/system/timers``),
        bypassing guest write rules."""
        mut = Mutation("set", path_text, value)
        self._stage(apply_mutation(self.root, mut, self.limits), mut)

    def host_remove(self, path_text: str) -> None:
        """Stage ``remove`` on a host-managed path (``/thread``, ``/system/timers/<i>``)."""
        mut = Mutation("remove", path_text)
        self._stage(apply_mutation(self.root, mut, self.limits), mut)

    def mount_op(self, op: str, path_text: str, value: Value = None) -> None:
        """Record ``mount_write`` (``value``) or ``mount_remove`` below ``/mounts/<name>``.

        The root is unchanged: the caller checked the write against the
        attached mount (``MountRegistry.check_write``); the owner applies it
        to the mount after the commit.
        """
        mut = Mutation(op, path_text, value if op == "mount_write" else None)
        self._stage(apply_mutation(self.root, mut, self.limits), mut)

    def remove_front(self, path_text: str) -> None:
        """Stage ``remove_front`` of the array at ``path`` (host-only: inbox acknowledge)."""
        mut = Mutation("remove_front", path_text)
        self._stage(apply_mutation(self.root, mut, self.limits), mut)

    def _stage(self, new_root: Node, mut: Mutation) -> None:
        if new_root.size > self.limits.max_tree_nodes:
            raise LimitExceeded("process tree exceeds max_tree_nodes")
        if new_root.text > self.limits.max_tree_text_bytes:
            raise LimitExceeded("process tree exceeds max_tree_text_bytes")
        self.root = new_root
        self.mutations.append(mut)
        self.touched.add(mut.path)

    # -- sealing ---------------------------------------------------------------

    def change(self, version: int) -> Change:
        """The :class:`Change` of the staged mutations: every touched path, sorted.

        A path written with the value it already had is still reported, as the
        reference reports the touched paths of a transition, not a diff.
        """
        new = self.root
        changed = sorted(self.touched)
        hashes: dict[str, str | None] = {}
        for text in changed:
            path = parse_path(text)
            for k in range(len(path), -1, -1):
                key = format_path(path[:k])
                if key in hashes:
                    break
                if k > 2 and path[0] == "mounts":
                    # Mounted content has no committed content hash: the
                    # source lives outside the process (events reference).
                    hashes[key] = None
                    continue
                node = get_node(new, path[:k])
                hashes[key] = node.hex if node is not None else None
        return Change(version, tuple(changed), MappingProxyType(hashes))

    def seal(
        self,
        *,
        address: str,
        position: int,
        previous_hash: str,
        version_before: int,
        source: str,
    ) -> Transition:
        """Seal the staged mutations into one :class:`Transition` (version + 1)."""
        record = Transaction.seal(
            address=address,
            position=position,
            previous_hash=previous_hash,
            version_before=version_before,
            mutations=tuple(self.mutations),
            touched_paths=tuple(sorted(self.touched)),
            source=source,
            resulting_root_hash=self.root.hex,
        )
        return Transition(self.root, record, self.change(version_before + 1))

