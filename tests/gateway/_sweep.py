"""The route sweep: malformed and hostile requests to every gateway route, as a table.

Shared by the in-process sweep (``tests/gateway/test_no_5xx_sweep.py``) and
the cluster sweep (``tests/cluster/test_no_5xx_sweep_cluster.py``). Every
:class:`Case` is one request; :func:`check` sends it and returns what is wrong
with the answer:

* never a 5xx: every answer here is to something the client sent, so a 5xx
  (which tells clients and load balancers to retry and pages an operator) is a
  bug;
* the status the table gives for it (a router may differ only where the case
  says so, e.g. the store's brace rule for process ids);
* an error answer is the typed shape ``{"error": {"code", "message"}}`` with
  the case's stable code, a member of :class:`~svit_cluster.errors.ErrorCode`;
* a ``/v1/control`` answer of 200 carries the case's protocol outcome (a
  guest failure at run time is a ``rejected`` outcome, not an HTTP error).

Placeholders in a case's path, query and body are replaced per run:
``$P`` (a process with ``counter`` and ``boom`` scripts), ``$C`` (a second
process), ``$D`` (a process the table deletes), ``$GONE`` (never created),
``$NEW`` (a fresh id per case), ``$FOREIGN`` (a process of another tenant),
``$BRACE`` (an id with the braces of a Redis hash tag).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from svit_cluster.errors import ErrorCode

__all__ = [
    "BOOM",
    "CASES",
    "COUNTER",
    "Case",
    "Ids",
    "check",
    "routes_of",
]

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
BOOM = '(define (main input) (panic "boom"))'

#: The codes an error answer may carry.
CODES = frozenset(str(c) for c in ErrorCode)


@dataclass(frozen=True)
class Ids:
    """The process ids of one sweep run (placeholders ``$P`` ...)."""

    run: str

    def local(self, name: str) -> str:
        """``svit://local/sweep-<run>/<name>``: a process of the sweep's own tenant."""
        return f"svit://local/sweep-{self.run}/{name}"

    @property
    def p(self) -> str:
        return self.local("p")

    @property
    def c(self) -> str:
        return self.local("c")

    @property
    def d(self) -> str:
        return self.local("d")

    def table(self, case: str) -> dict[str, str]:
        # longest first: "$GONE" must not be read as "$G" + "ONE"
        return {"$BRACE": self.local("brace{x}"),
                "$FOREIGN": f"svit://other/sweep-{self.run}/x",
                "$GONE": self.local("gone"), "$NEW": self.local(f"new-{case}"),
                "$P": self.p, "$C": self.c, "$D": self.d}


_NO_BODY: Any = object()


@dataclass(frozen=True)
class Case:
    """One request and the answer it must get.

    Attributes:
        name: unique, used as the pytest id.
        method, path: the route; ``path`` may carry a raw (already
            percent-encoded) query string.
        status: the expected HTTP status.
        code: the expected ``error.code`` (an error status), or the expected
            ``outcome.failure.code`` of a ``rejected`` control answer.
        query: query parameters (encoded by httpx).
        body: a JSON body (``json.dumps`` with ``NaN`` allowed, non-ASCII
            escaped, so lone surrogates travel as ``\\udXXX``).
        raw: body bytes sent as they are (instead of ``body``).
        token: ``tenant`` (tenant ``local``), ``admin``, ``none``, ``bad``
            (unknown bearer), ``basic`` (another scheme), ``latin1`` (a header
            that is not ASCII).
        headers: extra headers.
        outcome: for a control answer of 200, the expected ``outcome.status``.
        cluster_status, cluster_code: where the cluster router answers
            otherwise (with the reason in ``why``).
    """

    name: str
    method: str
    path: str
    status: int
    code: str | None = None
    query: dict[str, str] | None = None
    body: Any = _NO_BODY
    raw: bytes | None = None
    token: str = "tenant"
    headers: dict[str, str | bytes] = field(default_factory=dict)
    outcome: str | None = None
    cluster_status: int | None = None
    cluster_code: str | None = None
    why: str = ""

    def expected(self, cluster: bool) -> tuple[int, str | None]:
        if cluster and self.cluster_status is not None:
            return self.cluster_status, self.cluster_code
        return self.status, self.code


