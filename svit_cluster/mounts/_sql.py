"""The ``sql-query`` mount: the rows of one operator-configured PostgreSQL query.

The operator configures a DSN, one query and its parameters; the guest sees
the result below ``/mounts/<name>`` as an array of maps ``{column: value}``
(``/mounts/<name>/0/name`` is the ``name`` of the first row). Reference
semantics: ``Mount::turso_query`` in ``crates/svit/src/mounts.rs`` (rows
materialized, kind ``turso-query``, ``cache`` locality, read-only); here the
driver is psycopg 3 against PostgreSQL, and the rows are re-read after a TTL.

Materialization. The query runs on first use (``stat``/``list``/``read``), on
a fresh connection that is closed afterwards (the mount holds no connection,
hence ``cache`` locality), and its outcome -- the rows or the failure -- is
served for ``cache_ttl_s`` seconds; the first use after that runs it again. So
a mount costs the database at most one run per TTL, also when the run fails
and a guest keeps reading. The rows are served by :class:`ValueMount`.

Safety:

- the DSN is authority: it is kept in this object only; the descriptor's
  ``source`` is the operator's ``label``, and no error or log line carries the
  DSN or its password (a connection failure's libpq text is logged with both
  removed, and never put in the error a guest sees);
- ``params`` are bound by the driver (``%s`` placeholders), never formatted
  into the SQL; without params the query is sent as is (a literal ``%`` then
  needs no escaping);
- the query runs in a ``READ ONLY`` transaction, over the extended protocol
  (one statement: ``SELECT 1; COMMIT; INSERT ...`` is refused by the server's
  parser), with ``statement_timeout`` set (``SET LOCAL`` through
  ``set_config``) before every round trip to what is left of
  ``statement_timeout_ms``, so the whole run, not each fetch, is bounded;
- rows are fetched from a server-side cursor in batches of at most
  :data:`BATCH_ROWS`, and the run stops at the first row over a bound.

Bounds (``limits`` are the process's; a failure is :class:`LimitExceeded`
with ``fields["limit"]``):

- more than ``max_value_entries`` rows -> ``"mount entries"``;
- more than ``max_tree_nodes`` values in the result (the array, each row map,
  each cell, each value inside a JSON cell) -> ``"mount entries"``;
- more than ``min(max_bytes, max_tree_text_bytes)`` UTF-8 bytes of text in
  the result (text values, column names once per row, keys and text inside
  JSON) -> ``"mount bytes"``;
- one text value over ``max_text_bytes`` -> ``"mount leaf bytes"``.

Column types -> values:

- ``NULL`` -> None; ``boolean`` -> bool; ``text``/``varchar``/enums and every
  type psycopg reads as text -> text;
- integers -> int: PostgreSQL integers are at most 64-bit, so they always fit;
  an integer outside i64 can only come from JSON and becomes a float, as in
  :func:`svit_cluster.values.from_plain_json`;
- ``real``/``double precision`` -> float; ``numeric`` (Python ``Decimal``) ->
  float, also when integral (``sum(bigint)`` is numeric: cast it to
  ``bigint`` in the query to get an int); NaN or infinity -> :class:`InvalidMount`;
- ``date``/``time``/``timestamp``/``timestamptz`` -> ISO 8601 text
  (``isoformat()``, with the offset when the type has one); ``uuid`` -> text;
- ``json``/``jsonb`` -> the plain value, checked with :func:`check_plain`
  (depth counted from the cell: ``max_value_depth`` - 2); arrays -> arrays of
  the converted elements;
- ``bytea`` -> ``InvalidMount("bytea columns are not supported")``; anything
  else psycopg loads as a Python object (``interval``, ``inet``, ranges) ->
  :class:`InvalidMount` naming the column (cast it to text in the query).

Column names must be non-empty, unique, and usable as one mount path segment
(not ``.`` or ``..``, no ``/``, ``\\`` or NUL); a query with no columns is refused.

Failures (none carries the DSN):

- cannot connect, connection lost, server shutting down, out of resources,
  serialization failures -> :class:`MountUnavailable`;
- the server cancels the query at the timeout (``QueryCanceled``), or the
  time is used up between fetches -> ``MountUnavailable("... query timed out
  after N ms")``;
- the configured query writes (an ``INSERT``, a function that writes): the
  read-only transaction refuses it -> :class:`MountDenied`. A statement that
  cannot back a cursor (``INSERT``, ``UPDATE``, ``CREATE``, ``EXPLAIN``...) is
  run once more, in the same kind of read-only transaction, to tell a write
  (:class:`MountDenied`) from any other statement (:class:`InvalidMount`);
- any other SQL error in the query, a DSN that does not parse, a bad column
  -> :class:`InvalidMount`;
- psycopg not installed on this host -> :class:`MountUnavailable` (it is the
  ``mounts`` extra; nothing imports it before a query runs).
"""

