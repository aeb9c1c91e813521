"""Persistent, content-hashed value tree with incremental hashing.

Every node is immutable and carries a structural SHA-256 ``digest``. A write
copies only the path from the written node to the root, so an unchanged subtree
is *shared* (same object, same digest) across commits, snapshots and forks.

Maps are stored in a canonical hash trie: keys are spread over 16-way branches
by the nibbles of ``sha256(key)``, and a trie node holding at most
:data:`LEAF_MAX` entries is a sorted leaf. The shape depends only on the set of
keys, never on insertion order, so equal maps hash equally. A one-key write in
a map of *n* entries re-hashes ``O(log16(n / LEAF_MAX))`` trie nodes plus one
leaf of at most ``LEAF_MAX`` entries, instead of all *n* entries.

Arrays are tuples of nodes and re-hash all their children on change
(``O(len)``); keep large collections in maps.

The structural hash encoding is named :data:`HASH_SCHEME`
(``svit-cluster-hash@1``). It is svit_cluster's own, **not** the reference's
committed value-hash contract (README "Formats"): SHA-256 over

* null ``n``; bool ``b`` + byte 0/1; integer ``i`` + 8-byte big-endian signed;
  number ``f`` + 8-byte big-endian IEEE-754 double; string ``s`` + UTF-8;
* script ``S`` + u32 BE source length + source + (``0x00`` | ``0x01`` + documentation);
* array ``a`` + u32 BE count + each child digest;
* map ``m`` + u32 BE count + trie digest, where a trie leaf is ``L`` + per key in
  sorted order (u32 BE key length, UTF-8 key, child digest) and a branch is
  ``B`` + 16 slot digests (32 zero bytes for an empty slot), keys spread by
  the nibbles of ``sha256(key)``, leaves of at most :data:`LEAF_MAX` keys.

Golden vectors pin it (``tests/conformance/test_formats.py``); changing any of
it is a new scheme name and breaks every stored root hash.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.values import I64_MAX, I64_MIN, Script, Value, utf8_len

__all__ = [
    "HASH_SCHEME",
    "LEAF_MAX",
    "ArrayNode",
    "MapNode",
    "Node",
    "ScalarNode",
    "ScriptNode",
    "get_node",
    "lookup_node",
    "node_from_value",
    "remove_node",
    "set_node",
    "value_from_node",
]

#: The name of the structural hash encoding above (not the reference's encoding).
HASH_SCHEME = "svit-cluster-hash@1"
LEAF_MAX = 32
_ZERO = b"\x00" * 32
_sha = hashlib.sha256
_pack_i = struct.Struct(">q").pack
_pack_d = struct.Struct(">d").pack
_pack_u = struct.Struct(">I").pack


class Node:
    """Base of all tree nodes.

    Attributes:
        digest: 32-byte SHA-256 structural hash of the subtree.
        size: number of nodes in the subtree (this one included).
        text: UTF-8 bytes of strings, keys and script text in the subtree.
    """

    __slots__ = ("digest", "size", "text")
    kind: str = "?"
    digest: bytes
    size: int
    text: int

    @property
    def hex(self) -> str:
        """The digest as 64 lowercase hex characters."""
        return self.digest.hex()


class ScalarNode(Node):
    """A null, bool, integer, number or string."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: bool | int | float | str | None, text: int = 0) -> None:
        self.kind = kind
        self.value = value
        self.size = 1
        self.text = text
        if kind == "null":
            self.digest = _sha(b"n").digest()
        elif kind == "bool":
            self.digest = _sha(b"b\x01" if value else b"b\x00").digest()
        elif kind == "integer":
            assert isinstance(value, int)
            self.digest = _sha(b"i" + _pack_i(value)).digest()
        elif kind == "number":
            assert isinstance(value, float)
            self.digest = _sha(b"f" + _pack_d(value)).digest()
        else:
            assert isinstance(value, str)
            self.digest = _sha(b"s" + value.encode("utf-8")).digest()


NULL_NODE = ScalarNode("null", None)


