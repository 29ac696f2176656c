"""The route template a request matched, as metrics and request logs name it."""

from __future__ import annotations

import re

from werkzeug.routing import Rule

_CONVERTER = re.compile(r"<(?:[^:<>]+:)?([^:<>]+)>")


def route_template(rule: Rule | None) -> str | None:
    """The matched rule with converter names dropped (``/v1/contracts/<contract_id>``), or
    None when no rule matched."""
    return None if rule is None else _CONVERTER.sub(r"<\1>", rule.rule)
