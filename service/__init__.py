"""calmon: calibration monitoring for deployed classifiers.

``create_app`` builds the WSGI application (``service.web.app``); ``docs/architecture.md``
describes the packages and what each may import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

    from service.config import Settings


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """Build the WSGI application (see ``service.web.app.create_app``)."""
    from service.web.app import create_app as build

    return build(config)
