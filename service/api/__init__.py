"""HTTP blueprints, one per resource."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    from service.api import health

    for module in (health,):
        app.register_blueprint(module.bp)
