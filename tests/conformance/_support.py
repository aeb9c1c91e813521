"""Helpers for the conformance tests (no fixtures): build snapshots whose root hash is
recomputed after an edit, so only the content validation can refuse them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from svit_cluster.process import Process, Script, decode_value
from svit_cluster.process._tree import MapNode, Node, ScriptNode, node_from_value

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""

#: Generous bounds: the helper hashes what it is given, it does not validate.
_BIG = {"max_depth": 1000, "max_entries": 10_000_000, "max_text_bytes": 1 << 30}


def tagged_root_hash(root: dict[str, Any]) -> str:
    """The root hash of a tagged root map, computed without any namespace rule."""
    items: dict[str, Node] = {}
    for key, raw in root["value"].items():
        if key == "lib":
            lib: dict[str, Node] = {}
            for name, entry in raw["value"].items():
                script = decode_value(entry)
                assert isinstance(script, Script)
                lib[name] = ScriptNode(script)
            items[key] = MapNode.from_items(lib)
        else:
            items[key] = node_from_value(decode_value(raw, **_BIG), **_BIG)
    return MapNode.from_items(items).hex


def tampered(proc: Process, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """``proc``'s snapshot after ``edit(doc)``, with the root hash recomputed."""
    doc = json.loads(proc.snapshot())
    doc = copy.deepcopy(doc)
    edit(doc)
    doc["root_hash"] = tagged_root_hash(doc["root"])
    return json.dumps(doc).encode()


def sys_section(doc: dict[str, Any]) -> dict[str, Any]:
    """The tagged ``/system`` map's entries of a snapshot document."""
    return doc["root"]["value"]["system"]["value"]  # type: ignore[no-any-return]


def counter_process(pid: str = "svit://conformance/counter") -> Process:
    return Process.create(pid, memory={"count": 0}, scripts={"counter": COUNTER})
