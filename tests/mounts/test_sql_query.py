"""The ``sql-query`` mount against a real PostgreSQL server (tests/_postgres.py)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
import traceback
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from svit_cluster.errors import (
    ConfigurationError,
    InvalidMount,
    LimitExceeded,
    MountDenied,
    MountUnavailable,
    SvitError,
)
from svit_cluster.local import free_port
from svit_cluster.mounts import MountPath, MountRegistry
from svit_cluster.mounts._sql import BATCH_ROWS, SqlQueryMount
from svit_cluster.values import Limits
from tests._postgres import PostgresServer

REPO = Path(__file__).resolve().parents[2]
L = Limits()
ROOT = MountPath()
Conn = psycopg.Connection[tuple[Any, ...]]


def at(*segments: str) -> MountPath:
    return MountPath.of(segments)


def mount(server: PostgresServer, query: str, params: list[Any] | None = None,
          **kwargs: Any) -> SqlQueryMount:
    return SqlQueryMount(dsn=server.dsn(), query=query, params=params or [],
                         label=kwargs.pop("label", "people"), **kwargs)


def count(pg: Conn, table: str) -> int:
    row = pg.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


# -- rows as values -----------------------------------------------------------------------


def test_rows_are_an_array_of_maps(postgres: PostgresServer, people: str) -> None:
    m = mount(postgres, f"SELECT id, name FROM {people} ORDER BY id")
    assert m.read(at("0", "name"), L) == "ann"
    assert m.read(at("2", "name"), L) == "o'hara"
    assert m.read(at("1"), L) == {"id": 2, "name": "bob"}
    assert m.list(ROOT, L) == ["0", "1", "2"]
    assert m.list(at("0"), L) == ["id", "name"]
    root = m.stat(ROOT, L)
    assert root is not None and root.kind == "directory"
    assert root.facts == {"content": "array", "entries": 3}
    leaf = m.stat(at("0", "name"), L)
    assert leaf is not None and leaf.kind == "leaf" and leaf.facts["bytes"] == 3
    assert m.read(at("3"), L) is None
    assert m.stat(at("0", "absent"), L) is None


def test_descriptor_is_a_read_only_cache_mount_named_by_the_label(
        postgres: PostgresServer) -> None:
    m = mount(postgres, "SELECT 1 AS one", label="reporting: active people")
    d = m.descriptor()
    assert d.to_value() == {"access": "read", "kind": "sql-query", "locality": "cache",
                            "source": "reporting: active people"}
    assert postgres.password not in repr(m) and "127.0.0.1" not in repr(m)


def test_the_registry_serves_the_rows_and_reports_cache_locality(
        postgres: PostgresServer, people: str) -> None:
    m = mount(postgres, f"SELECT id, name FROM {people} ORDER BY id")
    registry = MountRegistry()
    registry.attach("people", m)
    committed = {"people": m.descriptor()}
    assert registry.read(committed, "people", at("1", "name"), L) == "bob"
    record = registry.stat(committed, "people", ROOT, L)
    assert isinstance(record, dict)
    assert (record["locality"], record["kind"], record["access"]) == ("cache", "directory",
                                                                     "read")
    assert registry.discover(committed, "people", ROOT, L) == ["0", "1", "2"]


def test_column_types_become_plain_values(postgres: PostgresServer, people: str) -> None:
    m = mount(postgres, f"SELECT * FROM {people} ORDER BY id")
    assert m.read(at("0"), L) == {"id": 1, "name": "ann", "born": "1990-01-02", "score": 1.5,
                                  "active": True, "doc": {"a": [1, 2]}, "tags": ["x", "y"]}
    assert m.read(at("1"), L) == {"id": 2, "name": "bob", "born": None, "score": None,
                                  "active": False, "doc": None, "tags": None}
    third = m.read(at("2"), L)
    assert isinstance(third, dict)
    assert third["doc"] == "plain" and third["tags"] == [] and third["active"] is None
    assert third["score"] == 3.0 and type(third["score"]) is float  # numeric -> float

    scalars = mount(postgres, """
        SELECT 9223372036854775807::bigint AS big, -2.5::float8 AS f,
               '2024-02-29 13:14:15.5+02'::timestamptz AS ts,
               '2024-02-29 13:14:15'::timestamp AS naive, '13:14:15'::time AS t,
               'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u,
               '{"n": 18446744073709551616, "s": "x"}'::json AS j,
               ARRAY[[1, 2], [3, 4]] AS grid, 'héllo'::varchar AS v""")
    row = scalars.read(at("0"), L)
    assert isinstance(row, dict) and isinstance(row["ts"], str)
    # ISO 8601 with the offset of the session's time zone
    assert datetime.fromisoformat(row.pop("ts")) == datetime(
        2024, 2, 29, 11, 14, 15, 500000, tzinfo=UTC)
    assert row == {
        "big": 9223372036854775807, "f": -2.5,
        "naive": "2024-02-29T13:14:15", "t": "13:14:15",
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "j": {"n": 1.8446744073709552e19, "s": "x"},  # beyond i64: a float
        "grid": [[1, 2], [3, 4]], "v": "héllo"}


@pytest.mark.parametrize(("query", "needle"), [
    ("SELECT '\\x00ff'::bytea AS b", "bytea columns are not supported"),
    ("SELECT 1, 2", "must be unique"),
    ("SELECT 1 AS a, 2 AS a", "must be unique"),
    ('SELECT 1 AS "a/b"', "mount path segment"),
    ('SELECT 1 AS ".."', "mount path segment"),
    ("SELECT FROM generate_series(1, 2)", "no columns"),
    ("SELECT '1 day'::interval AS i", "values of type timedelta are not supported"),
    ("SELECT 'NaN'::numeric AS n", "not a finite number"),
    ("SELECT 'Infinity'::float8 AS f", "not a finite number"),
    ("SELECT * FROM no_such_table", 'relation "no_such_table" does not exist'),
    ("SELEC 1", "syntax error"),
    ("EXPLAIN SELECT 1", "only a SELECT, VALUES or TABLE query"),
])
def test_unmountable_results_are_invalid_mounts(postgres: PostgresServer, query: str,
                                                needle: str) -> None:
    with pytest.raises(InvalidMount, match="invalid_mount") as info:
        mount(postgres, query).read(at("0"), L)
    assert needle in info.value.message


def test_json_deeper_than_the_value_depth_is_an_invalid_mount(
        postgres: PostgresServer) -> None:
    deep = "[" * 40 + "]" * 40
    with pytest.raises(InvalidMount, match="JSON cannot be mounted"):
        mount(postgres, "SELECT %s::jsonb AS j", [deep]).read(at("0"), L)
    ok = mount(postgres, "SELECT %s::jsonb AS j", ["[" * 30 + "]" * 30])
    assert ok.stat(at("0", "j"), L) is not None


# -- parameters ---------------------------------------------------------------------------


def test_params_are_bound_as_data_not_sql(postgres: PostgresServer, pg: Conn,
                                          people: str) -> None:
    by_name = f"SELECT id FROM {people} WHERE name = %s ORDER BY id"
    assert mount(postgres, by_name, ["o'hara"]).list(ROOT, L) == ["0"]
    assert mount(postgres, by_name, ["o'hara"]).read(at("0", "id"), L) == 3
    # formatted into the SQL, this would match every row
    assert mount(postgres, by_name, ["x' OR '1'='1"]).list(ROOT, L) == []
    echo = mount(postgres, "SELECT %s AS a, %s AS b, %s::int AS c, %s::float8 AS d",
                 [f"'); DROP TABLE {people}; --", None, 7, 0.25])
    assert echo.read(at("0"), L) == {"a": f"'); DROP TABLE {people}; --", "b": None, "c": 7,
                                     "d": 0.25}
    assert count(pg, people) == 3


def test_without_params_a_percent_sign_is_plain_sql(postgres: PostgresServer,
                                                    people: str) -> None:
    m = mount(postgres, f"SELECT name FROM {people} WHERE name LIKE 'o%' ORDER BY id")
    assert m.read(at("0", "name"), L) == "o'hara"


# -- read-only ----------------------------------------------------------------------------


def test_writes_through_the_provider_are_denied(postgres: PostgresServer,
                                                people: str) -> None:
    m = mount(postgres, f"SELECT id, name FROM {people} ORDER BY id")
    with pytest.raises(MountDenied, match="read-only"):
        m.check_write(at("0", "name"), "eve", L)
    with pytest.raises(MountDenied):
        m.write(at("0", "name"), "eve", L)
    with pytest.raises(MountDenied):
        m.remove(at("0"), L)
    assert m.fence("svit://t/p") is None
    registry = MountRegistry()
    registry.attach("people", m)
    with pytest.raises(MountDenied):
        registry.check_write({"people": m.descriptor()}, "people", at("0", "name"), "eve", L)
    assert m.read(at("0", "name"), L) == "ann"


@pytest.fixture
def writer(pg: Conn, people: str) -> str:
    """A function that inserts into ``people`` and returns 1 (a write hidden in a SELECT)."""
    fn = f"{people}_writer"
    pg.execute(f"CREATE FUNCTION {fn}() RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
               f"INSERT INTO {people} VALUES (99, 'w'); RETURN 1; END $$")
    return fn


@pytest.mark.parametrize("statement", [
    "INSERT INTO {t} VALUES (42, 'mallory')",
    "INSERT INTO {t} VALUES (42, 'mallory') RETURNING *",
    "UPDATE {t} SET name = 'mallory'",
    "DELETE FROM {t}",
    "WITH gone AS (DELETE FROM {t} RETURNING *) SELECT * FROM gone",
    "SELECT {fn}() AS written",
    "CREATE TABLE {t}_new (a int)",
    "TRUNCATE {t}",
])
def test_a_configured_write_is_denied_and_changes_nothing(
        postgres: PostgresServer, pg: Conn, people: str, writer: str,
        statement: str) -> None:
    m = mount(postgres, statement.format(t=people, fn=writer))
    with pytest.raises(MountDenied, match="read-only transaction") as info:
        m.list(ROOT, L)
    assert info.value.fields["sqlstate"] == "25006"
    assert count(pg, people) == 3
    assert pg.execute(f"SELECT name FROM {people} WHERE id = 1").fetchone() == ("ann",)
    assert pg.execute("SELECT to_regclass(%s)", [f"{people}_new"]).fetchone() == (None,)


def test_a_second_statement_cannot_leave_the_read_only_transaction(
        postgres: PostgresServer, pg: Conn, people: str) -> None:
    m = mount(postgres, f"SELECT 1 AS a; COMMIT; INSERT INTO {people} VALUES (42, 'm')")
    with pytest.raises(InvalidMount, match="multiple commands"):
        m.list(ROOT, L)
    m = mount(postgres, f"COMMIT; INSERT INTO {people} VALUES (42, 'm')")
    with pytest.raises(InvalidMount):
        m.list(ROOT, L)
    assert count(pg, people) == 3


# -- time and size bounds -------------------------------------------------------------------


def test_a_slow_query_times_out(postgres: PostgresServer) -> None:
    m = mount(postgres, "SELECT pg_sleep(5) AS slept", statement_timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(MountUnavailable, match="query timed out after 200 ms"):
        m.read(at("0"), L)
    elapsed = time.monotonic() - started
    assert 0.19 <= elapsed < 1.5, elapsed


def test_the_timeout_bounds_the_whole_run_not_each_fetch(postgres: PostgresServer,
                                                         pg: Conn) -> None:
    """Every batch of rows takes 0.3 s, each well inside the 1 s budget: the run as
    a whole must still stop at 1 s (10 batches would take 3 s)."""
    pg.execute(f"CREATE OR REPLACE FUNCTION slow_batch(g int) RETURNS int LANGUAGE plpgsql "
               f"VOLATILE AS $$ BEGIN IF g % {BATCH_ROWS} = 0 THEN PERFORM pg_sleep(0.3); "
               "END IF; RETURN g; END $$")
    m = mount(postgres, "SELECT slow_batch(g) AS g FROM generate_series(1, %s) g",
              [10 * BATCH_ROWS], statement_timeout_ms=1000)
    started = time.monotonic()
    with pytest.raises(MountUnavailable, match="timed out after 1000 ms"):
        m.list(ROOT, L)
    elapsed = time.monotonic() - started
    assert 0.95 <= elapsed < 2.0, elapsed


def test_a_million_rows_are_refused_quickly_without_materializing(
        postgres: PostgresServer) -> None:
    m = mount(postgres, "SELECT g AS n, 'row ' || g AS label FROM generate_series(1, 1000000) g")
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(LimitExceeded) as info:
            m.list(ROOT, L)
        elapsed = time.monotonic() - started
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.fields["limit"] == "mount entries"
    assert f"more than {L.max_value_entries} rows" in info.value.message
    assert elapsed < 3.0, elapsed
    # 10 001 small rows at most; a fetchall of the million would hold > 100 MB
    assert peak < 16 * 1024 * 1024, peak


def test_the_row_bound_is_max_value_entries(postgres: PostgresServer) -> None:
    five = Limits(max_value_entries=5)
    m = mount(postgres, "SELECT g FROM generate_series(1, %s) g", [5])
    assert m.list(ROOT, five) == ["0", "1", "2", "3", "4"]
    m = mount(postgres, "SELECT g FROM generate_series(1, %s) g", [6])
    with pytest.raises(LimitExceeded, match="more than 5 rows") as info:
        m.list(ROOT, five)
    assert info.value.fields["limit"] == "mount entries"


def test_the_value_bound_is_max_tree_nodes(postgres: PostgresServer) -> None:
    # 1 array + 10 rows x (1 map + 3 cells) = 41 values
    query = "SELECT g AS a, g AS b, g AS c FROM generate_series(1, 10) g"
    assert mount(postgres, query).list(ROOT, Limits(max_tree_nodes=41)) == [
        str(i) for i in range(10)]
    with pytest.raises(LimitExceeded, match="more than 40 values") as info:
        mount(postgres, query).list(ROOT, Limits(max_tree_nodes=40))
    assert info.value.fields["limit"] == "mount entries"


def test_total_text_is_bounded_by_max_bytes_and_max_tree_text_bytes(
        postgres: PostgresServer) -> None:
    # each row: column name "t" (1 byte) + 99 bytes of text = 100 bytes; 10 rows
    query = "SELECT repeat('x', 99) AS t FROM generate_series(1, 10)"
    assert len(mount(postgres, query, max_bytes=1000).list(ROOT, L)) == 10
    with pytest.raises(LimitExceeded, match="more than 999 bytes") as info:
        mount(postgres, query, max_bytes=999).list(ROOT, L)
    assert info.value.fields["limit"] == "mount bytes"
    with pytest.raises(LimitExceeded, match="more than 999 bytes") as info:
        mount(postgres, query).list(ROOT, Limits(max_tree_text_bytes=999))
    assert info.value.fields["limit"] == "mount bytes"


def test_one_text_over_max_text_bytes_is_refused(postgres: PostgresServer) -> None:
    limits = Limits(max_text_bytes=100)
    assert mount(postgres, "SELECT repeat('é', 50) AS t").read(at("0", "t"), limits) == "é" * 50
    with pytest.raises(LimitExceeded, match="101 bytes") as info:
        mount(postgres, "SELECT repeat('é', 50) || 'x' AS t").read(at("0", "t"), limits)
    assert info.value.fields["limit"] == "mount leaf bytes"


# -- availability and secrecy ----------------------------------------------------------------


def test_a_server_that_is_not_there_is_unavailable() -> None:
    dsn = f"postgresql://postgres:S3cret-pw@127.0.0.1:{free_port()}/nothing"
    m = SqlQueryMount(dsn=dsn, query="SELECT 1 AS a", label="gone")
    started = time.monotonic()
    with pytest.raises(MountUnavailable, match="cannot connect to the database"):
        m.list(ROOT, L)
    assert time.monotonic() - started < 5.0


def test_a_server_that_stops_makes_the_mount_unavailable() -> None:
    server = PostgresServer(database="svit_stop")
    server.start()
    try:
        m = mount(server, "SELECT 1 AS a", cache_ttl_s=0)
        assert m.read(at("0", "a"), L) == 1
        server.stop()
        with pytest.raises(MountUnavailable):
            m.read(at("0", "a"), L)
    finally:
        server.stop()


def _leaks(exc: BaseException, secrets: list[str]) -> list[str]:
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    if isinstance(exc, SvitError):
        texts.append(repr(exc.to_wire()))
    return [s for s in secrets if any(s in t for t in texts)]


def test_the_dsn_and_its_password_never_appear_in_errors_or_logs(
        postgres: PostgresServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = postgres.dsn(password="Wr0ng-Pa55word")
    dead = f"postgresql://postgres:D3ad-Pa55word@127.0.0.1:{free_port()}/x"
    malformed = "postgresql//postgres:Malf0rmed-Pa55word@127.0.0.1/x"
    good = postgres.dsn()
    cases: list[tuple[str, str, type[SvitError]]] = [
        (wrong, "SELECT 1 AS a", MountUnavailable),
        (dead, "SELECT 1 AS a", MountUnavailable),
        (malformed, "SELECT 1 AS a", InvalidMount),
        (good, "SELECT * FROM no_such_table", InvalidMount),
        (good, "INSERT INTO no_such_table VALUES (1)", InvalidMount),
        (good, "SELECT pg_sleep(1) AS s", MountUnavailable),
        (good, "CREATE TABLE leak_check (a int)", MountDenied),
    ]
    secrets = [wrong, dead, malformed, good, "Wr0ng-Pa55word", "D3ad-Pa55word",
               "Malf0rmed-Pa55word", postgres.password]
    for dsn, query, expected in cases:
        m = SqlQueryMount(dsn=dsn, query=query, label="leak check", statement_timeout_ms=100)
        for _ in range(2):  # the run, then the cached failure
            with pytest.raises(expected) as info:
                m.read(at("0"), L)
            assert _leaks(info.value, secrets) == [], (query, info.value)
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert [s for s in secrets if s in logged] == []
    assert "password authentication failed" in caplog.text  # logged, scrubbed


def test_bad_configuration_is_refused_without_showing_the_dsn() -> None:
    dsn = "postgresql://u:Conf1g-Pa55word@127.0.0.1:1/x"
    bad: list[dict[str, Any]] = [
        {"dsn": ""}, {"query": " "}, {"label": ""}, {"label": "a\nb"},
        {"params": ["a\0b"]}, {"params": [2**63]}, {"params": [float("nan")]},
        {"params": [b"bytes"]}, {"params": [[1]]}, {"params": "abc"},
        {"statement_timeout_ms": 0}, {"statement_timeout_ms": 1.5},
        {"connect_timeout_s": 0}, {"cache_ttl_s": -1}, {"cache_ttl_s": float("inf")},
        {"max_bytes": 0},
    ]
    for override in bad:
        args: dict[str, Any] = {"dsn": dsn, "query": "SELECT 1 AS a", "label": "x"} | override
        with pytest.raises(ConfigurationError) as info:
            SqlQueryMount(**args)
        assert "Conf1g-Pa55word" not in str(info.value), override


# -- laziness and the cache -----------------------------------------------------------------


def test_nothing_runs_before_first_use() -> None:
    """Built against a port nobody listens on: only a use connects (and fails)."""
    m = SqlQueryMount(dsn=f"postgresql://u:p@127.0.0.1:{free_port()}/x",
                      query="SELECT 1 AS a", label="lazy")
    assert m.descriptor().kind == "sql-query"
    assert m.fence("svit://t/p") is None
    with pytest.raises(MountUnavailable):
        m.stat(ROOT, L)


def test_rows_are_kept_for_the_ttl_then_read_again(postgres: PostgresServer, pg: Conn,
                                                   people: str) -> None:
    ttl = 2.0
    m = mount(postgres, f"SELECT id FROM {people} ORDER BY id", cache_ttl_s=ttl)
    first = time.monotonic()
    assert m.list(ROOT, L) == ["0", "1", "2"]
    ran = time.monotonic()  # the rows expire at most ttl after this
    pg.execute(f"INSERT INTO {people} (id, name) VALUES (4, 'dan')")
    assert m.list(ROOT, L) == ["0", "1", "2"]
    assert m.read(at("3"), L) is None
    assert time.monotonic() - first < ttl  # the reads above were inside the TTL
    time.sleep(max(0.0, ran + ttl + 0.05 - time.monotonic()))
    assert m.list(ROOT, L) == ["0", "1", "2", "3"]
    assert m.read(at("3", "id"), L) == 4
    # other limits mean another run, even inside the TTL
    with pytest.raises(LimitExceeded):
        m.list(ROOT, Limits(max_value_entries=2))


def test_a_failure_is_kept_for_the_ttl_too(postgres: PostgresServer, pg: Conn) -> None:
    table = "late_table"
    pg.execute(f"DROP TABLE IF EXISTS {table}")
    ttl = 2.0
    m = mount(postgres, f"SELECT * FROM {table}", cache_ttl_s=ttl)
    first = time.monotonic()
    with pytest.raises(InvalidMount, match="does not exist"):
        m.list(ROOT, L)
    ran = time.monotonic()
    pg.execute(f"CREATE TABLE {table} (a int)")
    try:
        pg.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(InvalidMount, match="does not exist"):
            m.list(ROOT, L)
        assert time.monotonic() - first < ttl
        time.sleep(max(0.0, ran + ttl + 0.05 - time.monotonic()))
        assert m.read(at("0", "a"), L) == 1
    finally:
        pg.execute(f"DROP TABLE {table}")


def test_a_zero_ttl_runs_the_query_on_every_use(postgres: PostgresServer, pg: Conn,
                                                people: str) -> None:
    m = mount(postgres, f"SELECT id FROM {people}", cache_ttl_s=0)
    assert len(m.list(ROOT, L)) == 3
    pg.execute(f"INSERT INTO {people} (id, name) VALUES (4, 'dan')")
    assert len(m.list(ROOT, L)) == 4


def test_concurrent_first_uses_run_the_query_once(postgres: PostgresServer) -> None:
    """Each run is a new connection, so a new backend pid: one run, one pid."""
    m = mount(postgres, "SELECT pg_backend_pid() AS pid, pg_sleep(0.2)::text AS slept")
    barrier = threading.Barrier(6)
    pids: list[Any] = []

    def use() -> None:
        barrier.wait()
        pids.append(m.read(at("0", "pid"), L))

    threads = [threading.Thread(target=use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(pids) == 6 and len(set(pids)) == 1, pids


def test_the_module_imports_and_builds_without_psycopg() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from svit_cluster.mounts._sql import SqlQueryMount\n"
        "from svit_cluster.mounts import MountPath\n"
        "from svit_cluster.values import Limits\n"
        "from svit_cluster.errors import MountUnavailable\n"
        "m = SqlQueryMount(dsn='postgresql://u:p@h/d', query='SELECT 1 AS a', label='x')\n"
        "assert m.descriptor().kind == 'sql-query'\n"
        "try:\n"
        "    m.list(MountPath(), Limits())\n"
        "except MountUnavailable as exc:\n"
        "    assert 'psycopg' in exc.message, exc.message\n"
        "else:\n"
        "    raise AssertionError('no MountUnavailable')\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_importing_the_mounts_package_does_not_load_psycopg() -> None:
    code = ("import sys, svit_cluster.mounts, svit_cluster.mounts._sql\n"
            "print('psycopg' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