class ScriptNode(Node):
    """A ``{source, documentation}`` script record (only under ``/lib``)."""

    __slots__ = ("script",)
    kind = "script"

    def __init__(self, script: Script) -> None:
        """Build the node; the caller has checked the text is valid Unicode (``utf8_len``)."""
        self.script = script
        src = script.source.encode("utf-8")
        doc = None if script.documentation is None else script.documentation.encode("utf-8")
        self.size = 1
        self.text = len(src) + (0 if doc is None else len(doc))
        h = _sha(b"S")
        h.update(_pack_u(len(src)))
        h.update(src)
        if doc is None:
            h.update(b"\x00")
        else:
            h.update(b"\x01")
            h.update(doc)
        self.digest = h.digest()


class ArrayNode(Node):
    """An array; ``items`` is a tuple of child nodes."""

    __slots__ = ("items",)
    kind = "array"

    def __init__(self, items: tuple[Node, ...]) -> None:
        self.items = items
        h = _sha(b"a" + _pack_u(len(items)))
        size = 1
        text = 0
        for child in items:
            h.update(child.digest)
            size += child.size
            text += child.text
        self.digest = h.digest()
        self.size = size
        self.text = text


# ---------------------------------------------------------------------------
# canonical hash trie for maps


def _key_hash(key: str) -> bytes:
    return _sha(key.encode("utf-8")).digest()


def _nibble(kh: bytes, depth: int) -> int:
    b = kh[depth >> 1]
    return (b >> 4) if depth % 2 == 0 else (b & 0x0F)


class _Trie:
    __slots__ = ("count", "digest", "size", "text")
    count: int
    digest: bytes
    size: int
    text: int


class _Leaf(_Trie):
    __slots__ = ("entries",)

    def __init__(self, entries: dict[str, Node]) -> None:
        self.entries = entries
        self.count = len(entries)
        h = _sha(b"L")
        size = 0
        text = 0
        for k in sorted(entries):
            child = entries[k]
            kb = k.encode("utf-8")
            h.update(_pack_u(len(kb)))
            h.update(kb)
            h.update(child.digest)
            size += child.size
            text += child.text + len(kb)
        self.digest = h.digest()
        self.size = size
        self.text = text


class _Branch(_Trie):
    __slots__ = ("slots",)

    def __init__(self, slots: tuple[_Trie | None, ...]) -> None:
        self.slots = slots
        h = _sha(b"B")
        count = size = text = 0
        for s in slots:
            if s is None:
                h.update(_ZERO)
            else:
                h.update(s.digest)
                count += s.count
                size += s.size
                text += s.text
        self.digest = h.digest()
        self.count = count
        self.size = size
        self.text = text


_EMPTY_LEAF = _Leaf({})
_MAX_DEPTH = 63  # nibbles in a SHA-256 digest, minus one


def _build(items: list[tuple[bytes, str, Node]], depth: int) -> _Trie:
    if len(items) <= LEAF_MAX or depth >= _MAX_DEPTH:
        return _Leaf({k: n for _, k, n in items})
    buckets: list[list[tuple[bytes, str, Node]]] = [[] for _ in range(16)]
    for it in items:
        buckets[_nibble(it[0], depth)].append(it)
    return _Branch(tuple(_build(b, depth + 1) if b else None for b in buckets))


def _trie_get(t: _Trie, key: str, kh: bytes, depth: int) -> Node | None:
    while isinstance(t, _Branch):
        s = t.slots[_nibble(kh, depth)]
        if s is None:
            return None
        t = s
        depth += 1
    assert isinstance(t, _Leaf)
    return t.entries.get(key)


def _trie_items(t: _Trie) -> Iterator[tuple[str, Node]]:
    if isinstance(t, _Leaf):
        yield from t.entries.items()
        return
    assert isinstance(t, _Branch)
    for s in t.slots:
        if s is not None:
            yield from _trie_items(s)


def _trie_set(t: _Trie, key: str, kh: bytes, node: Node, depth: int) -> _Trie:
    if isinstance(t, _Leaf):
        entries = dict(t.entries)
        entries[key] = node
        if len(entries) > LEAF_MAX and depth < _MAX_DEPTH:
            return _build([(_key_hash(k), k, n) for k, n in entries.items()], depth)
        return _Leaf(entries)
    assert isinstance(t, _Branch)
    i = _nibble(kh, depth)
    slots = list(t.slots)
    s = slots[i]
    slots[i] = _trie_set(s if s is not None else _EMPTY_LEAF, key, kh, node, depth + 1)
    return _Branch(tuple(slots))