from __future__ import annotations

import builtins
import datetime
import decimal
import logging
import math
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from svit_cluster.errors import (
    ConfigurationError,
    InvalidInput,
    InvalidMount,
    LimitExceeded,
    MountDenied,
    MountUnavailable,
    SvitError,
)
from svit_cluster.mounts._model import MountDescriptor, MountFence, MountNode, MountPath
from svit_cluster.mounts._value import ValueMount, check_plain
from svit_cluster.values import I64_MAX, I64_MIN, Limits, Value, utf8_len

if TYPE_CHECKING:
    import psycopg

__all__ = ["BATCH_ROWS", "KIND", "JsonScalar", "SqlQueryMount"]

log = logging.getLogger("svit_cluster.mounts")

#: The descriptor kind of this provider.
KIND = "sql-query"
#: Rows fetched per round trip from the server-side cursor.
BATCH_ROWS = 500
#: A query parameter: bound by the driver, never formatted into the SQL.
JsonScalar: TypeAlias = "bool | int | float | str | None"

_MIB = 1024 * 1024
_MAX_STATEMENT_TIMEOUT_MS = 600_000
_MAX_CONNECT_TIMEOUT_S = 600.0
_MAX_LABEL_BYTES = 1024
_CURSOR = "svit_mount_rows"
#: Type oids of json and jsonb.
_JSON_OIDS = frozenset({114, 3802})
#: SQLSTATE classes of failures outside the query: connection, transaction
#: rollback (serialization, deadlock), resources, operator intervention,
#: system and internal errors.
_UNAVAILABLE_CLASSES = frozenset({"08", "40", "53", "57", "58", "XX"})
_QUERY_CANCELED = "57014"
_READ_ONLY_SQL_TRANSACTION = "25006"
#: DECLARE refuses the statement (not SELECT/VALUES/TABLE; a data-modifying WITH).
_NOT_DECLARABLE = frozenset({"42601", "0A000"})


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One run's result (``rows``) or failure (``error``), served until ``expires``."""

    limits: Limits
    expires: float
    rows: ValueMount | None = None
    error: SvitError | None = None


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    json: bool


