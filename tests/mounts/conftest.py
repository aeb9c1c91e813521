"""A real PostgreSQL server for the mount tests (``tests/_postgres.py``).

One server per session, started on a free loopback port and stopped by its
PID at teardown (SIGKILLed by Linux if pytest dies). Missing server binaries
fail the tests that need them, naming the Debian package: they are never
skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests._postgres import PostgresServer, PostgresUnavailable
from tests._support import unique


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    except BaseException:
        server.stop()
        raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg(postgres: PostgresServer) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit admin connection to the test database (over the unix socket)."""
    with psycopg.connect(postgres.admin_dsn(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def people(pg: psycopg.Connection[tuple[object, ...]]) -> Iterator[str]:
    """A fresh table ``(id, name, born, score, active, doc, tags)`` with three rows."""
    table = "people_" + unique("t").replace("-", "_").lower()
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text NOT NULL, born date, "
               "score numeric, active boolean, doc jsonb, tags text[])")
    pg.execute(f"INSERT INTO {table} VALUES "
               "(1, 'ann', '1990-01-02', 1.5, true, '{\"a\": [1, 2]}', '{x,y}'), "
               "(2, 'bob', NULL, NULL, false, NULL, NULL), "
               "(3, 'o''hara', '2001-12-31', 3, NULL, '\"plain\"', '{}')")
    try:
        yield table
    finally:
        pg.execute(f"DROP TABLE IF EXISTS {table}")
