"""Cohorts and slices: ``all`` plus one marginal slice per ``key=value``, with a value cap.

A prediction's cohort is a flat map of at most 8 keys to string values. Each model keeps at most
``max_values`` distinct values per key; values first seen after the cap is reached are folded into
``key=__other__`` so the number of Prometheus series stays bounded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from typing import Any

from service.errors import ErrorCollector

ALL = "all"
OTHER = "__other__"
MAX_KEYS = 8
MAX_LENGTH = 64
KEY_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def parse_cohort(
    value: Any, path: str, errors: ErrorCollector, item: int | None = None
) -> dict[str, str] | None:
    """Validate a cohort map; ``None`` (absent) means no cohort keys."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.add(path, "expected an object of string keys to string values", item)
        return None
    if len(value) > MAX_KEYS:
        errors.add(path, f"at most {MAX_KEYS} keys, got {len(value)}", item)
        return None
    for key, val in value.items():
        if not KEY_PATTERN.match(key):
            errors.add(
                f"{path}.{key[:MAX_LENGTH]}",
                "keys are 1-64 letters, digits, _ . - starting with a letter or _",
                item,
            )
            return None
        if not isinstance(val, str) or not 0 < len(val) <= MAX_LENGTH or "\x00" in val:
            errors.add(f"{path}.{key}", f"expected a string of 1-{MAX_LENGTH} characters", item)
            return None
        if val == OTHER:
            errors.add(f"{path}.{key}", f"{OTHER!r} is reserved for values over the cap", item)
            return None
    return value


def slice_name(key: str, value: str) -> str:
    return f"{key}={value}"


def slices_of(cohort: Mapping[str, str]) -> list[str]:
    """``all`` and the marginal slices of an (already capped) cohort, keys sorted."""
    return [ALL, *(slice_name(k, cohort[k]) for k in sorted(cohort))]


def cap_values(
    cohorts: list[dict[str, str]],
    known: Mapping[str, Set[str]],
    max_values: int,
) -> tuple[list[dict[str, str]], dict[str, list[str]]]:
    """Fold values beyond the per-key cap into ``__other__``.

    ``known`` maps each key to the values already admitted for the model. Returns the capped
    cohorts and the newly admitted values per key, in first-seen order (the batch's order).
    """
    admitted: dict[str, set[str]] = {k: set(v) for k, v in known.items()}
    new: dict[str, list[str]] = {}
    capped: list[dict[str, str]] = []
    for cohort in cohorts:
        out = {}
        for key, value in cohort.items():
            seen = admitted.setdefault(key, set())
            if value not in seen:
                if len(seen) >= max_values:
                    value = OTHER
                else:
                    seen.add(value)
                    new.setdefault(key, []).append(value)
            out[key] = value
        capped.append(out)
    return capped, new


def parse_slice_query(raw: str | None) -> str:
    """``cohort=key:value`` (or ``key=value``) as a slice name; absent or ``all`` is ``all``."""
    if raw is None or raw == ALL:
        return ALL
    key, sep, value = raw.partition(":")
    if not sep:
        key, sep, value = raw.partition("=")
    if not sep or not KEY_PATTERN.match(key) or not 0 < len(value) <= MAX_LENGTH:
        raise ValueError("expected cohort=key:value, e.g. cohort=region:emea, or cohort=all")
    return slice_name(key, value)
