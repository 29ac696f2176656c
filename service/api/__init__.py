"""HTTP blueprints, one per resource."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    from service.api import audit, contracts, gate, health, openapi, stream, ui
    from service.exporter import endpoint

    for module in (health, contracts, stream, gate, audit, openapi, endpoint, ui):
        app.register_blueprint(module.bp)