class SqlQueryMount:
    """A read-only mount of the rows of one PostgreSQL query (see the module doc).

    Args:
        dsn: a libpq connection string or URI (may hold a password); kept
            private, never shown.
        query: one SQL statement producing rows (``SELECT``, ``VALUES``,
            ``TABLE``), with ``%s`` placeholders for ``params``.
        params: values bound to the placeholders by the driver.
        label: what guests see as the descriptor's ``source`` (1-1024 bytes
            of printable text; name the data, not the credentials).
        statement_timeout_ms: bound on one run of the query, all fetches
            included (1 ms - 10 min).
        connect_timeout_s: bound on connecting; libpq counts whole seconds,
            at least 2, so it is rounded up to that.
        cache_ttl_s: how long one run's outcome (rows or failure) is served
            (0: every use runs the query).
        max_bytes: bound on the result's text, also capped by the process's
            ``max_tree_text_bytes``.

    Raises:
        ConfigurationError: (``invalid_control_configuration``) an argument
            outside its range; the message never holds the DSN.
    """

    __slots__ = ("_cached", "_connect_timeout_s", "_descriptor", "_dsn", "_label", "_lock",
                 "_max_bytes", "_params", "_query", "_secrets", "_statement_timeout_ms",
                 "_ttl_s")

    def __init__(self, *, dsn: str, query: str, params: Sequence[JsonScalar] = (),
                 label: str, statement_timeout_ms: int = 5000,
                 connect_timeout_s: float = 5.0, cache_ttl_s: float = 30.0,
                 max_bytes: int = 16 * _MIB) -> None:
        if type(dsn) is not str or not dsn.strip() or "\0" in dsn:
            raise ConfigurationError("dsn must be non-empty text (value not shown)")
        if type(query) is not str or not query.strip() or "\0" in query:
            raise ConfigurationError("query must be non-empty text without NUL")
        if (type(label) is not str or not label or not label.isprintable()
                or len(label.encode("utf-8", "replace")) > _MAX_LABEL_BYTES):
            raise ConfigurationError(
                f"label must be 1-{_MAX_LABEL_BYTES} bytes of printable text")
        self._params = _check_params(params)
        if (type(statement_timeout_ms) is not int
                or not 1 <= statement_timeout_ms <= _MAX_STATEMENT_TIMEOUT_MS):
            raise ConfigurationError(
                f"statement_timeout_ms must be an integer in 1..{_MAX_STATEMENT_TIMEOUT_MS}")
        if (type(connect_timeout_s) not in (int, float)
                or not 0 < connect_timeout_s <= _MAX_CONNECT_TIMEOUT_S):
            raise ConfigurationError(
                f"connect_timeout_s must be in (0, {_MAX_CONNECT_TIMEOUT_S:g}]")
        if type(cache_ttl_s) not in (int, float) or not 0 <= cache_ttl_s < math.inf:
            raise ConfigurationError("cache_ttl_s must be a finite number >= 0")
        if type(max_bytes) is not int or max_bytes < 1:
            raise ConfigurationError("max_bytes must be a positive integer")
        self._dsn = dsn
        self._query = query
        self._label = label
        self._statement_timeout_ms = statement_timeout_ms
        self._connect_timeout_s = connect_timeout_s
        self._ttl_s = float(cache_ttl_s)
        self._max_bytes = max_bytes
        self._descriptor = MountDescriptor(KIND, label, "cache", "read")
        self._lock = threading.Lock()
        self._cached: _Outcome | None = None
        self._secrets: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return f"SqlQueryMount(label={self._label!r})"

    # -- MountProvider ----------------------------------------------------------------

    def descriptor(self) -> MountDescriptor:
        return self._descriptor

    def stat(self, path: MountPath, limits: Limits) -> MountNode | None:
        return self._rows(limits).stat(path, limits)

    def list(self, path: MountPath, limits: Limits) -> list[str]:
        return self._rows(limits).list(path, limits)

    def read(self, path: MountPath, limits: Limits) -> Value | None:
        return self._rows(limits).read(path, limits)

    def check_write(self, path: MountPath, value: Value | None, limits: Limits) -> None:
        raise self._denied()

    def write(self, path: MountPath, value: Value, limits: Limits) -> None:
        raise self._denied()

    def remove(self, path: MountPath, limits: Limits) -> None:
        raise self._denied()

    def fence(self, process_id: str) -> MountFence | None:
        return None

    # -- the cached outcome -----------------------------------------------------------

    @property
    def _name(self) -> str:
        return f"mount {KIND} {self._label[:120]!r}"

    def _denied(self) -> MountDenied:
        return MountDenied(f"{self._name} is read-only")

    def _rows(self, limits: Limits) -> ValueMount:
        """The rows of the current run, running the query when none is current.

        Raises:
            the run's failure, also while it is the current outcome.
        """
        with self._lock:
            cached = self._cached
            if cached is not None and cached.limits == limits and time.monotonic() < cached.expires:
                if cached.error is not None:
                    raise SvitError.from_wire(cached.error.to_wire())
                assert cached.rows is not None
                return cached.rows
            try:
                rows = self._materialize(limits)
            except SvitError as exc:
                log.warning("%s", exc.message)
                self._cached = _Outcome(limits, time.monotonic() + self._ttl_s, error=exc)
                raise
            self._cached = _Outcome(limits, time.monotonic() + self._ttl_s, rows=rows)
            return rows

    # -- one run ----------------------------------------------------------------------

    def _materialize(self, limits: Limits) -> ValueMount:
        try:
            import psycopg
        except ImportError:
            raise MountUnavailable(
                f"{self._name}: psycopg 3 is not installed on this host "
                "(pip install 'svit-cluster[mounts]')") from None
        if self._secrets is None:
            self._secrets = _secrets(self._dsn)
        try:
            conn = psycopg.connect(self._dsn, autocommit=False,
                                   connect_timeout=max(2, math.ceil(self._connect_timeout_s)))
        except psycopg.ProgrammingError:
            # libpq quotes the malformed part of the string: never show it
            raise InvalidMount(f"{self._name}: the dsn is not a valid connection string "
                               "(not shown)") from None
        except psycopg.Error as exc:
            log.warning("%s: cannot connect: %s", self._name, self._scrub(str(exc)))
            raise MountUnavailable(f"{self._name}: cannot connect to the database "
                                   f"({type(exc).__name__})") from None
        try:
            deadline = time.monotonic() + self._statement_timeout_ms / 1000
            return self._run(conn, limits, deadline)
        except psycopg.Error as exc:
            raise self._failure(exc) from None
        finally:
            try:
                conn.close()  # the read-only transaction ends unfinished: rolled back
            except psycopg.Error:
                pass

    def _run(self, conn: psycopg.Connection[Any], limits: Limits,
             deadline: float) -> ValueMount:
        import psycopg

        conn.read_only = True  # every transaction starts with BEGIN READ ONLY
        self._time_left(conn, deadline)
        cur = conn.cursor(name=_CURSOR)
        try:
            cur.execute(self._query, self._params or None)
        except psycopg.Error as exc:
            if exc.sqlstate not in _NOT_DECLARABLE:
                raise
            conn.rollback()
            raise self._classify(conn, deadline, exc) from None
        columns = self._columns(cur.description)
        max_text = min(self._max_bytes, limits.max_tree_text_bytes)
        rows = self._collect(conn, cur, columns, limits, max_text, deadline)
        # The bounds were checked while fetching; the value's own check
        # (ValueMount) counts the same entries and text against them.
        try:
            return ValueMount(KIND, self._label, rows,
                              replace(limits, max_value_entries=limits.max_tree_nodes,
                                      max_text_bytes=max_text))
        except InvalidInput as exc:
            raise InvalidMount(f"{self._name}: the rows cannot be mounted: {exc.message}"
                               ) from None

    def _time_left(self, conn: psycopg.Connection[Any], deadline: float) -> None:
        """Set the transaction's statement_timeout to what is left of the run's time.

        Raises:
            MountUnavailable: nothing is left.
        """
        left_ms = math.floor((deadline - time.monotonic()) * 1000)
        if left_ms < 1:
            raise self._timed_out()
        conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(left_ms)])

    def _timed_out(self) -> MountUnavailable:
        return MountUnavailable(
            f"{self._name}: query timed out after {self._statement_timeout_ms} ms")

    def _classify(self, conn: psycopg.Connection[Any], deadline: float,
                  declare_error: psycopg.Error) -> SvitError:
        """The failure of a statement that cannot back a cursor: run it once in a
        new read-only transaction (extended protocol, at most one row read) so the
        server says whether it writes."""
        import psycopg

        try:
            self._time_left(conn, deadline)
            with conn.cursor() as probe:
                for _row in probe.stream(self._query, self._params or None):
                    break
        except SvitError as exc:
            return exc
        except psycopg.Error as exc:
            return self._failure(exc)
        reason = self._scrub(declare_error.diag.message_primary or type(declare_error).__name__)
        return InvalidMount(f"{self._name}: only a SELECT, VALUES or TABLE query can be "
                            f"mounted ({reason})")

    def _failure(self, exc: psycopg.Error) -> SvitError:
        """The mount error for a psycopg error raised while the query ran."""
        import psycopg

        state = exc.sqlstate
        if state == _QUERY_CANCELED:
            return self._timed_out()
        if state == _READ_ONLY_SQL_TRANSACTION:
            return MountDenied(f"{self._name}: the query attempted a write, refused by "
                               "its read-only transaction", sqlstate=state)
        if state is None:
            if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                return MountUnavailable(f"{self._name}: the database connection failed "
                                        f"({type(exc).__name__})")
            return InvalidMount(f"{self._name}: the query failed: {self._scrub(str(exc))}")
        if state[:2] in _UNAVAILABLE_CLASSES:
            return MountUnavailable(f"{self._name}: the database is unavailable "
                                    f"(SQLSTATE {state})", sqlstate=state)
        primary = self._scrub(exc.diag.message_primary or type(exc).__name__)
        return InvalidMount(f"{self._name}: the query failed: {primary} (SQLSTATE {state})",
                            sqlstate=state)

    def _scrub(self, text: str) -> str:
        for secret in self._secrets or (self._dsn,):
            text = text.replace(secret, "***")
        return text

    def _columns(self, description: Sequence[Any] | None) -> builtins.list[_Column]:
        if not description:
            raise InvalidMount(f"{self._name}: the query returns no columns")
        columns: builtins.list[_Column] = []
        seen: set[str] = set()
        for col in description:
            name = str(col.name)
            if (name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name):
                raise InvalidMount(f"{self._name}: column name {name[:80]!r} cannot be a "
                                   "mount path segment; rename it with AS")
            if name in seen:
                raise InvalidMount(f"{self._name}: column names must be unique: "
                                   f"{name[:80]!r} repeats; name the columns with AS")
            seen.add(name)
            columns.append(_Column(name, col.type_code in _JSON_OIDS))
        return columns

    def _collect(self, conn: psycopg.Connection[Any], cur: psycopg.ServerCursor[Any],
                 columns: builtins.list[_Column], limits: Limits, max_text: int,
                 deadline: float) -> builtins.list[Value]:
        """Fetch and convert the rows, stopping at the first row over a bound."""
        max_rows = limits.max_value_entries
        max_nodes = limits.max_tree_nodes
        cells = _Cells(self._name, limits)
        names_text = sum(utf8_len(c.name) for c in columns)
        rows: builtins.list[Value] = []
        text, nodes = 0, 1  # the array
        while True:
            self._time_left(conn, deadline)
            batch = cur.fetchmany(min(BATCH_ROWS, max_rows - len(rows) + 1))
            if not batch:
                return rows
            if len(rows) + len(batch) > max_rows:
                raise LimitExceeded(f"{self._name}: the query returns more than {max_rows} "
                                    "rows (max_value_entries)", limit="mount entries")
            for raw in batch:
                row: dict[str, Value] = {}
                for col, cell in zip(columns, raw, strict=True):
                    row[col.name] = cells.convert(col, cell, 0)
                text += names_text + cells.take_text()
                nodes += 1 + cells.take_nodes()
                if text > max_text:
                    raise LimitExceeded(f"{self._name}: the rows hold more than {max_text} "
                                        "bytes of text", limit="mount bytes")
                if nodes > max_nodes:
                    raise LimitExceeded(f"{self._name}: the rows hold more than {max_nodes} "
                                        "values (max_tree_nodes)", limit="mount entries")
                rows.append(row)


