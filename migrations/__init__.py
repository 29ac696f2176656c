"""calmon's Alembic environment and revisions, installed as ``service.migrations``."""
