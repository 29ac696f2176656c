"""HTTP blueprints, one per resource: thin handlers that validate, call one use case, reply."""

from __future__ import annotations

from typing import Any

from flask import Flask


def register_blueprints(app: Flask) -> None:
    """Register every blueprint, behind the check that path and query text is storable."""
    from service.web import openapi
    from service.web.queries import check_text_arguments
    from service.web.routes import (
        audit,
        contracts,
        diagrams,
        fleet,
        gate,
        health,
        metrics,
        stream,
        ui,
    )

    # Path and query text reaches the database on every route, and PostgreSQL refuses a NUL.
    app.before_request(check_text_arguments)
    app.url_map.converters["contract_id"] = contracts.ContractIdConverter
    for module in (health, contracts, stream, fleet, gate, audit, openapi, metrics, ui, diagrams):
        app.register_blueprint(module.bp)


def api_document() -> dict[str, Any]:
    """The OpenAPI document of every blueprint, built without the service (no database)."""
    from service.web import openapi

    app = Flask(__name__)
    register_blueprints(app)
    return openapi.document(app)