class _Cells:
    """Converts cells to values, counting their text bytes and entries."""

    __slots__ = ("_json_limits", "_limits", "_mount", "_nodes", "_text")

    def __init__(self, mount: str, limits: Limits) -> None:
        self._mount = mount
        self._limits = limits
        # a JSON cell sits two levels below the result: array -> row -> cell
        self._json_limits = replace(limits, max_value_depth=max(0, limits.max_value_depth - 2))
        self._text = 0
        self._nodes = 0

    def take_text(self) -> int:
        text, self._text = self._text, 0
        return text

    def take_nodes(self) -> int:
        nodes, self._nodes = self._nodes, 0
        return nodes

    def _invalid(self, col: _Column, what: str) -> InvalidMount:
        return InvalidMount(f"{self._mount}: column {col.name[:80]!r}: {what}")

    def _number(self, col: _Column, value: float) -> float:
        if not math.isfinite(value):
            raise self._invalid(col, f"{value} is not a finite number")
        return value + 0.0  # canonical zero, as in plain values

    def _text_value(self, col: _Column, value: str) -> str:
        size = utf8_len(value)
        if size > self._limits.max_text_bytes:
            raise LimitExceeded(f"{self._mount}: column {col.name[:80]!r} holds a text of "
                                f"{size} bytes (max_text_bytes {self._limits.max_text_bytes})",
                                limit="mount leaf bytes")
        self._text += size
        return value

    def convert(self, col: _Column, value: Any, depth: int) -> Value:
        self._nodes += 1
        kind = type(value)
        if value is None or kind is bool:
            return value  # type: ignore[no-any-return]
        if kind is int:
            if I64_MIN <= value <= I64_MAX:
                return int(value)
            try:
                return self._number(col, float(value))
            except OverflowError:
                raise self._invalid(col, "integer is too large") from None
        if kind is float:
            return self._number(col, value)
        if kind is decimal.Decimal:
            try:
                return self._number(col, float(value))
            except (ValueError, OverflowError):
                raise self._invalid(col, f"{value} is not a finite number") from None
        if kind is str:
            return self._text_value(col, value)
        if (col.json and depth == 0) or kind is dict:
            return self._json(col, value)
        if kind is list:
            if depth >= self._json_limits.max_value_depth:
                raise self._invalid(col, "array is nested too deeply (max_value_depth)")
            return [self.convert(col, v, depth + 1) for v in value]
        if kind in (bytes, bytearray, memoryview):
            raise self._invalid(col, "bytea columns are not supported")
        if isinstance(value, datetime.date | datetime.time):
            return self._text_value(col, value.isoformat())
        if kind is uuid.UUID:
            return self._text_value(col, str(value))
        raise self._invalid(col, f"values of type {kind.__name__} are not supported; "
                                 "cast the column to text in the query")

    def _json(self, col: _Column, value: Any) -> Value:
        """A JSON cell (or a map inside an array): a plain value within the limits."""
        self._nodes -= 1  # counted again below with everything inside it
        try:
            plain = check_plain(value, self._json_limits)
        except InvalidInput as exc:
            raise self._invalid(col, f"JSON cannot be mounted: {exc.message}") from None
        stack: list[Value] = [plain]
        while stack:
            item = stack.pop()
            self._nodes += 1
            if isinstance(item, str):
                self._text += utf8_len(item)
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, dict):
                self._text += sum(utf8_len(k) for k in item)
                stack.extend(item.values())
        return plain


def _check_params(params: Sequence[JsonScalar]) -> list[JsonScalar]:
    if isinstance(params, str | bytes) or not isinstance(params, Sequence):
        raise ConfigurationError("params must be a list of JSON scalars")
    out: list[JsonScalar] = []
    for i, p in enumerate(params):
        if p is None or type(p) is bool:
            ok = True
        elif type(p) is int:
            ok = I64_MIN <= p <= I64_MAX
        elif type(p) is float:
            ok = math.isfinite(p)
        elif type(p) is str:
            ok = "\0" not in p
        else:
            ok = False
        if not ok:
            raise ConfigurationError(
                f"params[{i}] must be null, a boolean, a 64-bit integer, a finite number "
                "or text without NUL")
        out.append(p)
    return out


def _secrets(dsn: str) -> tuple[str, ...]:
    """The texts no message may show: the DSN and, when it parses, its password."""
    import psycopg

    found = [dsn]
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except Exception:  # a DSN that does not parse fails at connect, without its text
        password = None
    if isinstance(password, str) and password:
        found.append(password)
    return tuple(found)
