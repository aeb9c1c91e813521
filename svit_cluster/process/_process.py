"""The Svit process: versioned, hashed state with host operations.

A :class:`Process` is *not* thread-safe: one owner serializes calls (the
control protocol's controller does). Every state-changing call either commits
exactly one new version (``version + 1``) and returns its :class:`Change`, or
raises and leaves the process exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from svit_cluster.errors import (
    ConflictError,
    CorruptData,
    ErrorCode,
    InvalidInput,
    InvalidMount,
    LimitExceeded,
    SvitError,
)
from svit_cluster.mounts import (
    MountDescriptor,
    MountProvider,
    MountRegistry,
    validate_mount_name,
)
from svit_cluster.process._mounted import committed_mounts, mount_ops, mount_target
from svit_cluster.process._namespace import (
    MAX_VERSION,
    SNAPSHOT_FORMAT,
    build_root,
    check_port_catalog,
    check_script,
    decode_root,
    encode_node,
    validate_root,
    with_system,
)
from svit_cluster.process._stat import stat_record
from svit_cluster.process._transaction import GENESIS_HASH, Transaction
from svit_cluster.process._tree import (
    ArrayNode,
    MapNode,
    Node,
    ScriptNode,
    get_node,
    lookup_node,
    node_from_value,
    remove_node,
    value_from_node,
)
from svit_cluster.process._working import (
    Change,
    Transition,
    WorkingCopy,
    apply_mutation,
    script_from_value,
)
from svit_cluster.values import (
    Limits,
    Script,
    Value,
    canonical_json,
    parse_path,
    strict_json_loads,
    validate_process_id,
    values_equal,
)

__all__ = ["MAX_SNAPSHOT_BYTES", "Process"]

#: Restore refuses snapshots larger than this (128 MiB).
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024

_SNAPSHOT_FIELDS = frozenset({"format", "id", "version", "root", "root_hash", "limits"})


class Process:
    """One Svit process: id, version, hashed root, limits and transaction chain.

    Attributes (read-only properties):
        id: the ``svit://`` process id.
        version: starts at 0; every commit adds exactly 1.
        root_hash: 64-hex SHA-256 of the whole state.
        position: position of the last transaction record (0 before any).
        chain_head: ``event_hash`` of the last record (:data:`GENESIS_HASH` first).
    """

    __slots__ = ("_chain_head", "_id", "_limits", "_mounts", "_position", "_root", "_version")

    def __init__(
        self,
        process_id: str,
        root: MapNode,
        *,
        version: int = 0,
        limits: Limits | None = None,
        position: int = 0,
        chain_head: str = GENESIS_HASH,
    ) -> None:
        """Low-level constructor; prefer :meth:`create` or :meth:`restore`."""
        self._id = validate_process_id(process_id)
        self._root: Node = root
        self._version = version
        self._limits = (limits or Limits()).validate()
        self._position = position
        self._chain_head = chain_head
        #: Attached mount providers: runtime authority, never in a snapshot.
        self._mounts = MountRegistry()

    # -- construction -----------------------------------------------------------

    @classmethod
    def create(
        cls,
        process_id: str,
        *,
        limits: Limits | None = None,
        memory: Value = None,
        scripts: dict[str, Script | str] | None = None,
        mounts: dict[str, MountProvider] | None = None,
    ) -> Process:
        """Create a process at version 0.

        Args:
            process_id: ``svit://<rest>``, no whitespace, at most 256 bytes.
            limits: defaults to :class:`Limits` ().
            memory: initial ``/memory`` map of plain values.
            scripts: initial ``/lib``: name -> :class:`Script` or source text;
                each must compile (reference: scripts compile when stored).
            mounts: name -> provider: each descriptor is committed under
                ``/mounts/<name>`` (at version 0) and the provider attached.

        ``/system/identity/authenticated`` is always false (process metadata is
        never a credential).

        Raises:
            InvalidInput: bad id, memory not a map, bad script name or value
                (``invalid_value`` also for value depth/entry/text bounds).
            ScriptFailed: (``script_failed``) a script does not compile.
            LimitExceeded: a script exceeds its size or syntax limits, or the
                whole tree exceeds ``max_tree_nodes`` / ``max_tree_text_bytes``.
        """
        lim = (limits or Limits()).validate()
        lib = {
            name: script_from_value(s if isinstance(s, Script | dict) else Script(s), lim)
            for name, s in (scripts or {}).items()
        }
        for name, script in lib.items():
            check_script(name, script, lim)
        providers = {validate_mount_name(n): p for n, p in (mounts or {}).items()}
        root = build_root(process_id, lim, memory=memory, scripts=lib,
                          mounts={n: p.descriptor().to_value() for n, p in providers.items()})
        if root.size > lim.max_tree_nodes:
            raise LimitExceeded("process tree exceeds max_tree_nodes")
        if root.text > lim.max_tree_text_bytes:
            raise LimitExceeded("process tree exceeds max_tree_text_bytes")
        proc = cls(process_id, root, limits=lim)
        for name, provider in providers.items():
            proc._mounts.attach(name, provider)
        return proc

    # -- read side ------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def version(self) -> int:
        return self._version

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def root(self) -> Node:
        """The current immutable root node (safe to share: it never changes)."""
        return self._root

    @property
    def root_hash(self) -> str:
        return self._root.hex

    @property
    def position(self) -> int:
        return self._position

    @property
    def chain_head(self) -> str:
        return self._chain_head

    @property
    def mounts(self) -> MountRegistry:
        """The attached mount providers (runtime state; see :meth:`attach_mount`)."""
        return self._mounts

    def read(self, path: str) -> Value:
        """The plain value at ``path``; a missing key or index reads as ``None``.

        Below ``/mounts/<name>`` the attached provider answers: a leaf reads as
        its content, a directory and the mount root as their node records
        (``svit_cluster.mounts.MountRegistry.read``).

        Raises:
            InvalidInput: (``invalid_path``) malformed path, a path through a
                scalar, or a non-decimal array index (reference: path reads),
                or a mount name that is not mounted.
            InvalidMount: a malformed mount name.
            MountUnavailable: no provider attached for the mount.
            MountDenied: the path crosses a symbolic link or special file.
            LimitExceeded: a mounted leaf over ``max_text_bytes``.
        """
        target = mount_target(path)
        if target is not None:
            return self._mounts.read(committed_mounts(self._root), *target, self._limits)
        node = lookup_node(self._root, parse_path(path))
        return None if node is None else value_from_node(node)

    def read_versioned(self, path: str) -> tuple[Value, int]:
        """``(value, version)`` from one observation (events reference: read_versioned)."""
        return self.read(path), self._version

    def node(self, path: str) -> Node | None:
        """The node at ``path`` (with its digest), or None; raises like :meth:`read`."""
        return lookup_node(self._root, parse_path(path))

    def discover(self, path: str) -> list[str]:
        """Sorted child names of a map, or indexes of an array.

        Raises:
            InvalidInput: (``invalid_path``) nothing at ``path``, or a scalar or
                script there (reference: discover needs a container).
            MountUnavailable, MountDenied, LimitExceeded: as :meth:`read`,
                below ``/mounts/<name>``.
        """
        target = mount_target(path)
        if target is not None:
            return self._mounts.discover(committed_mounts(self._root), *target, self._limits)
        node = self.node(path)
        if isinstance(node, MapNode):
            return node.keys()
        if isinstance(node, ArrayNode):
            return [str(i) for i in range(len(node.items))]
        what = "nothing" if node is None else f"a {node.kind}"
        raise InvalidInput(f"cannot discover {path[:200]}: {what} is there",
                           code=ErrorCode.INVALID_PATH)

    def stat(self, path: str) -> dict[str, Value] | None:
        """The facts record of the node at ``path`` (:func:`stat_record`, or the
        mount's node record below ``/mounts/<name>``), None when missing."""
        target = mount_target(path)
        if target is not None:
            record = self._mounts.stat(committed_mounts(self._root), *target, self._limits)
            assert record is None or isinstance(record, dict)
            return record
        node = self.node(path)
        if node is None:
            return None
        return stat_record(path, node)

    # -- commits ------------------------------------------------------------------

    def working_copy(self) -> WorkingCopy:
        """A fresh working copy over the current root (for activations).

        Committed mount writes whose apply failed are re-applied first, so
        nothing commits on top of a mount that is behind its log.

        Raises:
            MountUnavailable: such a write still fails.
        """
        self._mounts.flush()
        return WorkingCopy(self._root, self._limits)

    def stage_mount_write(self, wc: WorkingCopy, path: str, value: Value | None) -> bool:
        """Record a write (``value``) or removal (None) below ``/mounts/<name>`` in
        ``wc``; False when ``path`` is not below a mount (nothing staged).

        Raises:
            InvalidInput: (``invalid_path``) not mounted, the mount root, a bad
                target; (``invalid_value``) a bad value.
            MountDenied: the mount is read-only.
            MountUnavailable: no provider attached.
            LimitExceeded: a value over the bounds.
        """
        target = mount_target(path)
        if target is None:
            return False
        self._mounts.check_write(committed_mounts(self._root), *target, value, self._limits)
        wc.mount_op("mount_remove" if value is None else "mount_write", path, value)
        return True

    def seal(self, wc: WorkingCopy, source: str) -> Transition:
        """Seal a working copy into the next transition (not yet applied).

        Raises:
            LimitExceeded: (``resource_limit_exceeded``) the process is at
                :data:`MAX_VERSION` (2**63 - 1): no further version exists.
        """
        if self._version >= MAX_VERSION:
            raise LimitExceeded(f"process version limit exceeded (max {MAX_VERSION})",
                                limit="process version")
        return wc.seal(
            address=self._id,
            position=self._position + 1,
            previous_hash=self._chain_head,
            version_before=self._version,
            source=source,
        )

    def commit(self, transition: Transition) -> Change:
        """Apply a sealed transition in memory.

        Durability is the caller's: the cluster commits through
        ``svit_cluster.control.ProcessController``, which writes the transition
        to its fenced ``CommitBackend`` first and applies it here only after
        that succeeded.

        Raises:
            ConflictError: the transition was sealed against another version
                or another process.
        """
        rec = transition.record
        if (
            rec.address != self._id
            or rec.process_version_before != self._version
            or rec.previous_hash != self._chain_head
        ):
            raise ConflictError(
                "transition was sealed against another version",
                expected_version=rec.process_version_before,
                actual_version=self._version,
            )
        self._root = transition.root
        self._version = rec.process_version_after
        self._position = rec.position
        self._chain_head = rec.event_hash
        # Writes follow the commit, never precede it: a mount write recorded
        # in this transition reaches the mount only now (under the owner's
        # fence where the mount has one).
        self._mounts.apply(rec.process_version_after, mount_ops(rec), self._limits)
        return transition.change

    def ports_transition(self, catalog: dict[str, Value]) -> Transition | None:
        """Seal the replacement of ``/ports`` by this host's ``catalog``, if it differs.

        The catalog is descriptive, never authority (reference: docs/ports.md):
        whatever a snapshot or an earlier host left in ``/ports`` is replaced by
        the serving host's grants, as one versioned ``ports.refresh`` transition
        (so replay on any host reproduces the same root). Returns None when
        ``/ports`` already equals ``catalog`` (no new version).

        Raises:
            InvalidInput: (``invalid_snapshot``) ``catalog`` is not a valid
                catalog (:func:`~svit_cluster.process._namespace.check_port_catalog`).
            LimitExceeded: tree bounds or the version limit.
        """
        check_port_catalog(node_from_value(catalog))
        return self._replace_section("ports", catalog, "ports.refresh")

    def mounts_transition(self, descriptors: dict[str, MountDescriptor]) -> Transition | None:
        """Seal the replacement of ``/mounts`` by the serving host's grants, if it differs.

        Like ``/ports``: the operator's grants decide what is mounted, on every
        activation of the process on any host; a changed grant is one
        versioned ``mounts.refresh`` transition. Returns None when ``/mounts``
        already holds exactly ``descriptors`` (re-attaching the same identity
        is not a state transition).

        Raises:
            InvalidMount: a bad mount name.
            LimitExceeded: tree bounds or the version limit.
        """
        wanted: dict[str, Value] = {validate_mount_name(n): d.to_value()
                                    for n, d in descriptors.items()}
        return self._replace_section("mounts", wanted, "mounts.refresh")

    def _replace_section(self, section: str, wanted: dict[str, Value],
                         source: str) -> Transition | None:
        """Seal ``/<section>`` = ``wanted`` entry by entry (removals, then changed
        entries, in name order), or None when it already holds exactly that."""
        current = self.read(f"/{section}")
        assert isinstance(current, dict)
        if values_equal(current, wanted):
            return None
        wc = self.working_copy()
        for name in sorted(current):
            if name not in wanted:
                wc.host_remove(f"/{section}/{name}")
        for name in sorted(wanted):
            if name not in current or not values_equal(current[name], wanted[name]):
                wc.host_set(f"/{section}/{name}", wanted[name])
        return self.seal(wc, source)

    def attach_mount(self, name: str, provider: MountProvider, **fence: Any) -> None:
        """Attach ``provider`` to the committed mount ``name`` (not a state transition).

        ``fence`` is passed to ``MountRegistry.attach`` (an owner's
        ``process_id``, ``token``, ``head_version`` and ``history``).

        Raises:
            InvalidMount: ``name`` is not committed under ``/mounts``, or its
                committed descriptor differs from the provider's.
            MountUnavailable: the mount's fence is held by a newer owner.
        """
        committed = committed_mounts(self._root).get(validate_mount_name(name))
        if committed is None:
            raise InvalidMount(f"/mounts/{name} is not in the process root")
        if committed != provider.descriptor():
            raise InvalidMount(f"/mounts/{name}: the provider's identity differs from the "
                               "committed descriptor")
        self._mounts.attach(name, provider, limits=self._limits, **fence)

    def grant_ports(self, catalog: dict[str, Value]) -> Change | None:
        """Apply :meth:`ports_transition` in memory; None when unchanged."""
        transition = self.ports_transition(catalog)
        return None if transition is None else self.commit(transition)

    def _host_commit(self, source: str, stage: Callable[[WorkingCopy], object]) -> Change:
        wc = self.working_copy()
        stage(wc)
        return self.commit(self.seal(wc, source))

    def write(self, path: str, value: Value) -> Change:
        """Host write of ``value`` at ``path`` (only below ``/memory``, ``/lib/<name>``,
        or a writable mount: recorded in the transaction, applied to the mount
        after the commit).

        ``/memory`` itself may be written with a map. A script written to
        ``/lib/<name>`` must compile (reference: compiled on write).

        Returns:
            The :class:`Change` of the new version (``version + 1``).

        Raises:
            InvalidInput: (``invalid_path``/``invalid_script_name``/``invalid_value``).
            ScriptFailed: (``script_failed``) the script does not compile.
            LimitExceeded: tree bounds, script size/syntax limits, or the version limit.
        """
        def stage(wc: WorkingCopy) -> None:
            if self.stage_mount_write(wc, path, value):
                return
            segs = wc.write(path, value)
            if segs[0] == "lib":
                node = get_node(wc.root, segs)
                assert isinstance(node, ScriptNode)
                check_script(segs[1], node.script, self._limits)

        return self._host_commit("host.write", stage)

    def remove(self, path: str) -> Change:
        """Host remove of an existing key below ``/memory`` or a ``/lib/<name>``.

        Raises:
            InvalidInput: (``invalid_path``) e.g. ``/memory`` itself, or nothing
                at ``path`` (reference: a missing target is ``invalid_path``).
        """
        def stage(wc: WorkingCopy) -> None:
            if not self.stage_mount_write(wc, path, None):
                wc.remove(path)

        return self._host_commit("host.remove", stage)

    def inbox_append(self, message: Value) -> Change:
        """Append ``message`` to ``/inbox`` (one new version).

        Raises:
            InvalidInput, LimitExceeded: the message is not a valid value or too big.
        """
        return self._host_commit("inbox.append", lambda wc: wc.append("/inbox", message))

    def inbox_head_hash(self) -> str | None:
        """Hex content hash of ``/inbox/0``, or None when the inbox is empty."""
        head = get_node(self._root, ("inbox", "0"))
        return None if head is None else head.hex

    def inbox_ack(self, expected_head_hash: str) -> Change:
        """Acknowledge (remove) the inbox head, which must have ``expected_head_hash``.

        Raises:
            ConflictError: (``inbox_conflict``) the inbox is empty or its head
                has another hash.
        """
        head = self.inbox_head_hash()
        if head is None or head != expected_head_hash:
            raise ConflictError(
                "inbox head does not match the expected hash", code=ErrorCode.INBOX_CONFLICT
            )
        return self._host_commit("inbox.ack", lambda wc: wc.remove_front("/inbox"))

    # -- replay -------------------------------------------------------------------

    def replay(self, records: Iterable[Transaction]) -> int:
        """Apply recorded transactions in order, verifying each; never runs guest code.

        Each record must be internally consistent (:meth:`Transaction.verify`),
        continue the chain (``previous_hash``), step the version by exactly +1
        from the current one, advance ``position`` by 1, name this process, and
        produce its ``resulting_root_hash``; the final root must pass the full
        root validation (:func:`validate_root`). Replay is all or nothing: on any
        failure the process is left exactly as it was before the call.

        Returns:
            The number of records applied.

        Raises:
            svit_cluster.errors.CorruptData: (``corrupt_log``) a record that is
                not a :class:`Transaction` or does not verify, a broken chain, a
                bad version step or position, a foreign address, a mutation that
                does not apply, or a root-hash mismatch; the message names the
                process id and position.
        """
        root, version, position, head = self._root, self._version, self._position, self._chain_head
        n = 0
        for rec in records:
            if not isinstance(rec, Transaction):
                raise CorruptData(f"replay of {self._id}: record {n} is not a transaction")
            where = f"{self._id} at position {str(rec.position)[:24]}"
            try:
                rec.verify()
            except InvalidInput as exc:
                raise CorruptData(f"invalid record in {where}: {exc.message}") from None
            if rec.address != self._id:
                raise CorruptData(f"record for another process in {where}")
            if rec.previous_hash != head:
                raise CorruptData(f"broken hash chain in {where}")
            if rec.process_version_before != version:
                raise CorruptData(f"version step {rec.process_version_before}->"
                                  f"{rec.process_version_after} does not follow "
                                  f"{version} in {where}")
            if rec.position != position + 1:
                raise CorruptData(f"position gap after {position} in {where}")
            new_root = root
            try:
                for mut in rec.mutations:
                    new_root = apply_mutation(new_root, mut, self._limits)
            except SvitError as exc:
                raise CorruptData(f"mutation does not apply in {where}: {exc.message}") from exc
            if new_root.hex != rec.resulting_root_hash:
                raise CorruptData(f"root hash mismatch in {where}")
            root = new_root
            version = rec.process_version_after
            position = rec.position
            head = rec.event_hash
            n += 1
        if n:
            try:
                validate_root(root, self._id, self._limits)
            except SvitError as exc:
                raise CorruptData(f"replay of {self._id} up to position {position} gives an "
                                  f"invalid root: {exc.message}") from None
        self._root, self._version, self._position, self._chain_head = root, version, position, head
        return n

    # -- snapshot / restore / fork ---------------------------------------------------

    def snapshot_document(self) -> dict[str, Any]:
        """The snapshot as a JSON-ready ``dict`` (see :meth:`snapshot`)."""
        return {
            "format": SNAPSHOT_FORMAT,
            "id": self._id,
            "version": self._version,
            "root": encode_node(self._root),
            "root_hash": self.root_hash,
            "limits": self._limits.to_dict(),
        }

    def snapshot(self) -> bytes:
        """Strict canonical JSON ``{format, id, version, root, root_hash, limits}``.

        The same state always gives the same bytes.
        """
        return canonical_json(self.snapshot_document())

    @classmethod
    def restore(
        cls,
        data: bytes,
        *,
        max_bytes: int = MAX_SNAPSHOT_BYTES,
        position: int = 0,
        chain_head: str = GENESIS_HASH,
    ) -> Process:
        """Rebuild a process from :meth:`snapshot` bytes.

        Args:
            data: the snapshot bytes.
            max_bytes: refuse larger input (default 128 MiB).
            position, chain_head: where the transaction chain continues (the
                durable store keeps these beside the snapshot).

        Raises:
            InvalidInput: (``invalid_snapshot``) too large, not strict JSON,
                trailing bytes, unknown format, wrong fields, a version outside
                ``0..MAX_VERSION``, limits above the hard maxima, an invalid
                root (the full :func:`validate_root`, checked before the hash:
                the message names the path), or a root-hash mismatch.
        """
        def bad(msg: str) -> InvalidInput:
            return InvalidInput(f"snapshot rejected: {msg}", code=ErrorCode.INVALID_SNAPSHOT)

        if not isinstance(data, bytes | bytearray | memoryview):
            raise bad("snapshot must be bytes")
        if isinstance(data, memoryview):
            data = data.tobytes()
        if len(data) > max_bytes:
            raise bad(f"larger than {max_bytes} bytes")
        try:
            doc = strict_json_loads(data, what="snapshot")
        except InvalidInput as exc:
            raise bad(exc.message) from None
        if type(doc) is not dict or set(doc) != _SNAPSHOT_FIELDS:
            raise bad("fields must be exactly " + ",".join(sorted(_SNAPSHOT_FIELDS)))
        if doc["format"] != SNAPSHOT_FORMAT:
            raise bad(f"unknown format {str(doc['format'])[:64]!r}")
        if type(doc["version"]) is not int or not 0 <= doc["version"] <= MAX_VERSION:
            raise bad(f"version must be an integer in 0..{MAX_VERSION}")
        try:
            process_id = validate_process_id(doc["id"])
            limits = Limits.from_dict(doc["limits"])
            root = decode_root(doc["root"], process_id, limits)
        except SvitError as exc:
            raise bad(exc.message) from None
        if root.hex != doc["root_hash"]:
            raise bad("root hash mismatch")
        proc = cls(
            process_id,
            root,
            version=doc["version"],
            limits=limits,
            position=position,
            chain_head=chain_head,
        )
        lim_node = get_node(root, ("system", "limits"))
        wanted: Value = dict(limits.to_dict())
        if lim_node is None or not values_equal(value_from_node(lim_node), wanted):
            raise bad("/system/limits does not match the snapshot limits")
        return proc

    def fork(self, new_id: str) -> Process:
        """A copy at the same version with a new identity and an empty outbox.

        The child records this process as its lineage parent, starts a new
        transaction chain, and shares no future mutations with the parent
        (unchanged subtrees keep their hashes).

        The child runs the same full root validation as a restore. A closed
        inbox (``/thread/inbox_closed``) is not inherited: the child is a new
        process whose inbox is open.

        Raises:
            InvalidInput: (``invalid_process_id``) ``new_id`` is invalid;
                (``invalid_snapshot``) the resulting root is invalid.
        """
        validate_process_id(new_id)
        assert isinstance(self._root, MapNode)
        root = with_system(self._root, new_id, self._limits, self._id)
        if get_node(root, ("thread", "inbox_closed")) is not None:
            opened = remove_node(root, ("thread", "inbox_closed"))
            assert isinstance(opened, MapNode)
            root = opened
        validate_root(root, new_id, self._limits)
        child = Process(new_id, root, version=self._version, limits=self._limits)
        # The child shares the providers the host attached (reference: forks
        # share mounts), without the parent's fences: a fork in the cluster
        # attaches its own grants when it is activated.
        for name, provider in self._mounts.providers().items():
            child._mounts.attach(name, provider)
        return child

    def scripts(self) -> dict[str, Script]:
        """All stored scripts by name."""
        lib = get_node(self._root, ("lib",))
        assert isinstance(lib, MapNode)
        out: dict[str, Script] = {}
        for name, node in lib.items():
            assert isinstance(node, ScriptNode)
            out[name] = node.script
        return out

    def __repr__(self) -> str:
        return f"Process({self._id!r}, version={self._version}, root_hash={self.root_hash[:12]}…)"
