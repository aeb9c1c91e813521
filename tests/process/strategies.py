"""Shared Hypothesis strategies and helpers for the process-core tests."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from svit_cluster.process import Process, Value
from svit_cluster.process._tree import ArrayNode, MapNode, Node
from svit_cluster.values import I64_MAX, I64_MIN

#: Settings for every property test here: no deadline (CI machines are slow),
#: enough examples to find shape bugs, and a suite that stays well under 60 s.
PROPS = settings(
    deadline=None,
    database=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

keys = st.text(min_size=0, max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=I64_MIN, max_value=I64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values: st.SearchStrategy[Value] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
#: Keys usable as one path segment (no ``/``, not ``.`` or ``..``).
segments = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=6
).filter(lambda s: s not in (".", ".."))
#: Maps big enough that the canonical hash trie branches (more than 32 keys).
big_maps = st.dictionaries(segments, scalars, min_size=40, max_size=200)


def state(p: Process) -> tuple[Any, ...]:
    """Everything observable about a process's committed state."""
    return (p.id, p.version, p.root_hash, p.position, p.chain_head, p.snapshot())


def digests(node: Node, path: str = "") -> dict[str, str]:
    """Every node's hex digest by path (``"/"`` for the root)."""
    out = {path or "/": node.hex}
    if isinstance(node, MapNode):
        for k, child in node.items():
            out.update(digests(child, f"{path}/{k}"))
    elif isinstance(node, ArrayNode):
        for i, child in enumerate(node.items):
            out.update(digests(child, f"{path}/{i}"))
    return out


def shuffled(value: Value, rng: random.Random) -> Value:
    """A deep copy of ``value`` whose maps were built in a random insertion order."""
    if isinstance(value, dict):
        ks = list(value)
        rng.shuffle(ks)
        return {k: shuffled(value[k], rng) for k in ks}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


def nested_json(levels: int, inner: str = "[]") -> str:
    """``[[[...]]]`` nested ``levels`` deep, around ``inner``."""
    return "[" * levels + inner + "]" * levels


def flip_json(v: Any, rng: random.Random) -> Any:
    """A JSON value of the same shape class that differs from ``v``."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + rng.choice([1, -1, 7])
    if isinstance(v, float):
        return v + 1.0
    if isinstance(v, str):
        if len(v) == 64 and all(c in "0123456789abcdef" for c in v):
            i = rng.randrange(64)
            return v[:i] + ("0" if v[i] != "0" else "1") + v[i + 1 :]
        return v + "x"
    if isinstance(v, list):
        return [*v, None] if not v or rng.random() < 0.5 else v[:-1]
    if isinstance(v, dict):
        return {**v, "extra": 1}
    return 0 if v is None else None


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