def _sub(value: Any, table: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, repl in table.items():
            value = value.replace(key, repl)
        return value
    if isinstance(value, list):
        return [_sub(v, table) for v in value]
    if isinstance(value, dict):
        return {_sub(k, table): _sub(v, table) for k, v in value.items()}
    return value


def _control(pid: str = "$P", *, rid: str = "r-1", version: Any = 0, script: str = "counter",
             value: Any = None, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "protocol": "svit-control@1", "client_id": "sweep", "request_id": rid,
        "process_id": pid, "expected_version": version,
        "command": {"operation": "activate", "script": script,
                    "input": value if value is not None else
                    {"type": "map", "value": {"by": {"type": "integer", "value": 1}}}},
    }
    doc.update(over)
    return doc


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _create_pid(status: int, code: str, pids: dict[str, str]) -> tuple[Case, ...]:
    """``POST /v1/processes`` with each process id of ``pids`` (case ``create-pid-<key>``),
    every one answered ``status`` with ``code``."""
    return tuple(Case(f"create-pid-{name}", "POST", "/v1/processes", status, code,
                      body={"process_id": pid}) for name, pid in pids.items())


_BIG = 1_000_000  # characters: within the 1 MiB byte cap with the JSON around them

CASES: tuple[Case, ...] = (
    # -- authentication (401) -----------------------------------------------------
    Case("auth-none", "POST", "/v1/processes", 401, "unauthenticated",
         body={"process_id": "$NEW"}, token="none"),
    Case("auth-unknown-token", "POST", "/v1/processes", 401, "unauthenticated",
         body={"process_id": "$NEW"}, token="bad"),
    Case("auth-basic-scheme", "GET", "/v1/processes/state", 401, "unauthenticated",
         query={"process_id": "$P"}, token="basic"),
    Case("auth-latin1-header", "GET", "/v1/processes/state", 401, "unauthenticated",
         query={"process_id": "$P"}, token="latin1"),
    Case("auth-observe-token-forged", "GET", "/v1/processes/events", 401, "unauthenticated",
         query={"process_id": "$P", "observe_token": "svo1.e30.AAAA"}, token="none"),
    Case("auth-observe-token-garbage", "GET", "/v1/processes/events", 401, "unauthenticated",
         query={"process_id": "$P", "observe_token": "svo1.!!!.%%%"}, token="none"),
    Case("auth-observe-token-non-ascii", "GET", "/v1/processes/events", 401,
         "unauthenticated", query={"process_id": "$P", "observe_token": "svo1.\u00e9.AAAA"},
         token="none"),
    Case("auth-observe-cookie-non-ascii", "GET", "/v1/processes/events", 401,
         "unauthenticated", query={"process_id": "$P"}, token="none",
         headers={"Cookie": b"svit_observe_token=svo1.\xe9.AAAA"}),
    Case("auth-observe-token-elsewhere", "POST", "/v1/processes", 401, "unauthenticated",
         query={"observe_token": "svo1.e30.AAAA"}, body={"process_id": "$NEW"}, token="none"),
    # -- create: POST /v1/processes -----------------------------------------------
    Case("create-bad-json", "POST", "/v1/processes", 400, "decode_error", raw=b'{"process_id": '),
    Case("create-not-utf8", "POST", "/v1/processes", 400, "decode_error",
         raw=b'{"process_id": "svit://local/\xff\xfe"}'),
    Case("create-array-body", "POST", "/v1/processes", 400, "decode_error", body=[1, 2]),
    Case("create-null-body", "POST", "/v1/processes", 400, "decode_error", raw=b"null"),
    Case("create-empty-body", "POST", "/v1/processes", 400, "decode_error", raw=b""),
    Case("create-text-plain", "POST", "/v1/processes", 400, "decode_error",
         raw=b'{"process_id": "$NEW"}', headers={"Content-Type": "text/plain"}),
    Case("create-deeply-nested-json", "POST", "/v1/processes", 400, "decode_error",
         raw=b'{"process_id": "$NEW", "memory": {"x": ' + _nested(100_000).encode() + b"}}"),
    Case("create-pid-not-string", "POST", "/v1/processes", 400, "decode_error",
         body={"process_id": 7}),
    *_create_pid(400, "invalid_process_id", {
        "no-scheme": "local/x",
        "too-long": "svit://local/" + "a" * 300,
        "whitespace": "svit://local/a b",
        "nul": "svit://local/a\x00b",
        "lone-surrogate": "svit://local/\ud800",
        "rtl-override": "svit://local/\u202egnp.exe",
        "zero-width": "svit://local/a\u200db",
        "fullwidth-scheme": "\uff53vit://local/x",
    }),
    *_create_pid(403, "forbidden", {
        "other-tenant": "$FOREIGN",
        "tenant-case": "svit://LOCAL/x",
        "tenant-userinfo": "svit://local@other/x",
        "no-tenant": "svit:///x",
    }),
    Case("create-smuggled-tenant-in-query", "POST", "/v1/processes", 403, "forbidden",
         query={"process_id": "$P"}, body={"process_id": "$FOREIGN"},
         why="the tenant check reads every place a process id is given"),
    Case("create-pid-dot-segments", "POST", "/v1/processes", 201,
         body={"process_id": "$NEW/../../../etc/passwd"},
         why="a process id is a name, never a path: dot segments are just characters"),
    Case("create-pid-hash-tag-braces", "POST", "/v1/processes", 201,
         body={"process_id": "$BRACE"},
         cluster_status=400, cluster_code="invalid_process_id",
         why="the Redis store keys a process under the hash tag {<id>}: no braces there"),
    Case("state-pid-hash-tag-braces", "GET", "/v1/processes/state", 200,
         query={"process_id": "$BRACE"},
         cluster_status=400, cluster_code="invalid_process_id",
         why="the refused create left no owner behind that a later request would meet"),
    Case("create-exists", "POST", "/v1/processes", 409, "conflict", body={"process_id": "$P"}),
    Case("create-memory-not-map", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": 5}),
    Case("create-memory-nan", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": {"x": float("nan")}}),
    Case("create-memory-infinity", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": {"x": float("-inf")}}),
    Case("create-memory-huge-int", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": {"x": 10**400}}),
    Case("create-memory-too-deep", "POST", "/v1/processes", 400, "invalid_value",
         raw=b'{"process_id": "$NEW", "memory": {"x": ' + _nested(200).encode() + b"}}"),
    Case("create-memory-too-many-entries", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": {f"k{i}": i for i in range(20_000)}}),
    Case("create-memory-lone-surrogate", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": {"x": "\udfff"}}),
    Case("create-memory-surrogate-key", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory": {"\ud83d": 1}}),
    Case("create-memory-huge-string", "POST", "/v1/processes", 201,
         body={"process_id": "$NEW", "memory": {"x": "a" * _BIG}},
         why="a value just under the byte cap and max_text_bytes is accepted"),
    Case("create-memory-encoding-unknown", "POST", "/v1/processes", 400, "decode_error",
         body={"process_id": "$NEW", "memory_encoding": "yaml"}),
    Case("create-memory-tagged-malformed", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "memory_encoding": "tagged",
               "memory": {"type": "map", "value": {"x": {"type": "integer", "value": 1.5}}}}),
    Case("create-scripts-not-map", "POST", "/v1/processes", 400, "decode_error",
         body={"process_id": "$NEW", "scripts": ["(define (main input) 1)"]}),
    Case("create-script-source-not-string", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "scripts": {"s": 42}}),
    Case("create-script-record-extra-field", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "scripts": {"s": {"source": "1", "x": 1}}}),
    Case("create-script-name-traversal", "POST", "/v1/processes", 400, "invalid_script_name",
         body={"process_id": "$NEW", "scripts": {"../../etc/passwd": "(define (main i) i)"}}),
    Case("create-script-name-empty", "POST", "/v1/processes", 400, "invalid_script_name",
         body={"process_id": "$NEW", "scripts": {"": "(define (main i) i)"}}),
    Case("create-script-does-not-compile", "POST", "/v1/processes", 422, "script_failed",
         body={"process_id": "$NEW", "scripts": {"bad": "(define (main input)"}},
         why="the caller's script is input: a compile error is the caller's to fix"),
    Case("create-script-bad-special-form", "POST", "/v1/processes", 422, "script_failed",
         body={"process_id": "$NEW", "scripts": {"bad": "(define)"}}),
    Case("create-script-lone-surrogate", "POST", "/v1/processes", 400, "invalid_value",
         body={"process_id": "$NEW", "scripts": {"s": '(define (main i) "\ud800")'}}),
    Case("create-script-too-big", "POST", "/v1/processes", 400, "resource_limit_exceeded",
         body={"process_id": "$NEW", "scripts": {"s": "; " + "x" * 70_000}}),
    Case("create-script-too-deep", "POST", "/v1/processes", 400, "resource_limit_exceeded",
         body={"process_id": "$NEW", "scripts": {"s": "(" * 200 + ")" * 200}}),
    Case("create-over-byte-cap", "POST", "/v1/processes", 413, "payload_too_large",
         body={"process_id": "$NEW", "memory": {"x": "a" * (1 << 20)}}),
    # -- fork: POST /v1/processes/fork --------------------------------------------
    Case("fork-unknown-parent", "POST", "/v1/processes/fork", 404, "not_found",
         body={"process_id": "$GONE", "new_process_id": "$NEW"}),
    Case("fork-child-exists", "POST", "/v1/processes/fork", 409, "conflict",
         body={"process_id": "$P", "new_process_id": "$C"}),
    Case("fork-onto-itself", "POST", "/v1/processes/fork", 409, "conflict",
         body={"process_id": "$P", "new_process_id": "$P"}),
    Case("fork-child-bad-id", "POST", "/v1/processes/fork", 400, "invalid_process_id",
         body={"process_id": "$P", "new_process_id": "svit://"}),
    Case("fork-child-other-tenant", "POST", "/v1/processes/fork", 403, "forbidden",
         body={"process_id": "$P", "new_process_id": "$FOREIGN"}),
    Case("fork-child-missing", "POST", "/v1/processes/fork", 400, "decode_error",
         body={"process_id": "$P"}),
    Case("fork-history-not-bool", "POST", "/v1/processes/fork", 400, "decode_error",
         body={"process_id": "$P", "new_process_id": "$NEW", "history": [True]}),
    # -- inbox: POST /v1/processes/inbox, /inbox/drop -----------------------------
    Case("inbox-unknown-process", "POST", "/v1/processes/inbox", 404, "not_found",
         body={"process_id": "$GONE", "message": "hi"}),
    Case("inbox-message-missing", "POST", "/v1/processes/inbox", 400, "decode_error",
         body={"process_id": "$P"}),
    Case("inbox-message-nan", "POST", "/v1/processes/inbox", 400, "invalid_value",
         body={"process_id": "$P", "message": {"x": float("nan")}}),
    Case("inbox-message-tagged-malformed", "POST", "/v1/processes/inbox", 400,
         "invalid_value", body={"process_id": "$P", "message_encoding": "tagged",
                                "message": {"type": "string"}}),
    Case("inbox-dedup-key-too-long", "POST", "/v1/processes/inbox", 400, "decode_error",
         body={"process_id": "$P", "message": "hi", "dedup_key": "k" * 513}),
    Case("inbox-dedup-key-not-string", "POST", "/v1/processes/inbox", 400, "decode_error",
         body={"process_id": "$P", "message": "hi", "dedup_key": 5}),
    Case("inbox-dedup-key-lone-surrogate", "POST", "/v1/processes/inbox", 400,
         "decode_error", body={"process_id": "$P", "message": "hi", "dedup_key": "\udc80"}),
    Case("inbox-message-lone-surrogate", "POST", "/v1/processes/inbox", 400, "invalid_value",
         body={"process_id": "$P", "message": "\ud800"}),
    Case("inbox-other-tenant", "POST", "/v1/processes/inbox", 403, "forbidden",
         body={"process_id": "$FOREIGN", "message": "hi"}),
    Case("inbox-smuggled-tenant-in-query", "POST", "/v1/processes/inbox", 403, "forbidden",
         query={"process_id": "$P"}, body={"process_id": "$FOREIGN", "message": "hi"}),
    Case("drop-no-head-named", "POST", "/v1/processes/inbox/drop", 400, "invalid_value",
         body={"process_id": "$C", "reason": "r"}),
    Case("drop-empty-reason", "POST", "/v1/processes/inbox/drop", 400, "decode_error",
         body={"process_id": "$C", "message_id": "m-1", "reason": ""}),
    Case("drop-reason-blank", "POST", "/v1/processes/inbox/drop", 400, "invalid_value",
         body={"process_id": "$C", "message_id": "m-1", "reason": "   "}),
    Case("drop-reason-lone-surrogate", "POST", "/v1/processes/inbox/drop", 400,
         "decode_error", body={"process_id": "$C", "message_id": "m-1", "reason": "\ud800"}),
    Case("drop-head-hash-too-long", "POST", "/v1/processes/inbox/drop", 400, "decode_error",
         body={"process_id": "$C", "head_hash": "f" * 129, "reason": "r"}),
    Case("drop-empty-inbox", "POST", "/v1/processes/inbox/drop", 409, "inbox_conflict",
         body={"process_id": "$C", "message_id": "m-1", "reason": "r"}),
    Case("drop-unknown-process", "POST", "/v1/processes/inbox/drop", 404, "not_found",
         body={"process_id": "$GONE", "message_id": "m-1", "reason": "r"}),
    # -- control (activate): POST /v1/control -------------------------------------
    Case("control-text-plain", "POST", "/v1/control", 415, "decode_error",
         raw=json.dumps(_control()).encode(), headers={"Content-Type": "text/plain"}),
    Case("control-bad-json", "POST", "/v1/control", 400, "decode_error", raw=b'{"protocol"'),
    Case("control-not-utf8", "POST", "/v1/control", 400, "decode_error", raw=b'{"\xff": 1}'),
    Case("control-deeply-nested", "POST", "/v1/control", 400, "decode_error",
         raw=_nested(100_000).encode()),
    Case("control-duplicate-keys", "POST", "/v1/control", 400, "decode_error",
         raw=b'{"protocol": "svit-control@1", "protocol": "svit-control@1"}'),
    Case("control-nan", "POST", "/v1/control", 400, "decode_error",
         body=_control(version=float("nan"))),
    Case("control-array", "POST", "/v1/control", 400, "decode_error", body=[_control()]),
    Case("control-missing-command", "POST", "/v1/control", 400, "decode_error",
         body={k: v for k, v in _control().items() if k != "command"}),
    Case("control-protocol-2", "POST", "/v1/control", 400, "decode_error",
         body=_control(protocol="svit-control@2")),
    Case("control-unknown-operation", "POST", "/v1/control", 400, "decode_error",
         body=_control(command={"operation": "delete", "script": "counter",
                                "input": {"type": "null"}})),
    Case("control-client-id-bad", "POST", "/v1/control", 400, "invalid_control_id",
         body=_control(client_id="a b")),
    Case("control-request-id-too-long", "POST", "/v1/control", 400, "invalid_control_id",
         body=_control(rid="r" * 129)),
    Case("control-request-id-unicode", "POST", "/v1/control", 400, "invalid_control_id",
         body=_control(rid="r\u00e9")),
    Case("control-pid-bad", "POST", "/v1/control", 400, "invalid_process_id",
         body=_control("svit://")),
    Case("control-pid-path-traversal", "POST", "/v1/control", 403, "forbidden",
         body=_control("svit://other/../local/x"),
         why="the tenant is the id's authority; dot segments do not change it"),
    Case("control-other-tenant", "POST", "/v1/control", 403, "forbidden",
         body=_control("$FOREIGN")),
    Case("control-unknown-process", "POST", "/v1/control", 404, "not_found",
         body=_control("$GONE")),
    Case("control-version-negative", "POST", "/v1/control", 400, "decode_error",
         body=_control(version=-1)),
    Case("control-version-2-64", "POST", "/v1/control", 400, "decode_error",
         body=_control(version=2**64)),
    Case("control-version-huge", "POST", "/v1/control", 400, "decode_error",
         body=_control(version=10**40)),
    Case("control-version-string", "POST", "/v1/control", 400, "decode_error",
         body=_control(version="0")),
    Case("control-version-float", "POST", "/v1/control", 400, "decode_error",
         body=_control(version=0.5)),
    Case("control-version-bool", "POST", "/v1/control", 400, "decode_error",
         body=_control(version=True)),
    Case("control-version-above-host-range", "POST", "/v1/control", 200,
         body=_control(rid="r-far", version=2**64 - 1), outcome="conflict",
         why="a u64 version no process can be at is a stale expectation: conflict"),
    Case("control-input-malformed", "POST", "/v1/control", 400, "decode_error",
         body=_control(value={"type": "integer", "value": 2**63})),
    Case("control-input-lone-surrogate", "POST", "/v1/control", 400, "decode_error",
         body=_control(value={"type": "string", "value": "\ud800"})),
    Case("control-script-unknown", "POST", "/v1/control", 200, "script_not_found",
         body=_control(rid="r-unknown", script="nope"), outcome="rejected"),
    Case("control-script-name-traversal", "POST", "/v1/control", 200, "invalid_script_name",
         body=_control(rid="r-traversal", script="../boom"), outcome="rejected"),
    Case("control-script-panics", "POST", "/v1/control", 200, "script_failed",
         body=_control(rid="r-boom", script="boom"), outcome="rejected",
         why="a guest failure at run time is a protocol outcome, answered in the body"),
    Case("control-input-type-error", "POST", "/v1/control", 200, "script_failed",
         body=_control(rid="r-type", value={"type": "map", "value": {
             "by": {"type": "string", "value": "x"}}}), outcome="rejected"),
    Case("control-input-huge-string", "POST", "/v1/control", 200,
         body=_control(rid="r-huge", script="boom",
                       value={"type": "string", "value": "a" * _BIG}), outcome="rejected",
         code="script_failed"),
    # -- state: GET /v1/processes/state -------------------------------------------
    Case("state-no-pid", "GET", "/v1/processes/state", 400, "decode_error"),
    Case("state-nested-body", "GET", "/v1/processes/state", 400, "decode_error",
         raw=_nested(100_000).encode(), why="a GET's body is never the caller's id"),
    Case("state-pid-bad", "GET", "/v1/processes/state", 400, "invalid_process_id",
         query={"process_id": "nope"}),
    Case("state-pid-nul", "GET", "/v1/processes/state?process_id=svit://local/a%00", 400,
         "invalid_process_id"),
    Case("state-pid-invalid-percent-utf8", "GET",
         "/v1/processes/state?process_id=svit://local/%FF%FE", 404, "not_found",
         why="undecodable percent-escapes are read as U+FFFD: a valid, unknown id"),
    Case("state-pid-encoded-slash-other-tenant", "GET",
         "/v1/processes/state?process_id=svit://other%2Fx", 403, "forbidden"),
    Case("state-unknown-process", "GET", "/v1/processes/state", 404, "not_found",
         query={"process_id": "$GONE"}),
    Case("state-other-tenant", "GET", "/v1/processes/state", 403, "forbidden",
         query={"process_id": "$FOREIGN"}),
    Case("state-path-relative", "GET", "/v1/processes/state", 400, "invalid_path",
         query={"process_id": "$P", "path": "memory/count"}),
    Case("state-path-dot-dot", "GET", "/v1/processes/state", 400, "invalid_path",
         query={"process_id": "$P", "path": "/memory/../lib"}),
    Case("state-path-too-long", "GET", "/v1/processes/state", 400, "invalid_path",
         query={"process_id": "$P", "path": "/memory/" + "a" * 5000}),
    Case("state-path-absent", "GET", "/v1/processes/state", 200,
         query={"process_id": "$P", "path": "/memory/absent"},
         why="an absent key below an existing map reads as null"),
    Case("state-path-into-scalar", "GET", "/v1/processes/state", 400, "invalid_path",
         query={"process_id": "$P", "path": "/memory/count/0"}),
    Case("state-path-nul", "GET", "/v1/processes/state?process_id=$P&path=/memory/%00", 200,
         why="a NUL is a key like any other: absent, null"),
    Case("state-path-unicode-digit-index", "GET", "/v1/processes/state", 400, "invalid_path",
         query={"process_id": "$P", "path": "/inbox/\u00b2"}),
    Case("state-root", "GET", "/v1/processes/state", 200, query={"process_id": "$P"}),
    # -- requests: GET /v1/processes/requests -------------------------------------
    Case("requests-client-id-bad", "GET", "/v1/processes/requests", 400, "decode_error",
         query={"process_id": "$P", "client_id": "a/b", "request_id": "r"}),
    Case("requests-request-id-missing", "GET", "/v1/processes/requests", 400, "decode_error",
         query={"process_id": "$P", "client_id": "c"}),
    Case("requests-unknown-process", "GET", "/v1/processes/requests", 404, "not_found",
         query={"process_id": "$GONE", "client_id": "c", "request_id": "r"}),
    Case("requests-ok", "GET", "/v1/processes/requests", 200,
         query={"process_id": "$P", "client_id": "c", "request_id": "r"}),
    # -- snapshot, residency ------------------------------------------------------
    Case("snapshot-unknown-process", "POST", "/v1/processes/snapshot", 404, "not_found",
         body={"process_id": "$GONE"}),
    Case("snapshot-pid-bad", "POST", "/v1/processes/snapshot", 400, "invalid_process_id",
         body={"process_id": ""}),
    Case("residency-missing", "PUT", "/v1/processes/residency", 400, "decode_error",
         body={"process_id": "$P"}),
    Case("residency-zero", "PUT", "/v1/processes/residency", 400, "decode_error",
         body={"process_id": "$P", "passivate_after_s": 0}),
    Case("residency-negative", "PUT", "/v1/processes/residency", 400, "decode_error",
         body={"process_id": "$P", "passivate_after_s": -5}),
    Case("residency-huge", "PUT", "/v1/processes/residency", 400, "decode_error",
         body={"process_id": "$P", "passivate_after_s": 1e308}),
    Case("residency-infinity", "PUT", "/v1/processes/residency", 400, "decode_error",
         body={"process_id": "$P", "passivate_after_s": float("inf")}),
    Case("residency-nan", "PUT", "/v1/processes/residency", 400, "decode_error",
         body={"process_id": "$P", "passivate_after_s": float("nan")}),
    Case("residency-unknown-process", "PUT", "/v1/processes/residency", 404, "not_found",
         body={"process_id": "$GONE", "passivate_after_s": 60}),
    # -- list: GET /v1/processes ---------------------------------------------------
    Case("list-limit-zero", "GET", "/v1/processes", 400, "decode_error", query={"limit": "0"}),
    Case("list-limit-overflow", "GET", "/v1/processes", 400, "decode_error",
         query={"limit": str(10**30)}),
    Case("list-limit-not-int", "GET", "/v1/processes", 400, "decode_error",
         query={"limit": "ten"}),
    Case("list-other-tenant", "GET", "/v1/processes", 403, "forbidden",
         query={"tenant": "other"}),
    Case("list-tenant-with-slash", "GET", "/v1/processes", 400, "decode_error",
         query={"tenant": "a/b"}),
    Case("list-cursor-unicode-digit", "GET", "/v1/processes", 200, query={"after": "\u00b2:\u00b2"},
         cluster_status=400, cluster_code="invalid_value",
         why="in process the cursor is the last id listed (any string); the cluster's is "
             "a node:SCAN cursor pair of ASCII decimals"),
    Case("list-cursor-scan-overflow", "GET", "/v1/processes", 200, query={"after": "0:" + "9" * 20},
         cluster_status=400, cluster_code="invalid_value", why="as list-cursor-unicode-digit"),
    Case("list-cursor-malformed", "GET", "/v1/processes", 200, query={"after": "x"},
         cluster_status=400, cluster_code="invalid_value", why="as list-cursor-unicode-digit"),
    # -- log: GET /v1/processes/log ---------------------------------------------
    Case("log-limit-zero", "GET", "/v1/processes/log", 400, "decode_error",
         query={"process_id": "$P", "limit": "0"}),
    Case("log-limit-over-max", "GET", "/v1/processes/log", 400, "decode_error",
         query={"process_id": "$P", "limit": "101"}),
    Case("log-pid-bad", "GET", "/v1/processes/log", 400, "invalid_process_id",
         query={"process_id": "local/x"}),
    Case("log-other-tenant", "GET", "/v1/processes/log", 403, "forbidden",
         query={"process_id": "$FOREIGN"}),
    Case("log-unknown-process", "GET", "/v1/processes/log", 404, "not_found",
         query={"process_id": "$GONE"}),
    Case("log-ok", "GET", "/v1/processes/log", 404, "not_found", query={"process_id": "$P"},
         cluster_status=200, why="the in-process router keeps its processes out of Redis"),
    # -- outbox: GET /v1/processes/outbox ---------------------------------------
    Case("outbox-limit-zero", "GET", "/v1/processes/outbox", 400, "decode_error",
         query={"process_id": "$P", "limit": "0"}),
    Case("outbox-limit-over-max", "GET", "/v1/processes/outbox", 400, "decode_error",
         query={"process_id": "$P", "limit": "201"}),
    Case("outbox-pid-bad", "GET", "/v1/processes/outbox", 400, "invalid_process_id",
         query={"process_id": "local/x"}),
    Case("outbox-other-tenant", "GET", "/v1/processes/outbox", 403, "forbidden",
         query={"process_id": "$FOREIGN"}),
    Case("outbox-unknown-process", "GET", "/v1/processes/outbox", 200,
         query={"process_id": "$GONE"}, why="documented: nothing committed, an empty list"),
    Case("outbox-ok", "GET", "/v1/processes/outbox", 200, query={"process_id": "$P"}),
    # -- timers: GET /v1/processes/timers, /timers/log, POST /timers/cancel -------
    Case("timers-limit-zero", "GET", "/v1/processes/timers", 400, "decode_error",
         query={"process_id": "$P", "limit": "0"}),
    Case("timers-limit-overflow", "GET", "/v1/processes/timers", 400, "decode_error",
         query={"process_id": "$P", "limit": str(10**30)}),
    Case("timers-limit-not-int", "GET", "/v1/processes/timers", 400, "decode_error",
         query={"process_id": "$P", "limit": "ten"}),
    Case("timers-cursor-malformed", "GET", "/v1/processes/timers", 400, "invalid_value",
         query={"process_id": "$P", "after": "x"}),
    Case("timers-cursor-unicode-digit", "GET", "/v1/processes/timers", 400, "invalid_value",
         query={"process_id": "$P", "after": "\u00b2/x"}),
    Case("timers-cursor-too-long", "GET", "/v1/processes/timers", 400, "decode_error",
         query={"process_id": "$P", "after": "1/" + "x" * 700}),
    Case("timers-unknown-process", "GET", "/v1/processes/timers", 200,
         query={"process_id": "$GONE"}, why="documented: no timers, an empty list"),
    Case("timers-other-tenant", "GET", "/v1/processes/timers", 403, "forbidden",
         query={"process_id": "$FOREIGN"}),
    Case("timers-log-limit-negative", "GET", "/v1/processes/timers/log", 400, "decode_error",
         query={"process_id": "$P", "limit": "-1"}),
    Case("timers-cancel-foreign-timer", "POST", "/v1/processes/timers/cancel", 400,
         "invalid_value", body={"process_id": "$P", "timer_id": "$C:1:0"}),
    Case("timers-cancel-not-a-timer-id", "POST", "/v1/processes/timers/cancel", 400,
         "invalid_value", body={"process_id": "$P", "timer_id": "$P:\u00b2:0"}),
    Case("timers-cancel-empty-id", "POST", "/v1/processes/timers/cancel", 400,
         "decode_error", body={"process_id": "$P", "timer_id": ""}),
    Case("timers-cancel-unknown", "POST", "/v1/processes/timers/cancel", 200,
         body={"process_id": "$P", "timer_id": "$P:99:0"}),
    # -- events -------------------------------------------------------------------
    Case("events-unknown-process", "GET", "/v1/processes/events", 404, "not_found",
         query={"process_id": "$GONE"}),
    Case("events-cursor-malformed", "GET", "/v1/processes/events", 400, "decode_error",
         query={"process_id": "$P", "after": "x-1"}),
    Case("events-cursor-unicode-digit", "GET", "/v1/processes/events", 400, "decode_error",
         query={"process_id": "$P", "after": "\u00b2"}),
    Case("events-cursor-above-u64", "GET", "/v1/processes/events", 400, "decode_error",
         query={"process_id": "$P", "after": "99999999999999999999-0"}),
    Case("events-last-event-id-unicode-digit", "GET", "/v1/processes/events", 400,
         "decode_error", query={"process_id": "$P"},
         headers={"Last-Event-ID": b"1-\xb2"},
         why="header bytes are read as Latin-1: 0xb2 is U+00B2, a Unicode digit"),
    Case("events-kinds-unknown", "GET", "/v1/processes/events", 400, "decode_error",
         query={"process_id": "$P", "kinds": "committed,nope"}),
    Case("events-recent-limit-huge", "GET", "/v1/processes/events/recent", 400,
         "decode_error", query={"process_id": "$P", "limit": "4097"}),
    Case("events-recent-session-odd", "GET", "/v1/processes/events/recent", 400,
         "decode_error", query={"process_id": "$P", "session": "../../\u00e9{x}*"}),
    Case("events-recent-session-ok", "GET", "/v1/processes/events/recent", 200,
         query={"process_id": "$P", "session": "s-1"}),
    Case("messages-recent-unknown", "GET", "/v1/processes/messages/recent", 404, "not_found",
         query={"process_id": "$GONE"}),
    Case("observe-token-ttl-zero", "POST", "/v1/processes/observe-token", 400,
         "decode_error", body={"process_id": "$P", "ttl_s": 0}),
    Case("observe-token-ttl-huge", "POST", "/v1/processes/observe-token", 400,
         "decode_error", body={"process_id": "$P", "ttl_s": 10**20}),
    Case("observe-token-unknown", "POST", "/v1/processes/observe-token", 404, "not_found",
         body={"process_id": "$GONE"}),
    # -- admin: dead letters, hosts -----------------------------------------------
    Case("dead-letters-tenant-token", "GET", "/v1/admin/dead-letters", 403, "forbidden"),
    Case("dead-letters-cursor-unicode-digit", "GET", "/v1/admin/dead-letters", 400,
         "invalid_value", query={"after": "\u00b2-1"}, token="admin"),
    Case("dead-letters-cursor-above-u64", "GET", "/v1/admin/dead-letters", 400,
         "invalid_value", query={"after": "99999999999999999999-0"}, token="admin"),
    Case("dead-letters-limit-zero", "GET", "/v1/admin/dead-letters", 400, "decode_error",
         query={"limit": "0"}, token="admin"),
    Case("redrive-nothing-named", "POST", "/v1/admin/dead-letters/redrive", 400,
         "decode_error", body={}, token="admin"),
    Case("redrive-ids-not-strings", "POST", "/v1/admin/dead-letters/redrive", 400,
         "decode_error", body={"ids": [1, 2]}, token="admin"),
    Case("redrive-id-unicode-digit", "POST", "/v1/admin/dead-letters/redrive", 400,
         "invalid_value", body={"ids": ["1-\u0661"]}, token="admin"),
    Case("redrive-id-above-u64", "POST", "/v1/admin/dead-letters/redrive", 400,
         "invalid_value", body={"ids": ["18446744073709551616-0"]}, token="admin"),
    Case("hosts-tenant-token", "GET", "/v1/admin/hosts", 403, "forbidden"),
    Case("summary-tenant-token", "GET", "/v1/admin/summary", 403, "forbidden"),
    Case("summary-no-token", "GET", "/v1/admin/summary", 401, "unauthenticated",
         token="none"),
    Case("summary-admin", "GET", "/v1/admin/summary", 200, token="admin"),
    # -- the console's static files (served before authentication) ----------------
    Case("console-unknown-file", "GET", "/ui/nope.js", 404, "not_found", token="none"),
    Case("console-dot-segments", "GET", "/ui/%2e%2e/%2e%2e/etc/passwd", 404, "not_found",
         token="none"),
    Case("console-post", "POST", "/ui/", 405, "invalid_value", body={}, token="none"),
    # -- protocol negotiation, unknown routes -------------------------------------
    Case("initialize-no-common-major", "POST", "/v1/initialize", 400, "decode_error",
         body={"protocols": ["svit-control@9"]}, token="none"),
    Case("initialize-protocols-not-list", "POST", "/v1/initialize", 400, "decode_error",
         body={"protocols": "svit-control@1"}, token="none"),
    Case("unknown-route", "GET", "/v1/nope", 404, "not_found"),
    Case("wrong-method", "PATCH", "/v1/processes", 405, "invalid_value",
         body={"process_id": "$P"}),
    # -- delete: DELETE /v1/processes (last: $D goes) -----------------------------
    Case("delete-pid-bad", "DELETE", "/v1/processes", 400, "invalid_process_id",
         query={"process_id": "svit://local/\u2028x"}),
    Case("delete-other-tenant", "DELETE", "/v1/processes", 403, "forbidden",
         query={"process_id": "$FOREIGN"}),
    Case("delete-unknown-process", "DELETE", "/v1/processes", 404, "not_found",
         query={"process_id": "$GONE"}),
    Case("delete-ok", "DELETE", "/v1/processes", 200, query={"process_id": "$D"}),
)


def _auth(token: str, tokens: dict[str, str]) -> dict[str, Any]:
    if token in ("tenant", "admin"):
        return {"Authorization": f"Bearer {tokens[token]}"}
    return {
        "none": {},
        "bad": {"Authorization": "Bearer not-a-token-of-this-gateway"},
        "basic": {"Authorization": "Basic dXNlcjpwYXNz"},
        "latin1": {"Authorization": b"Bearer \xff\xfe\xe9t\xe9"},
    }[token]


def check(client: httpx.Client, case: Case, ids: Ids, tokens: dict[str, str], *,
          cluster: bool) -> list[str]:
    """Send ``case`` and return what is wrong with its answer (empty: nothing).

    Args:
        client: the gateway's client (a starlette ``TestClient`` or an ``httpx.Client``).
        case: the request and its expected answer.
        ids: the run's process ids.
        tokens: ``{"tenant": ..., "admin": ...}`` (tenant ``local``).
        cluster: the gateway routes to the Ray router (``case.cluster_*`` apply).
    """
    table = ids.table(case.name)
    headers: dict[str, Any] = {**_auth(case.token, tokens), **case.headers}
    content: bytes | None = None
    if case.raw is not None:
        content = case.raw
        for key, repl in table.items():
            content = content.replace(key.encode(), repl.encode())
    elif case.body is not _NO_BODY:
        content = json.dumps(_sub(case.body, table)).encode()
    if content is not None:
        headers.setdefault("Content-Type", "application/json")
    path = _sub(case.path, table)
    params = _sub(case.query, table) if case.query is not None else None
    want_status, want_code = case.expected(cluster)
    with client.stream(case.method, path, params=params, content=content, headers=headers,
                       timeout=90) as resp:
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            text = "<event stream>"
            body: Any = None
        else:
            resp.read()
            text = resp.text[:300]
            try:
                body = resp.json()
            except ValueError:
                body = None
        status = resp.status_code
    problems: list[str] = []
    if status >= 500:
        problems.append(f"server error {status}: {text}")
    elif status != want_status:
        problems.append(f"status {status}, want {want_status}: {text}")
    if status >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        if not (isinstance(err, dict) and isinstance(err.get("code"), str)
                and isinstance(err.get("message"), str)):
            problems.append(f"not the typed error shape: {text}")
        elif err["code"] not in CODES:
            problems.append(f"unknown error code {err['code']!r}")
        elif status == want_status and want_code is not None and err["code"] != want_code:
            problems.append(f"code {err['code']!r}, want {want_code!r}: {text}")
    elif case.outcome is not None:
        outcome = body.get("outcome", {}) if isinstance(body, dict) else {}
        got = (outcome.get("status"), (outcome.get("failure") or {}).get("code"))
        want = (case.outcome, want_code if case.outcome == "rejected" else None)
        if got != want:
            problems.append(f"outcome {got}, want {want}: {text}")
    return problems


def setup_processes(client: httpx.Client, ids: Ids, tokens: dict[str, str]) -> None:
    """Create ``$P`` (scripts ``counter`` and ``boom``), ``$C`` and ``$D``."""
    auth = {"Authorization": f"Bearer {tokens['tenant']}"}
    for pid in (ids.p, ids.c, ids.d):
        r = client.post("/v1/processes", headers=auth, timeout=90, json={
            "process_id": pid, "memory": {"count": 0},
            "scripts": {"counter": COUNTER, "boom": BOOM}})
        assert r.status_code == 201, r.text


def routes_of(app: Any) -> Iterator[tuple[str, str]]:
    """``(method, path)`` of every API route of the gateway app ``app`` (the
    FastAPI app under its middleware layers, each keeping ``.app``)."""
    from fastapi.routing import APIRoute

    while not hasattr(app, "routes"):
        app = app.app

    def walk(routes: Any) -> Iterator[APIRoute]:
        for route in routes:
            if isinstance(route, APIRoute):
                yield route
            elif (inner := getattr(route, "original_router", None)) is not None:
                yield from walk(inner.routes)

    for route in walk(app.routes):
        for method in route.methods:
            yield method, route.path