def _trie_remove(t: _Trie, key: str, kh: bytes, depth: int) -> _Trie | None:
    """Remove ``key``; return the new trie, or None if the key is absent."""
    if isinstance(t, _Leaf):
        if key not in t.entries:
            return None
        entries = dict(t.entries)
        del entries[key]
        return _Leaf(entries)
    assert isinstance(t, _Branch)
    i = _nibble(kh, depth)
    s = t.slots[i]
    if s is None:
        return None
    new = _trie_remove(s, key, kh, depth + 1)
    if new is None:
        return None
    if t.count - 1 <= LEAF_MAX:  # collapse to the canonical leaf
        entries = dict(_trie_items(t))
        del entries[key]
        return _Leaf(entries)
    slots = list(t.slots)
    slots[i] = new if new.count else None
    return _Branch(tuple(slots))


class MapNode(Node):
    """A map with string keys; iteration via :meth:`keys` is in sorted order."""

    __slots__ = ("trie",)
    kind = "map"

    def __init__(self, trie: _Trie) -> None:
        self.trie = trie
        self.digest = _sha(b"m" + _pack_u(trie.count) + trie.digest).digest()
        self.size = 1 + trie.size
        self.text = trie.text

    @classmethod
    def from_items(cls, items: dict[str, Node]) -> MapNode:
        return cls(_build([(_key_hash(k), k, n) for k, n in items.items()], 0))

    def __len__(self) -> int:
        return self.trie.count

    def get(self, key: str) -> Node | None:
        if isinstance(self.trie, _Leaf):
            return self.trie.entries.get(key)
        return _trie_get(self.trie, key, _key_hash(key), 0)

    def keys(self) -> list[str]:
        """All keys, sorted."""
        return sorted(k for k, _ in _trie_items(self.trie))

    def items(self) -> list[tuple[str, Node]]:
        """All ``(key, node)`` pairs, sorted by key."""
        return sorted(_trie_items(self.trie), key=lambda kv: kv[0])

    def with_key(self, key: str, node: Node) -> MapNode:
        return MapNode(_trie_set(self.trie, key, _key_hash(key), node, 0))

    def without_key(self, key: str) -> MapNode | None:
        """The map without ``key``, or None when ``key`` is absent."""
        new = _trie_remove(self.trie, key, _key_hash(key), 0)
        return None if new is None else MapNode(new)


EMPTY_MAP = MapNode(_EMPTY_LEAF)


# ---------------------------------------------------------------------------
# conversion between plain values and nodes


class _Walk:
    __slots__ = ("allow_script", "entries", "max_depth", "max_entries", "max_text", "text")

    def __init__(self, max_depth: int, max_entries: int, max_text: int, allow_script: bool):
        self.max_depth = max_depth
        self.max_entries = max_entries
        self.max_text = max_text
        self.allow_script = allow_script
        self.entries = 0
        self.text = 0


def node_from_value(
    value: Value,
    *,
    max_depth: int = 128,
    max_entries: int = 1_000_000,
    max_text_bytes: int = 64 * 1024 * 1024,
    allow_script: bool = False,
) -> Node:
    """Validate a plain value and build its hashed node.

    Args:
        value: a plain value (see :mod:`svit_cluster.values`).
        max_depth: deepest allowed node; ``value`` itself is at depth 0 and each
            container adds 1, so with ``max_depth`` 0 only a scalar or an empty
            container is accepted, and a negative bound rejects everything
            (``max_value_depth``, measured like the reference).
        max_entries: at most this many nodes (``max_value_entries``).
        max_text_bytes: at most this many UTF-8 bytes across strings and keys.
        allow_script: a :class:`Script` is accepted only at the top level when set.

    Raises:
        InvalidInput: (``invalid_value``) a non-value, a script where none is
            allowed, a non-finite number, an integer outside i64, or a value
            bound above exceeded (the message names it; the reference's value
            validation reports depth, entry and text bounds as ``invalid_value``).

    A number ``-0.0`` is stored as ``0.0``: the two are the same value (same
    hash, equal), as in the reference.
    """
    walk = _Walk(max_depth, max_entries, max_text_bytes, allow_script)
    return _to_node(value, 0, walk)


