"""Which database errors mean "the database cannot serve now, retry" rather than "the database
refused this statement", and the errors psycopg raises outside SQLAlchemy.

The binary ``COPY`` and the binary fetches of ``service.db.postgresql`` use the psycopg
connection under a session directly, so what psycopg raises there is not a SQLAlchemy error
until ``service.db.postgresql`` translates it (``DBAPIError.instance``, the connection
invalidated when it is lost). ``DRIVER_ERROR`` is psycopg's base class, for whoever must still
catch one that escaped.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from service.db import driver

#: The base class of every error psycopg raises.
DRIVER_ERROR = driver.Error

#: SQLSTATE classes of a database that cannot serve now: connection exception (08),
#: insufficient resources (53: disk full, out of memory, too many connections), operator
#: intervention (57: shutdown, a terminated backend, a cancelled statement).
_UNAVAILABLE_CLASSES = frozenset({"08", "53", "57"})
#: SQLSTATEs of a database that takes no writes now: a read-only transaction (a standby, or
#: ``default_transaction_read_only``).
_UNAVAILABLE_STATES = frozenset({"25006"})


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot serve the request now (lost, shut down, out of
    resources, or taking no writes), so the same request may succeed later.

    SQLAlchemy's ``OperationalError`` and ``InterfaceError`` (SQLite's locked or read-only file
    among them) and any error that invalidated its connection count, as do psycopg's own
    ``OperationalError`` and ``InterfaceError`` and the SQLSTATEs above.
    """
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
            return True
        exc = exc.orig if isinstance(exc.orig, BaseException) else exc
    if isinstance(exc, driver.OperationalError | driver.InterfaceError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return sqlstate[:2] in _UNAVAILABLE_CLASSES or sqlstate in _UNAVAILABLE_STATES
