"""Content hashes: structural, shared by unchanged subtrees, incremental; Change reports."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from svit_cluster.process import Process, format_path, parse_path
from svit_cluster.process._tree import MapNode, _Branch, _Leaf, _Trie

from .strategies import PROPS, digests, segments, values


def test_unchanged_subtrees_keep_their_hash_and_identity_across_commits() -> None:
    p = Process.create("svit://h", memory={"a": {"deep": [1, 2, 3]}, "b": 1},
                       scripts={"s": "(x)"})
    a_node, lib_node = p.node("/memory/a"), p.node("/lib")
    before = digests(p.root)
    p.write("/memory/b", 2)
    p.inbox_append("m")
    assert p.node("/memory/a") is a_node and p.node("/lib") is lib_node
    after = digests(p.root)
    for path in ("/memory/a", "/memory/a/deep", "/memory/a/deep/2", "/lib", "/lib/s", "/system"):
        assert before[path] == after[path]
    for path in ("/", "/memory", "/memory/b", "/inbox"):
        assert before[path] != after[path]


def test_hashes_survive_snapshot_restore_and_fork() -> None:
    p = Process.create("svit://h", memory={"a": {"x": [1, 2.5, "s", None, True]}},
                       scripts={"s": "(x)"})
    p.write("/memory/b", {"k": "v"})
    restored = Process.restore(p.snapshot())
    assert digests(restored.root) == digests(p.root)
    child = p.fork("svit://h/child")
    d_parent, d_child = digests(p.root), digests(child.root)
    for path, h in d_parent.items():
        if path.startswith(("/memory", "/lib", "/inbox", "/thread")):
            assert d_child[path] == h
    assert d_child["/system"] != d_parent["/system"] and d_child["/"] != d_parent["/"]
    assert d_child["/system/limits"] == d_parent["/system/limits"]


def test_change_reports_sorted_paths_and_hashes_up_to_the_root() -> None:
    p = Process.create("svit://h", memory={"a": {"x": 1, "y": 2}, "gone": 1, "same": 5})
    wc = p.working_copy()
    wc.write("/memory/z", 1)
    wc.write("/memory/a/x", 10)
    wc.remove("/memory/gone")
    wc.write("/memory/same", 5)  # written but unchanged: still touched (reference)
    change = p.commit(p.seal(wc, "activation"))
    assert change.version == 1
    assert change.paths == ("/memory/a/x", "/memory/gone", "/memory/same", "/memory/z")
    assert list(change.paths) == sorted(change.paths)
    assert set(change.hashes) == {"/", "/memory", "/memory/a", "/memory/a/x", "/memory/gone",
                                  "/memory/same", "/memory/z"}
    assert change.hashes["/memory/gone"] is None
    for path, h in change.hashes.items():
        if h is not None:
            assert h == p.node(path).hex  # type: ignore[union-attr]
    assert change.hashes["/"] == p.root_hash


def test_an_unchanged_write_still_reports_its_touched_path() -> None:
    p = Process.create("svit://h", memory={"a": 1})
    before = p.root_hash
    change = p.write("/memory/a", 1)
    assert change.paths == ("/memory/a",) and change.version == 1
    assert p.root_hash == before and change.hashes["/"] == before


def test_change_hashes_for_removal_and_inbox() -> None:
    p = Process.create("svit://h", memory={"a": {"b": 1}})
    change = p.remove("/memory/a")
    assert change.paths == ("/memory/a",)
    assert dict(change.hashes) == {"/memory/a": None, "/memory": p.node("/memory").hex,  # type: ignore[union-attr]
                                   "/": p.root_hash}
    change = p.inbox_append(1)
    assert change.paths == ("/inbox",) and set(change.hashes) == {"/inbox", "/"}


def _trie_nodes(t: _Trie) -> list[_Trie]:
    out: list[_Trie] = [t]
    if isinstance(t, _Branch):
        for s in t.slots:
            if s is not None:
                out.extend(_trie_nodes(s))
    return out


@pytest.mark.parametrize("n", [1_000, 20_000])
def test_hashing_is_incremental_a_write_rebuilds_only_one_trie_path(n: int) -> None:
    from svit_cluster.process import Limits

    p = Process.create("svit://h", memory={f"k{i}": i for i in range(n)},
                       limits=Limits(max_value_entries=n + 1, max_tree_nodes=n + 1000))
    old = p.node("/memory")
    assert isinstance(old, MapNode) and isinstance(old.trie, _Branch)
    old_ids = {id(t) for t in _trie_nodes(old.trie)}
    p.write("/memory/k7", -7)
    new = p.node("/memory")
    assert isinstance(new, MapNode)
    fresh = [t for t in _trie_nodes(new.trie) if id(t) not in old_ids]
    # one leaf plus one branch per trie level (log16 of n/32), never O(n)
    assert 2 <= len(fresh) <= 6
    assert sum(1 for t in fresh if isinstance(t, _Leaf)) == 1
    assert max(t.count for t in fresh if isinstance(t, _Leaf)) <= 32


@st.composite
def tree_and_write(draw: st.DrawFn) -> tuple[dict[str, Any], str, Any]:
    memory = draw(st.dictionaries(segments, values, min_size=1, max_size=6))
    # pick an existing container path (or /memory) and a child to write
    paths: list[tuple[str, ...]] = [("memory",)]

    def walk(v: object, path: tuple[str, ...]) -> None:
        if isinstance(v, dict):
            paths.append(path)
            for k, c in v.items():
                if k and "/" not in k and k not in (".", ".."):
                    walk(c, (*path, k))
        elif isinstance(v, list):
            paths.append(path)
            for i, c in enumerate(v):
                walk(c, (*path, str(i)))

    for k, v in memory.items():
        walk(v, ("memory", k))
    assert all(parse_path(format_path(q)) == q for q in paths)
    parent = draw(st.sampled_from(paths))
    node: object = memory
    for seg in parent[1:]:
        node = node[int(seg)] if isinstance(node, list) else node[seg]  # type: ignore[index]
    if isinstance(node, list):
        # an existing index only (writes never append past the end); an empty
        # array has none, and the write is then refused with invalid_path
        child = str(draw(st.integers(0, max(len(node) - 1, 0))))
    else:
        options = [k for k in node if k and "/" not in k and k not in (".", "..")] if isinstance(
            node, dict) else []
        child = draw(st.sampled_from(options) | segments) if options else draw(segments)
    value = draw(values)
    return memory, format_path((*parent, child)), value


@PROPS
@given(tree_and_write())
def test_a_write_changes_exactly_the_written_node_and_its_ancestors(
    case: tuple[dict[str, object], str, object],
) -> None:
    memory, path, value = case
    p = Process.create("svit://h", memory=memory)  # type: ignore[arg-type]
    before = digests(p.root)
    old_node = p.node(path)
    try:
        change = p.write(path, value)  # type: ignore[arg-type]
    except Exception as exc:  # only the depth rule (or an empty array) may refuse it
        from svit_cluster.errors import InvalidInput

        assert isinstance(exc, InvalidInput)
        assert exc.code == "invalid_value" or (exc.code == "invalid_path" and old_node is None)
        assume(False)
        return
    after = digests(p.root)
    segs = parse_path(path)
    ancestors = {format_path(segs[:k]) for k in range(len(segs))}

    def inside(q: str) -> bool:
        return q == path or q.startswith(path + "/")

    changed = old_node is None or old_node.digest != p.node(path).digest  # type: ignore[union-attr]
    for q in set(before) | set(after):
        if inside(q):
            continue
        if q in ancestors:
            assert (before[q] != after[q]) == changed, q
        else:
            assert before.get(q) == after.get(q), q
    assert after[path] == p.node(path).hex  # type: ignore[union-attr]
    assert change.paths == (path,)  # touched, changed or not (reference)
    assert set(change.hashes) == ancestors | {path}
