"""Tables on the session's real PostgreSQL server (the ``postgres`` fixture of
``tests/conftest.py``) for the mount tests."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests._postgres import PostgresServer
from tests._support import unique


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
