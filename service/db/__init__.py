"""Database infrastructure: engine and sessions, typed models, column types, migrations, the
SQL that differs by backend."""
