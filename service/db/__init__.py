"""The storage layer: the only package that imports SQLAlchemy."""