def _value_bound(message: str) -> InvalidInput:
    """A value bound (depth, entries, text) failed: ``invalid_value`` (reference: value.rs)."""
    return InvalidInput(message, code=ErrorCode.INVALID_VALUE)


def _to_node(value: Value, depth: int, w: _Walk) -> Node:
    if depth > w.max_depth:
        raise _value_bound("value is nested too deeply (max_value_depth)")
    w.entries += 1
    if w.entries > w.max_entries:
        raise _value_bound("value has too many entries (max_value_entries)")
    if value is None:
        return NULL_NODE
    t = type(value)
    if t is bool:
        assert isinstance(value, bool)
        return ScalarNode("bool", value)
    if t is int:
        assert isinstance(value, int)
        if value < I64_MIN or value > I64_MAX:
            raise InvalidInput("integer out of signed 64-bit range", code=ErrorCode.INVALID_VALUE)
        return ScalarNode("integer", value)
    if t is float:
        assert isinstance(value, float)
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidInput("number must be finite", code=ErrorCode.INVALID_VALUE)
        return ScalarNode("number", value + 0.0)  # -0.0 + 0.0 == +0.0: one zero
    if t is str:
        assert isinstance(value, str)
        n = utf8_len(value)
        w.text += n
        if w.text > w.max_text:
            raise _value_bound("value has too much text (max_text_bytes)")
        return ScalarNode("string", value, n)
    if t is list:
        assert isinstance(value, list)
        return ArrayNode(tuple(_to_node(v, depth + 1, w) for v in value))
    if t is dict:
        assert isinstance(value, dict)
        items: dict[str, Node] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidInput("map keys must be strings", code=ErrorCode.INVALID_VALUE)
            w.text += utf8_len(k)
            if w.text > w.max_text:
                raise _value_bound("value has too much text (max_text_bytes)")
            items[k] = _to_node(v, depth + 1, w)
        return MapNode.from_items(items)
    if t is Script:
        assert isinstance(value, Script)
        if not (w.allow_script and depth == 0):
            raise InvalidInput(
                "a script record is allowed only at /lib/<name>", code=ErrorCode.INVALID_VALUE
            )
        utf8_len(value.source)
        utf8_len(value.documentation or "")
        node = ScriptNode(value)
        w.text += node.text
        if w.text > w.max_text:
            raise _value_bound("value has too much text (max_text_bytes)")
        return node
    raise InvalidInput(f"not a storable value: {t.__name__}", code=ErrorCode.INVALID_VALUE)


def value_from_node(node: Node) -> Value:
    """Convert a node back to a fresh plain value (a deep copy the caller may mutate)."""
    if isinstance(node, ScalarNode):
        return node.value
    if isinstance(node, MapNode):
        return {k: value_from_node(n) for k, n in node.items()}
    if isinstance(node, ArrayNode):
        return [value_from_node(n) for n in node.items]
    if isinstance(node, ScriptNode):
        return node.script
    raise TypeError(f"unknown node {type(node).__name__}")  # pragma: no cover


# ---------------------------------------------------------------------------
# path operations (persistent: each returns a new root)


def _index(seg: str, length: int, *, allow_end: bool) -> int | None:
    if not seg.isdigit() or (len(seg) > 1 and seg[0] == "0") or not seg.isascii():
        return None
    i = int(seg)
    if i < length or (allow_end and i == length):
        return i
    return None


def get_node(root: Node, path: tuple[str, ...]) -> Node | None:
    """The node at ``path`` (segments), or None when any step is missing."""
    node: Node | None = root
    for seg in path:
        if isinstance(node, MapNode):
            node = node.get(seg)
        elif isinstance(node, ArrayNode):
            i = _index(seg, len(node.items), allow_end=False)
            node = None if i is None else node.items[i]
        else:
            return None
        if node is None:
            return None
    return node


