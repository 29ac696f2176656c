"""Cohorts and slices: ``all`` plus one marginal slice per ``key=value``, with caps.

A prediction's cohort is a flat map of at most 8 keys to string values. Each model keeps at most
``max_keys`` distinct keys and ``max_values`` distinct values per key. A value first seen after
its key's cap is reached is folded into ``key=__other__``; a key first seen after the model's key
cap is reached is folded, with its value, into the one slice ``__other__=__other__``. A model
therefore has at most ``2 + max_keys * (max_values + 1)`` slices, and so a bounded number of
Prometheus series.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from typing import Any

from sqlalchemy.orm import Session

from service.common.errors import ErrorCollector
from service.common.values import printable, text_problem
from service.config import Settings
from service.stream import cohort_store

ALL = "all"
OTHER = "__other__"
MAX_KEYS = 8
MAX_LENGTH = 64
KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")


def parse_cohort(
    value: Any, path: str, errors: ErrorCollector, item: int | None = None
) -> dict[str, str] | None:
    """Validate a cohort map, recording its first problem; ``None`` (absent) means no cohort
    keys. Its types and text first (keys matching ``KEY_PATTERN`` whole, string values of valid
    text), then at most ``MAX_KEYS`` keys, values of 1-``MAX_LENGTH`` characters, ``OTHER``
    neither key nor value."""
    if value is None:
        return {}
    if type(value) is not dict:
        errors.add(path, "expected an object of string keys to string values", item)
        return None
    for key, val in value.items():
        if not KEY_PATTERN.fullmatch(key):
            errors.add(
                f"{path}.{printable(key)}",
                "keys are 1-64 letters, digits, _ . - starting with a letter or _",
                item,
            )
            return None
        problem = "expected a string value" if type(val) is not str else text_problem(val)
        if problem is not None:
            errors.add(f"{path}.{key}", problem, item)
            return None
    if len(value) > MAX_KEYS:
        errors.add(path, f"at most {MAX_KEYS} keys, got {len(value)}", item)
        return None
    for key, val in value.items():
        if not 0 < len(val) <= MAX_LENGTH:
            errors.add(f"{path}.{key}", f"expected a string of 1-{MAX_LENGTH} characters", item)
            return None
        if key == OTHER or val == OTHER:
            message = f"{OTHER!r} is reserved for keys and values over the caps"
            errors.add(f"{path}.{key}", message, item)
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
    max_keys: int | None = None,
) -> tuple[list[dict[str, str]], dict[str, list[str]]]:
    """Fold keys beyond the model's key cap and values beyond each key's value cap into
    ``__other__``.

    ``known`` maps every key already admitted for the model to its admitted values (a key is
    admitted with its first value); ``max_keys`` None leaves keys uncapped. Returns the capped
    cohorts and the newly admitted values per key, in first-seen order (the batch's order; keys
    in a cohort in sorted order).
    """
    admitted: dict[str, set[str]] = {k: set(v) for k, v in known.items()}
    new: dict[str, list[str]] = {}
    capped: list[dict[str, str]] = []
    for cohort in cohorts:
        out = {}
        for key in sorted(cohort):
            value = cohort[key]
            seen = admitted.get(key)
            if seen is None:
                if max_keys is not None and len(admitted) >= max_keys:
                    out[OTHER] = OTHER
                    continue
                seen = admitted[key] = set()
            if value not in seen:
                if len(seen) >= max_values:
                    value = OTHER
                else:
                    seen.add(value)
                    new.setdefault(key, []).append(value)
            out[key] = value
        capped.append(out)
    return capped, new


def admit_cohorts(
    session: Session, model: str, cohorts: list[dict[str, str]], settings: Settings
) -> list[dict[str, str]]:
    """The batch's distinct ``cohorts`` capped for ``model``; records newly admitted keys and
    values in the caller's transaction.

    Read without a lock first: once a model's keys and values are all admitted (the steady
    state) no batch waits on another. A batch that would admit something locks the model and
    decides again on what is committed by then.
    """
    keys = {key for cohort in cohorts for key in cohort}
    limits = (settings.max_cohort_values, settings.max_cohort_keys)
    capped, new = cap_values(cohorts, cohort_store.admitted(session, model, keys), *limits)
    if not new:
        return capped
    cohort_store.lock_model(session, model)
    capped, new = cap_values(cohorts, cohort_store.admitted(session, model, keys), *limits)
    cohort_store.admit_values(session, model, new)
    return capped


def parse_slice_query(raw: str | None) -> str:
    """``cohort=key=value`` (or ``key:value``) as a slice name; absent or ``all`` is
    ``all``. The key ends at its first ``=`` or ``:`` (a key holds neither), so a value may hold
    both."""
    if raw is None or raw == ALL:
        return ALL
    cut = next((i for i, char in enumerate(raw) if char in "=:"), -1)
    key, value = (raw[:cut], raw[cut + 1 :]) if cut >= 0 else (raw, "")
    if cut < 0 or not KEY_PATTERN.match(key) or not 0 < len(value) <= MAX_LENGTH:
        raise ValueError("expected cohort=key=value, e.g. cohort=region=emea, or cohort=all")
    return slice_name(key, value)
