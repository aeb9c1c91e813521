"""A dict-backed fake :class:`~svit_cluster.lisp.GuestHost` for interpreter tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, NotFound
from svit_cluster.lisp import Meter, compile_script
from svit_cluster.values import Limits, Script, kind_of

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""


def _segments(path: str) -> list[str]:
    if type(path) is not str or not path.startswith("/"):
        raise InvalidInput(f"invalid path {path!r}", code=ErrorCode.INVALID_PATH)
    if path == "/":
        return []
    segs = path[1:].split("/")
    if any(s in ("", ".", "..") for s in segs):
        raise InvalidInput(f"invalid path {path!r}", code=ErrorCode.INVALID_PATH)
    return segs


def _check(value: Any, depth: int = 0) -> None:
    kind_of(value)
    if depth > 32:
        raise LimitExceeded("value is nested too deeply (max_value_depth)")
    if type(value) is list:
        for v in value:
            _check(v, depth + 1)
    elif type(value) is dict:
        for v in value.values():
            _check(v, depth + 1)


class FakeHost:
    """An in-memory namespace: ``/memory`` (writable), ``/lib`` (scripts), ``/system``."""

    def __init__(
        self,
        memory: dict[str, Any] | None = None,
        lib: dict[str, str] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.root: dict[str, Any] = {
            "memory": copy.deepcopy(memory or {}),
            "lib": {k: Script(v) for k, v in (lib or {}).items()},
            "system": {"identity": {"address": "svit://local/test"}},
        }
        self.logs: list[dict[str, Any]] = []
        self.messages: list[tuple[str, Any]] = []
        self.meter: Meter | None = None
        self.depth = 0

    def _get(self, path: str) -> Any:
        node: Any = self.root
        for seg in _segments(path):
            if type(node) is dict:
                if seg not in node:
                    return None
                node = node[seg]
            elif type(node) is list:
                if not seg.isdigit() or int(seg) >= len(node):
                    return None
                node = node[int(seg)]
            else:
                raise InvalidInput(f"path crosses a scalar: {path}", code=ErrorCode.INVALID_PATH)
        return node

    def read(self, path: str) -> Any:
        return self._get(path)

    def discover(self, path: str) -> Any:
        node = self._get(path)
        if type(node) is dict:
            return sorted(node)
        if type(node) is list:
            return [str(i) for i in range(len(node))]
        raise InvalidInput(f"cannot discover {path}", code=ErrorCode.INVALID_PATH)

    def stat(self, path: str) -> Any:
        node = self._get(path)
        if node is None:
            return None
        return {"kind": kind_of(node), "path": path}

    def write(self, path: str, value: Any) -> None:
        segs = _segments(path)
        if len(segs) == 2 and segs[0] == "lib":
            if type(value) is dict and type(value.get("source")) is str:
                value = Script(value["source"], value.get("documentation"))
            if type(value) is not Script:
                raise InvalidInput("library writes need a script", code=ErrorCode.INVALID_VALUE)
            self.root["lib"][segs[1]] = value
            return
        if len(segs) < 2 or segs[0] != "memory":
            raise InvalidInput(f"cannot write {path}", code=ErrorCode.INVALID_PATH)
        _check(value)
        parent = self._get("/" + "/".join(segs[:-1]))
        if type(parent) is not dict:
            raise InvalidInput(f"parent of {path} is not a map", code=ErrorCode.INVALID_PATH)
        parent[segs[-1]] = value

    def remove(self, path: str) -> None:
        segs = _segments(path)
        parent = self._get("/" + "/".join(segs[:-1])) if segs else None
        if type(parent) is not dict or segs[-1] not in parent:
            raise NotFound(f"nothing to remove at {path}")
        del parent[segs[-1]]

    def exec(self, script: str, input: Any) -> Any:
        name = script[len("/lib/") :] if script.startswith("/lib/") else script
        found = self.root["lib"].get(name)
        if type(found) is not Script:
            raise NotFound(f"script {name} not found", code=ErrorCode.SCRIPT_NOT_FOUND)
        if self.depth + 1 > self.limits.max_exec_depth:
            raise LimitExceeded("nested exec depth exceeded (max_exec_depth)")
        assert self.meter is not None
        program = compile_script(found.source, name=name, limits=self.limits)
        self.depth += 1
        try:
            return program.run_main(input, self, self.meter)
        finally:
            self.depth -= 1

    def send(self, to: str, body: Any) -> str:
        self.messages.append((to, body))
        return f"svit://local/test:1:{len(self.messages) - 1}"

    def log_info(self, message: str, fields: dict[str, Any] | None = None) -> None:
        self.logs.append({"message": message, "fields": dict(fields or {})})


def run(
    source: str,
    input: Any = None,
    *,
    memory: dict[str, Any] | None = None,
    lib: dict[str, str] | None = None,
    limits: Limits | None = None,
    clock: Callable[[], float] | None = None,
    name: str = "subject",
) -> tuple[Any, FakeHost, Meter]:
    """Compile and run ``source``; return ``(output, host, meter)``."""
    limits = limits or Limits()
    host = FakeHost(memory, lib, limits)
    meter = Meter(limits, clock=clock) if clock is not None else Meter(limits)
    host.meter = meter
    program = compile_script(source, name=name, limits=limits)
    return program.run_main(input, host, meter), host, meter


def value(source_expr: str, input: Any = None, **kwargs: Any) -> Any:
    """Evaluate one expression as the body of ``main`` and return the output."""
    out, _, _ = run(f"(define (main input) {source_expr})", input, **kwargs)
    return out