def lookup_node(root: Node, path: tuple[str, ...]) -> Node | None:
    """The node at ``path`` for a *read* (reference: process.rs path reads).

    A missing map key or an index past the end of an array gives None, but a
    path that is malformed for the tree it walks is an error.

    Raises:
        InvalidInput: (``invalid_path``) a step goes through a scalar or script,
            or an array step is not a canonical decimal index (``"x"``, ``"01"``).
    """
    node: Node | None = root
    for k, seg in enumerate(path):
        if isinstance(node, MapNode):
            node = node.get(seg)
        elif isinstance(node, ArrayNode):
            if not (seg.isascii() and seg.isdigit()) or (len(seg) > 1 and seg[0] == "0"):
                raise InvalidInput(
                    f"array index {seg[:32]!r} is not a decimal index in "
                    f"/{'/'.join(path)[:200]}",
                    code=ErrorCode.INVALID_PATH,
                )
            i = int(seg)
            node = node.items[i] if i < len(node.items) else None
        else:
            assert node is not None
            raise InvalidInput(
                f"/{'/'.join(path)[:200]} goes through a {node.kind} at "
                f"/{'/'.join(path[:k])[:200]}",
                code=ErrorCode.INVALID_PATH,
            )
        if node is None:
            return None
    return node


def set_node(
    root: Node, path: tuple[str, ...], node: Node, *, allow_append: bool = False
) -> Node:
    """Return a new root with ``node`` at ``path``; the parent must exist.

    In a map, the key is inserted or replaced. In an array, only an existing
    index is replaced: writing past the end is refused, as in the reference
    (host inbox/outbox appends use ``append`` mutations instead).
    ``allow_append`` (replay of records written before that rule only) lets
    the index equal to the length append.

    Raises:
        InvalidInput: (``invalid_path``) ``path`` is the root, the parent does
            not exist, the parent is not a container, or the index is not valid.
    """
    if not path:
        raise InvalidInput("cannot replace the root", code=ErrorCode.INVALID_PATH)
    return _set(root, path, 0, node, allow_append)


def _set(cur: Node, path: tuple[str, ...], i: int, node: Node, append: bool) -> Node:
    seg = path[i]
    last = i == len(path) - 1
    if isinstance(cur, MapNode):
        if last:
            return cur.with_key(seg, node)
        child = cur.get(seg)
        if child is None:
            raise InvalidInput(
                f"parent of /{'/'.join(path)[:200]} does not exist", code=ErrorCode.INVALID_PATH
            )
        return cur.with_key(seg, _set(child, path, i + 1, node, append))
    if isinstance(cur, ArrayNode):
        idx = _index(seg, len(cur.items), allow_end=append and last)
        if idx is None:
            raise InvalidInput(
                f"no array element {seg[:32]!r} in /{'/'.join(path)[:200]}",
                code=ErrorCode.INVALID_PATH,
            )
        items = list(cur.items)
        if idx == len(items):
            items.append(node)
        else:
            items[idx] = node if last else _set(items[idx], path, i + 1, node, append)
        return ArrayNode(tuple(items))
    raise InvalidInput(
        f"parent of /{'/'.join(path)[:200]} is not a map or array", code=ErrorCode.INVALID_PATH
    )


def remove_node(root: Node, path: tuple[str, ...]) -> Node:
    """Return a new root without the node at ``path``.

    Removing an array element shifts the later elements down by one.

    Raises:
        InvalidInput: (``invalid_path``) ``path`` is the root, or nothing is at
            ``path`` (a missing key, index or parent: the reference reports a
            missing removal target as ``invalid_path``).
    """
    if not path:
        raise InvalidInput("cannot remove the root", code=ErrorCode.INVALID_PATH)
    return _remove(root, path, 0)


def _missing(path: tuple[str, ...]) -> InvalidInput:
    return InvalidInput(f"/{'/'.join(path)[:200]} does not exist", code=ErrorCode.INVALID_PATH)


def _remove(cur: Node, path: tuple[str, ...], i: int) -> Node:
    seg = path[i]
    last = i == len(path) - 1
    if isinstance(cur, MapNode):
        if last:
            new = cur.without_key(seg)
            if new is None:
                raise _missing(path)
            return new
        child = cur.get(seg)
        if child is None:
            raise _missing(path)
        return cur.with_key(seg, _remove(child, path, i + 1))
    if isinstance(cur, ArrayNode):
        idx = _index(seg, len(cur.items), allow_end=False)
        if idx is None:
            raise _missing(path)
        items = list(cur.items)
        if last:
            del items[idx]
        else:
            items[idx] = _remove(items[idx], path, i + 1)
        return ArrayNode(tuple(items))
    raise _missing(path)
