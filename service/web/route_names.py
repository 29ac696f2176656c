"""The route template a request matched, as metrics and request logs name it."""

from __future__ import annotations

import re

from werkzeug.routing import Rule

#: A variable of a rule: ``<name>`` or ``<converter:name>``, the converter's arguments aside.
_VARIABLE = re.compile(r"<(?:([^:<>()]+)(?:\([^)]*\))?:)?([^:<>]+)>")


def route_template(rule: Rule | None) -> str | None:
    """The matched rule with converter names dropped (``/v1/contracts/<contract_id>``), or
    None when no rule matched."""
    return None if rule is None else _VARIABLE.sub(r"<\2>", rule.rule)


def rule_converters(rule: Rule) -> dict[str, str]:
    """``{variable: converter name}`` of the rule's variables in path order (``default`` where
    the rule names none)."""
    return {name: converter or "default" for converter, name in _VARIABLE.findall(rule.rule)}
