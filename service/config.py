"""Settings: defaults in code, ``CALMON_*`` environment overrides, explicit mappings for tests."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_WINDOWS = ("1h", "24h", "7d")


def default_database_url() -> str:
    """Return the embedded SQLite default: ``./instance/calmon.db`` relative to the working dir."""
    return f"sqlite:///{Path('instance').resolve() / 'calmon.db'}"


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from its environment, in one place.

    ``refresh_seconds`` is how often stored readings behind the Prometheus gauges are recomputed,
    by a thread in each service process (one at a time, by lease) unless ``refresh_in_service``
    is off and ``calmon refresh --loop`` runs instead;
    ``max_body_bytes`` bounds a request body (larger bodies get 413);
    ``max_cohort_values`` and ``max_cohort_keys`` bound a model's distinct values per cohort key
    and its distinct cohort keys (the rest fold into ``__other__``, ``service.stream.cohorts``);
    ``max_pending_labels`` bounds a model's labels waiting for their prediction and
    ``pending_label_days`` is how many days one may wait (by when it was received) before the
    refresher or ``calmon prune`` deletes it;
    ``audit_key``, when set, makes the audit chain HMAC-SHA256 under that key (comma-separated
    keys: the first signs new events, the others still verify older segments; see
    ``service.audit.chain``).
    """

    database_url: str = field(default_factory=default_database_url)
    admin_token: str | None = None
    windows: tuple[str, ...] = DEFAULT_WINDOWS
    refresh_seconds: float = 30.0
    refresh_in_service: bool = True
    max_body_bytes: int = 16 * 1024 * 1024
    max_cohort_values: int = 100
    max_cohort_keys: int = 16
    max_pending_labels: int = 1_000_000
    pending_label_days: int = 30
    log_level: str = "INFO"
    audit_key: str | None = None


_ENV_PREFIX = "CALMON_"
_POSITIVE_INTS = (
    "max_body_bytes",
    "max_cohort_values",
    "max_cohort_keys",
    "max_pending_labels",
    "pending_label_days",
)


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
        return int(raw)
    if name == "refresh_seconds":
        return float(raw)
    if name in ("admin_token", "audit_key"):
        return raw or None
    return raw


def load_settings(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Build settings from ``environ`` (default ``os.environ``), then apply ``overrides``.

    Environment names are the upper-cased field names with the ``CALMON_`` prefix
    (``CALMON_DATABASE_URL``, ``CALMON_WINDOWS=1h,24h,7d``...). Override keys are field names.
    Raises ``ValueError`` naming the variable when a value cannot be parsed.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(Settings):
        key = _ENV_PREFIX + f.name.upper()
        if key in env:
            try:
                values[f.name] = _coerce(f.name, env[key])
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from exc
    for name, raw in (overrides or {}).items():
        if name not in {f.name for f in fields(Settings)}:
            raise ValueError(f"unknown setting {name!r}")
        values[name] = _coerce(name, raw)
    settings = Settings(**values)
    for name in _POSITIVE_INTS:
        if getattr(settings, name) <= 0:
            raise ValueError(f"{_ENV_PREFIX}{name.upper()} must be positive")
    if settings.refresh_seconds <= 0:
        raise ValueError("CALMON_REFRESH_SECONDS must be positive")
    return settings
