"""The gate's request body: ``{"contract_id", "policy"?, "evaluation"?}``, declared once.

Every problem is a 422 naming its field, whatever JSON arrives. The evaluation's rows are parsed
later, against the contract's task and classes (``service.gate.checks``); here its numbers are
only checked to fit a float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.common.errors import ErrorCollector
from service.common.fields import Body, Context, Custom, Flag, Integer, Number, Obj, Text
from service.common.values import NAME_PATTERN
from service.contracts.labeled_sets import LABELED_SET_SCHEMA

#: Largest sample-count threshold a policy may set (more rows than any request can carry).
MAX_SAMPLES = 10**9
#: Largest magnitude JSON may give an evaluation value and still be a float64.
_FLOAT_MAX = 1.7976931348623157e308


@dataclass(frozen=True)
class GateRequest:
    """A validated gate request: ``policy`` with every default filled in (``max_ece`` None
    means the contract policy's), ``evaluation`` the raw labeled set, if any."""

    contract_id: str
    policy: dict[str, Any]
    evaluation: Any


def _fraction(value: Any, path: str, errors: ErrorCollector, context: Context) -> float | None:
    """A JSON number in [0, 1] (integers of any size, infinities and NaN are refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.add(path, "expected a number in [0, 1]")
        return None
    if not 0 <= value <= 1:
        errors.add(path, "must be a number in [0, 1]")
        return None
    return float(value)


def _evaluation(value: Any, path: str, errors: ErrorCollector, context: Context) -> Any:
    """The evaluation set as sent, after reporting the first number no float64 can hold."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > _FLOAT_MAX:
            errors.add(where, "must be finite (beyond the range of a float64)")
            break
    return value


#: The policy's defaults: ``max_ece`` falls back to the contract's own policy threshold.
DEFAULT_GATE_POLICY: dict[str, Any] = {
    "max_ece_ci_upper": None,
    "min_eval_samples": 500,
    "min_bin_samples": 0,
    "require_nll_improvement": True,
    "require_disjoint_eval": True,
    "require_measured_baseline": False,
}
_FRACTION_SCHEMA = Number(0, 1, nullable=True).schema()
#: The gate policy; absent fields take their defaults.
GATE_POLICY = Obj(
    {
        "max_ece": Custom(_fraction, _FRACTION_SCHEMA, nullable=True),
        "max_ece_ci_upper": Custom(_fraction, _FRACTION_SCHEMA, nullable=True),
        **{
            name: Integer(0, MAX_SAMPLES, default=DEFAULT_GATE_POLICY[name])
            for name in ("min_eval_samples", "min_bin_samples")
        },
        **{
            name: Flag(default=DEFAULT_GATE_POLICY[name])
            for name in ("require_nll_improvement", "require_disjoint_eval")
        },
        "require_measured_baseline": Flag(default=DEFAULT_GATE_POLICY["require_measured_baseline"]),
    },
    nullable=True,
)


def _policy(value: Any, path: str, errors: ErrorCollector, context: Context) -> dict[str, Any]:
    """The policy with defaults filled in; ``null`` or absent means every default."""
    policy = GATE_POLICY.parse_or(DEFAULT_GATE_POLICY, value, path, errors, context)
    if policy.get("max_ece", 0) is None:
        policy.pop("max_ece", None)
    return policy


GATE_REQUEST = Body(
    "GateRequest",
    Obj(
        {
            "contract_id": Text(pattern=NAME_PATTERN),
            "policy": Custom(_policy, GATE_POLICY.schema(), nullable=True),
            "evaluation": Custom(_evaluation, LABELED_SET_SCHEMA, nullable=True),
        },
        required=("contract_id",),
    ),
)


def parse_gate_request(body: Any, now: datetime | None = None) -> GateRequest:
    """Validate a ``POST /v1/gate`` body, listing every problem in one ``ValidationFailed``."""
    errors = ErrorCollector()
    values = GATE_REQUEST.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("the gate request is invalid")
    return GateRequest(
        contract_id=str(values["contract_id"]),
        policy=values["policy"],
        evaluation=values["evaluation"],
    )
