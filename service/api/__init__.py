"""HTTP blueprints, one per resource."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    """Register every blueprint, behind the check that path and query text is storable."""
    from service.api import audit, contracts, gate, health, openapi, stream, ui
    from service.api.query import check_text_arguments
    from service.exporter import endpoint

    # Path and query text reaches the database on every route, and PostgreSQL refuses a NUL.
    app.before_request(check_text_arguments)
    for module in (health, contracts, stream, gate, audit, openapi, endpoint, ui):
        app.register_blueprint(module.bp)
