"""psycopg 3, PostgreSQL's driver, which calmon installs with its ``postgresql`` extra.

Without it calmon runs on SQLite alone: the error classes below stand in for psycopg's (nothing
raises them then), so that the modules that catch psycopg's errors import either way, and
``service.db.database.make_engine`` refuses a PostgreSQL URL with a message naming the extra.
"""

from __future__ import annotations

try:
    from psycopg import Error, InterfaceError, OperationalError
    from psycopg.errors import UniqueViolation

    INSTALLED = True
except ImportError:  # pragma: no cover - the client-and-SQLite install
    INSTALLED = False

    class Error(Exception):  # type: ignore[no-redef]
        """Stands in for ``psycopg.Error``; never raised."""

    class InterfaceError(Error):  # type: ignore[no-redef]
        """Stands in for ``psycopg.InterfaceError``; never raised."""

    class OperationalError(Error):  # type: ignore[no-redef]
        """Stands in for ``psycopg.OperationalError``; never raised."""

    class UniqueViolation(Error):  # type: ignore[no-redef]
        """Stands in for ``psycopg.errors.UniqueViolation``; never raised."""


#: What ``make_engine`` says when a PostgreSQL URL is configured without the driver.
MISSING = (
    "CALMON_DATABASE_URL names a PostgreSQL database, and its driver, psycopg, is not "
    "installed: install calmon with its postgresql extra (`pip install '.[server,postgresql]'` "
    "in a checkout)"
)

__all__ = ["INSTALLED", "MISSING", "Error", "InterfaceError", "OperationalError", "UniqueViolation"]
