"""calmon: calibration monitoring for deployed classifiers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from service.config import Settings, load_settings


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """Build the WSGI application.

    ``config`` is a ``Settings`` or a mapping of setting names overriding the ``CALMON_*``
    environment (tests pass one); nothing is built at import time.
    """
    from service.api import register_blueprints
    from service.api.errors import register_error_handlers
    from service.api.request_log import init_request_log
    from service.api.session import init_session_handling
    from service.audit import AuditKeyring
    from service.exporter.endpoint import init_metrics
    from service.logging import configure_logging
    from service.refresh import Refresher
    from service.storage.audit import bind_keyring
    from service.storage.database import Database

    settings = config if isinstance(config, Settings) else load_settings(config)
    configure_logging(settings.log_level)
    app = Flask(__name__)
    app.config.update(
        CALMON_SETTINGS=settings,
        MAX_CONTENT_LENGTH=settings.max_body_bytes,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    database = Database(settings.database_url)
    bind_keyring(database.sessions, AuditKeyring.from_setting(settings.audit_key))
    app.extensions["calmon.database"] = database
    init_session_handling(app)
    init_request_log(app)
    register_error_handlers(app)
    init_metrics(app)
    register_blueprints(app)
    refresher = Refresher(database, settings)
    app.extensions["calmon.refresher"] = refresher
    if settings.refresh_in_service:
        refresher.start()
    return app
