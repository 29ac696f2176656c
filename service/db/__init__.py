"""Database infrastructure: engine and sessions, typed models, column types, binary COPY,
migrations, and the generic SQL that differs by backend (locks, upserts, staging tables)."""
