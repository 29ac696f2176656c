"""The application factory's glue: settings, database, error handlers, metrics, blueprints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from service.audit.chain import AuditKeyring
from service.audit.store import bind_keyring
from service.config import Settings, load_settings
from service.db.database import Database
from service.db.failover import log_durability
from service.export.refresher import Refresher
from service.logging import configure_logging
from service.web.body_limit import BoundedRequest
from service.web.db_session import init_session_handling
from service.web.http_errors import register_error_handlers
from service.web.last_resort import LastResort
from service.web.request_log import init_request_log
from service.web.routes import register_blueprints
from service.web.routes.metrics import init_metrics


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """Build the WSGI application.

    ``config`` is a ``Settings`` or a mapping of setting names overriding the ``CALMON_*``
    environment (tests pass one); nothing is built at import time.
    """
    settings = config if isinstance(config, Settings) else load_settings(config)
    configure_logging(settings.log_level)
    app = Flask(__name__)
    app.request_class = BoundedRequest
    app.config.update(
        CALMON_SETTINGS=settings,
        MAX_CONTENT_LENGTH=settings.max_body_bytes,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    database = Database(settings.database_url, commit_seconds=settings.commit_seconds)
    bind_keyring(database.sessions, AuditKeyring.from_setting(settings.audit_key))
    app.extensions["calmon.database"] = database
    init_session_handling(app)
    init_request_log(app)
    register_error_handlers(app)
    init_metrics(app)
    register_blueprints(app)
    app.wsgi_app = LastResort(app.wsgi_app)  # type: ignore[method-assign]
    refresher = Refresher(database, settings)
    app.extensions["calmon.refresher"] = refresher
    if settings.refresh_in_service:
        refresher.start()
    log_durability(database.engine)
    return app
