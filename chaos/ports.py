"""The port-calling workload's server side: a recording HTTP server, its check and its figures.

In a ``--workload ports`` run every activation makes one ``http`` port call
(``port-call "http"``, see :data:`~svit_chaos.workload.PORT_SCRIPT`) to a
:class:`PortServer` the harness starts on loopback (the only host on the
cluster's ``http`` allowlist) and writes the answer's body to
``/memory/port``, so the stored record of each commit carries the port result
it committed.

The server records every request with its ``Idempotency-Key``,
``Svit-Fencing-Token``, ``Svit-Process``, ``Svit-Version`` and
``Svit-Call-Index`` headers and its body (the workload sends its request id
as the call's body, so the call's input -- and hence its key -- differs from
request to request). Each request whose key it has not seen yet applies one
*effect* (a global counter) and is answered ``e<n>:<request body>``. A
request whose key it has seen is a **repetition** (the same request's call at
the same process, version and call index ran again: a retry after an unknown
outcome, a failover, a fenced owner). With
``dedup=True`` (a well-behaved server) a repetition applies nothing and gets
the first answer again; with ``dedup=False`` (the negative control) it
applies a second effect and gets a new answer.

After the run the harness writes the server's records as one ``ports``
history event (:meth:`PortServer.event`); :func:`check_ports` (invariant
``ports``) then proves, from that event and the stored logs,

* every committed port result equals the server's first answer for the key
  of the committed call -- the requests whose ``Svit-*`` headers name the
  entry's process, version and call 0 and whose body is the entry's request
  id -- and that answer was made for the entry's own request (not for another
  request that sent the same key: its own effect would never be applied), and
* no key applied its effect more than once (a double effect),

and :func:`ports_figures` counts the calls, repetitions (harmless or not) and
the calls made by a superseded owner -- a request whose token is not the token
of the entry committed at its version -- and how many of those the owner
logged (``port calls not committed`` warnings, :func:`owner_log_lines`).
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .context import Anomaly, Context
from .history import Event
from .logfiles import texts_with

__all__ = ["PORT_PATH", "PortServer", "check_ports", "owner_log_lines", "ports_figures"]

#: Where the ports workload script writes the port result's body.
PORT_PATH = "/memory/port"
#: Request bodies recorded per request, at most (the workload sends request ids).
_MAX_BODY = 256
#: Requests kept at most (a long run makes a few per second per client).
_MAX_REQUESTS = 200_000
_LOGGED = re.compile(
    r"port calls not committed \(([^)]*)\): process=(\S+) version=(\d+) token=(\d+) keys=(\S*)")


class PortServer:
    """A loopback HTTP server that records each request and dedups by idempotency key.

    Args:
        dedup: answer a repeated key with its first answer and apply nothing
            (False: apply and answer every request anew -- the negative control).
        delay_s: seconds to wait before answering (0..5), which widens the
            window in which a fault hits an owner between a port call and its
            commit.

    Use :meth:`start` / :meth:`close`; :attr:`url` is ``http://127.0.0.1:<port>/effect``
    and :attr:`allow_host` the ``host:port`` allowlist entry.
    """

    def __init__(self, *, dedup: bool = True, delay_s: float = 0.0) -> None:
        if not 0 <= delay_s <= 5:
            raise ValueError("delay_s must be within 0..5 seconds")
        self.dedup = dedup
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._first: dict[str, str] = {}
        self._effects = 0
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/effect"

    @property
    def allow_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> PortServer:
        """Listen on a free loopback port, serving from a daemon thread."""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = min(int(self.headers.get("Content-Length") or 0), 64 * 1024)
                body = self.rfile.read(size).decode("utf-8", "replace")
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                answer = outer.handle(self.headers.get("Idempotency-Key"),
                                      self.headers.get("Svit-Fencing-Token"), body,
                                      process=self.headers.get("Svit-Process"),
                                      version=self.headers.get("Svit-Version"),
                                      call_index=self.headers.get("Svit-Call-Index"))
                data = answer.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="svit-chaos-port-server", daemon=True)
        self._thread.start()
        return self

    def handle(self, key: str | None, token: str | None, body: str, *,
               process: str | None = None, version: str | None = None,
               call_index: str | None = None) -> str:
        """Record one request and answer it (see the module docstring).

        Args:
            key, token: the ``Idempotency-Key`` and ``Svit-Fencing-Token`` headers.
            body: the request body (the workload's request id).
            process, version, call_index: the ``Svit-Process`` (percent-encoded),
                ``Svit-Version`` and ``Svit-Call-Index`` headers, recorded as
                ``process`` (decoded), ``version`` and ``call_index`` (int or None).
        """
        with self._lock:
            first = self._first.get(key) if key else None
            applied = first is None or not self.dedup
            if applied:
                self._effects += 1
                answer = f"e{self._effects}:{body[:_MAX_BODY]}"
                if key and first is None:
                    self._first[key] = answer
            else:
                assert first is not None
                answer = first
            if len(self.requests) < _MAX_REQUESTS:
                self.requests.append({
                    "t": round(time.monotonic() - self._t0, 4), "key": key or "",
                    "token": _int(token),
                    "process": unquote(process) if process else None,
                    "version": _int(version), "call_index": _int(call_index),
                    "body": body[:_MAX_BODY], "applied": applied, "answer": answer})
            return answer

    def event(self) -> dict[str, Any]:
        """The ``ports`` history event's fields: ``url``, ``dedup``, ``requests``,
    ``truncated`` (the harness adds ``owner_logs``, see :func:`owner_log_lines`)."""
        with self._lock:
            return {"url": self.url, "dedup": self.dedup, "requests": list(self.requests),
                    "truncated": len(self.requests) >= _MAX_REQUESTS}

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def owner_log_lines(root: Path, *, max_bytes: int = 64 * 1024 * 1024) -> list[dict[str, Any]]:
    """The ``port calls not committed`` warnings found in the files under ``root``.

    Returns:
        ``[{"cause", "process", "version", "token", "keys"}]`` (cause ``fenced``
        or ``outcome unknown``); files larger than ``max_bytes`` are skipped.
    """
    found: list[dict[str, Any]] = []
    for text in texts_with(root, "port calls not committed", max_bytes=max_bytes):
        for m in _LOGGED.finditer(text):
            found.append({"cause": m.group(1), "process": m.group(2),
                          "version": int(m.group(3)), "token": int(m.group(4)),
                          "keys": [k for k in m.group(5).split(",") if k]})
    return found


def _event(history: Sequence[Event], kind: str) -> Event | None:
    for ev in history:
        if ev.get("kind") == kind:
            return ev
    return None


def _key_map(requests: Iterable[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """``idempotency key -> (process, version)`` from the first request's ``Svit-*`` headers."""
    out: dict[str, tuple[str, int]] = {}
    for r in requests:
        key, process, version = str(r.get("key") or ""), r.get("process"), r.get("version")
        if key and key not in out and isinstance(process, str) and isinstance(version, int):
            out[key] = (process, version)
    return out


def _by_key(requests: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        out[str(r.get("key") or "")].append(r)
    return out


def _calls_at(requests: Iterable[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """``(process, version) -> requests`` made by call 0 there (from the ``Svit-*`` headers)."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        process, version = r.get("process"), r.get("version")
        if isinstance(process, str) and isinstance(version, int) and r.get("call_index") == 0:
            out[(process, version)].append(r)
    return out


def _committed_port(entry: Any) -> str | None:
    record = entry.record
    if record is None:
        return None
    for m in record.mutations:
        if m.op == "set" and m.path == PORT_PATH and isinstance(m.value, str):
            return m.value
    return None


class _Committed:
    """One committed port result, resolved against the server's records.

    ``key`` is the key of the requests made at the entry's (process, version),
    call 0, whose body is the entry's request id (None: the server saw no such
    request); ``first`` that key's first answer; ``made_for`` the body of the
    request whose applied effect produced the committed answer (None: no
    applied request answered it).
    """

    __slots__ = ("first", "key", "made_for", "result", "seen")

    def __init__(self, entry: Any, result: str, at: list[dict[str, Any]],
                 keys: dict[str, list[dict[str, Any]]], made_for: dict[str, str]) -> None:
        self.result = result
        if entry.rid is not None:
            mine = [r for r in at if r.get("body") == entry.rid]
        else:  # no request id in the record: any call at that version answered so
            mine = [r for r in at if keys[str(r.get("key") or "")][0]["answer"] == result]
        self.key: str | None = str(mine[0].get("key") or "") if mine else None
        self.seen = keys.get(self.key, []) if self.key is not None else []
        self.first: str | None = self.seen[0]["answer"] if self.seen else None
        self.made_for = made_for.get(result)

    def other_request(self, rid: str | None) -> bool:
        """Whether the committed answer was made for another request than ``rid``."""
        return rid is not None and self.made_for is not None and self.made_for != rid


def _made_for(requests: Iterable[dict[str, Any]]) -> dict[str, str]:
    """``answer -> body`` of the request whose applied effect produced that answer."""
    return {str(r["answer"]): str(r.get("body")) for r in requests if r.get("applied")}


def check_ports(ctx: Context) -> Iterator[Anomaly]:
    """(ports) Committed port results equal the server's first answers for their own
    request; no double effect.

    For each committed entry with a port result, the committed call is found by
    the recorded ``Svit-Process`` / ``Svit-Version`` / ``Svit-Call-Index``
    headers and the request body (the entry's request id); the result must be
    the first answer for that call's key, and that answer must have been made
    for the entry's own request (not for another request that sent the same
    key). Skipped when the history has no ``ports`` event (another workload).
    """
    ev = _event(ctx.history, "ports")
    if ev is None:
        return
    line = int(ev.get("line", 0))
    requests = list(ev.get("requests") or ())
    keys = _by_key(requests)
    at = _calls_at(requests)
    made_for = _made_for(requests)
    where = _key_map(requests)
    for process in ctx.processes:
        for version, entry in sorted(ctx.chain(process).items()):
            result = _committed_port(entry)
            if result is None:
                continue
            c = _Committed(entry, result, at.get((process, version), []), keys, made_for)
            if c.key is None or c.first is None:
                yield Anomaly("ports", process, f"version {version} committed a port result "
                              "the test server never answered for its request "
                              f"({entry.rid or 'no request id'})", versions=(version,),
                              tokens=(entry.token,), lines=(line,))
                continue
            if result != c.first:
                yield Anomaly("ports", process,
                              f"version {version} committed the port result {result[:60]!r}, "
                              f"not the server's first answer {c.first[:60]!r} for its key "
                              f"({len(c.seen)} requests, "
                              f"{sum(bool(r['applied']) for r in c.seen)} effects)",
                              versions=(version,), tokens=(entry.token,), lines=(line,))
            elif c.other_request(entry.rid):
                yield Anomaly("ports", process,
                              f"version {version} ({entry.rid}) committed the answer "
                              f"{result[:60]!r} made for another request ({c.made_for}): "
                              "both sent the same key, so its own effect was never applied",
                              versions=(version,), tokens=(entry.token,), lines=(line,))
    for key, seen in sorted(keys.items()):
        applied = sum(bool(r.get("applied")) for r in seen)
        if key and applied > 1:
            owner, version = where.get(key, ("", 0))
            yield Anomaly("ports", owner or None,
                          f"double effect: key {key[:21]}.. applied {applied} times "
                          f"({len(seen)} requests)", versions=(version,) if version else (),
                          tokens=tuple(sorted({int(r["token"]) for r in seen
                                               if isinstance(r.get("token"), int)})),
                          lines=(line,))


def ports_figures(ctx: Context) -> dict[str, Any] | None:
    """The report's port-call figures, or None without a ``ports`` event.

    Keys: ``port_calls`` (requests at the server), ``keys`` (distinct keys),
    ``repeated_keys`` and ``repeat_calls`` (requests beyond the first per key),
    ``repeats_harmless`` / ``repeats_harmful`` (repeated keys whose effect was
    applied once / more than once), ``repeats_other_body`` (repeated keys whose
    requests carried different bodies: two requests made byte-identical calls,
    or -- before the key covered the call's input -- another request computed
    the same version), ``committed`` / ``committed_matching`` (committed port
    results and those equal to the first answer for the committed call's key,
    the call found by its ``Svit-*`` headers and request id),
    ``committed_without_request`` (committed results whose request the server
    never saw at that version), ``committed_other_request_answer`` (committed
    answers whose effect was applied for another request id: that request sent
    the same key; 0 with the key covering the input),
    ``requests_applied_under_two_keys`` (request
    ids whose effect the server applied under two keys: a fenced attempt's and
    the retry's at a later version), ``effects_applied``, ``calls_by_superseded_owner``
    (a request whose token differs from the committing entry's token, or whose
    version never committed), ``superseded_calls_logged`` (those whose (key,
    token) an owner logged as not committed), ``owner_log_lines`` (the
    owners' ``port calls not committed`` warnings by cause, from the event's
    ``owner_logs``).
    """
    ev = _event(ctx.history, "ports")
    if ev is None:
        return None
    owner_logs: list[dict[str, Any]] = list(ev.get("owner_logs") or ())
    requests = list(ev.get("requests") or ())
    keys = _by_key(requests)
    at_calls = _calls_at(requests)
    made_for = _made_for(requests)
    repeated = {k: v for k, v in keys.items() if len(v) > 1}
    harmful = sum(1 for v in repeated.values() if sum(bool(r["applied"]) for r in v) > 1)
    committed = matching = foreign = missing = 0
    for process in ctx.processes:
        for version, entry in ctx.chain(process).items():
            result = _committed_port(entry)
            if result is None:
                continue
            committed += 1
            c = _Committed(entry, result, at_calls.get((process, version), []), keys,
                           made_for)
            missing += c.key is None
            matching += c.first == result
            foreign += c.other_request(entry.rid)
    applied_keys: dict[str, set[str]] = defaultdict(set)
    for r in requests:
        if r.get("applied"):
            applied_keys[str(r.get("body"))].add(str(r.get("key")))
    logged = {(k, int(line["token"])) for line in owner_logs for k in line["keys"]}
    superseded = superseded_logged = 0
    by_cause: dict[str, int] = defaultdict(int)
    for line in owner_logs:
        by_cause[str(line["cause"])] += 1
    for key, seen in keys.items():
        for r in seen:
            proc, ver = r.get("process"), r.get("version")
            at = (ctx.chain(proc).get(ver)
                  if isinstance(proc, str) and isinstance(ver, int) else None)
            token = r.get("token")
            if at is not None and token == at.token:
                continue
            superseded += 1
            superseded_logged += (key, token) in logged
    return {
        "dedup": bool(ev.get("dedup")),
        "port_calls": len(requests),
        "keys": len(keys),
        "repeated_keys": len(repeated),
        "repeat_calls": sum(len(v) - 1 for v in repeated.values()),
        "repeats_harmless": len(repeated) - harmful,
        "repeats_harmful": harmful,
        "repeats_other_body": sum(1 for v in repeated.values()
                                  if len({r["body"] for r in v}) > 1),
        "effects_applied": sum(bool(r["applied"]) for r in requests),
        "committed": committed,
        "committed_matching": matching,
        "committed_without_request": missing,
        "committed_other_request_answer": foreign,
        "requests_applied_under_two_keys": sum(len(k) > 1 for k in applied_keys.values()),
        "calls_by_superseded_owner": superseded,
        "superseded_calls_logged": superseded_logged,
        "owner_log_lines": dict(sorted(by_cause.items())),
        "truncated": bool(ev.get("truncated")),
    }
