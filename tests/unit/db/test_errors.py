"""Which database errors are "unavailable, retry" (503) and which are a refused statement (500)."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg.errors
import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, InternalError, OperationalError

from service.db.errors import database_unavailable


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("the connection is lost"),
        psycopg.InterfaceError("the connection is closed"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.errors.DiskFull("could not extend file"),
        InternalError("INSERT", None, psycopg.errors.ReadOnlySqlTransaction("read-only")),
        OperationalError("SELECT 1", None, sqlite3.OperationalError("database is locked")),
        DBAPIError("COPY", None, psycopg.errors.DataError("x"), connection_invalidated=True),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_these_mean_the_database_cannot_serve_now(exc: BaseException) -> None:
    assert database_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.errors.UniqueViolation("duplicate key value"),
        IntegrityError("INSERT", None, psycopg.errors.UniqueViolation("duplicate key value")),
        InternalError("SELECT", None, psycopg.errors.DataCorrupted("x")),
        psycopg.errors.SyntaxError("syntax error"),
        RuntimeError("not a database error"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_these_are_refusals_of_one_statement(exc: BaseException) -> None:
    assert not database_unavailable(exc)
