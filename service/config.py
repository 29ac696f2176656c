"""Settings: defaults in code, environment overrides, explicit mappings for tests.

This module is the only one that reads the environment. Each field of ``Settings`` has one
variable: ``CALMON_`` and the upper-cased field name, except where a field's metadata names
another (``workers`` is gunicorn's ``WEB_CONCURRENCY``, ``metrics_dir`` prometheus-client's
``PROMETHEUS_MULTIPROC_DIR``). docs/configuration.md lists them all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_WINDOWS = ("1h", "24h", "7d")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def default_database_url() -> str:
    """Return the embedded SQLite default: ``./instance/calmon.db`` relative to the working dir."""
    return f"sqlite:///{Path('instance').resolve() / 'calmon.db'}"


@dataclass(frozen=True)
class Settings:
    """Everything calmon reads from its environment, in one place.

    ``refresh_seconds`` is how often stored readings behind the Prometheus gauges are recomputed,
    by a thread in each service process (one at a time, by lease) unless ``refresh_in_service``
    is off and ``calmon refresh --loop`` runs instead;
    ``max_body_bytes`` bounds a request body (larger bodies get 413);
    ``max_cohort_values`` and ``max_cohort_keys`` bound a model's distinct values per cohort key
    and its distinct cohort keys (the rest fold into ``__other__``, ``service.stream.cohorts``);
    ``max_slices_per_model`` is a model's series budget: how many of its slices, ``all``
    included, the refresher keeps readings of and exports to Prometheus
    (``service.export.budget``; the others stay readable through the API);
    ``max_pending_labels`` bounds a model's labels waiting for their prediction and
    ``pending_label_days`` is how many days one may wait (by when it was received) before the
    refresher or ``calmon prune`` deletes it;
    ``audit_key``, when set, makes the audit chain HMAC-SHA256 under that key (comma-separated
    keys: the first signs new events, the others still verify older segments; see
    ``service.audit.chain``);
    ``bind``, ``workers`` and ``threads`` are what ``calmon serve`` and
    ``deploy/gunicorn.conf.py`` listen on and run when not told otherwise;
    ``metrics_dir`` is the directory the gunicorn workers share their metric files in (a fresh
    temporary one when unset);
    ``commit_seconds`` is the longest calmon waits for a PostgreSQL COMMIT (a synchronous
    standby's confirmation) before it cancels the wait and answers 503 (``service.db.failover``);
    ``token`` is the bearer token ``calmon gate``, ``fit``, ``ingest`` and ``demo`` send without
    ``--token``, and ``url`` the service they talk to without ``--url``.
    """

    database_url: str = field(default_factory=default_database_url)
    admin_token: str | None = None
    windows: tuple[str, ...] = DEFAULT_WINDOWS
    refresh_seconds: float = 30.0
    refresh_in_service: bool = True
    max_body_bytes: int = 16 * 1024 * 1024
    max_cohort_values: int = 100
    max_cohort_keys: int = 16
    max_slices_per_model: int = 50
    max_pending_labels: int = 1_000_000
    pending_label_days: int = 30
    log_level: str = "INFO"
    audit_key: str | None = None
    bind: str = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
    workers: int = field(default=2, metadata={"env": "WEB_CONCURRENCY"})
    threads: int = 4
    metrics_dir: str | None = field(default=None, metadata={"env": "PROMETHEUS_MULTIPROC_DIR"})
    token: str | None = None
    url: str | None = None
    commit_seconds: float = 10.0


_POSITIVE_INTS = (
    "max_body_bytes",
    "max_cohort_values",
    "max_cohort_keys",
    "max_slices_per_model",
    "max_pending_labels",
    "pending_label_days",
    "workers",
    "threads",
)
_OPTIONAL_TEXT = ("admin_token", "audit_key", "metrics_dir", "token", "url")


def env_name(setting: Field[Any]) -> str:
    """The environment variable of one ``Settings`` field."""
    return str(setting.metadata.get("env", f"CALMON_{setting.name.upper()}"))


def environment_names() -> frozenset[str]:
    """Every environment variable calmon reads."""
    return frozenset(env_name(f) for f in fields(Settings))


def _positive_int(raw: Any) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"expected a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"expected a positive integer, got {raw!r}")
    return value


def _coerce(name: str, raw: Any) -> Any:
    if name == "windows":
        if isinstance(raw, str):
            return tuple(w.strip() for w in raw.split(",") if w.strip())
        return tuple(raw)
    if name == "refresh_in_service":
        if isinstance(raw, bool):
            return raw
        if str(raw).lower() in ("1", "true", "yes", "on"):
            return True
        if str(raw).lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected true or false, got {raw!r}")
    if name in _POSITIVE_INTS:
        return _positive_int(raw.strip() if isinstance(raw, str) else raw)
    if name in ("refresh_seconds", "commit_seconds"):
        value = float(raw)
        if not value > 0:
            raise ValueError(f"must be positive, got {raw!r}")
        return value
    if name == "bind":
        return str(raw).strip() or Settings.bind
    if name in _OPTIONAL_TEXT:
        return raw or None
    return raw


def load_settings(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Build settings from ``environ`` (default ``os.environ``), then apply ``overrides``.

    Override keys are field names. Raises ``ValueError`` naming the variable (or the override)
    when a value cannot be parsed or is out of range.
    """
    env = os.environ if environ is None else environ
    by_name = {f.name: f for f in fields(Settings)}
    values: dict[str, Any] = {}
    for name, setting in by_name.items():
        key = env_name(setting)
        if key in env:
            try:
                values[name] = _coerce(name, env[key])
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from exc
    for name, raw in (overrides or {}).items():
        if name not in by_name:
            raise ValueError(f"unknown setting {name!r}")
        try:
            values[name] = _coerce(name, raw)
        except ValueError as exc:
            raise ValueError(f"{env_name(by_name[name])}: {exc}") from exc
    return Settings(**values)
