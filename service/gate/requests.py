"""The gate's request body: ``{"contract_id", "policy"?, "evaluation"?}``, declared once.

Every problem is a 422 naming its field, whatever JSON arrives. The evaluation's rows are parsed
later, against the contract's task and classes (``service.gate.checks``); here its numbers are
only checked to fit a float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from service.common.declared import (
    JSON_INTEGER,
    BodyModel,
    Declared,
    Fraction,
    Name,
    integer_in,
    one_of,
    problem,
    problems,
)
from service.common.errors import ErrorCollector
from service.contracts.labeled_sets import LABELED_SET_SCHEMA
from service.gate.ece_rule import EceRule
from service.gate.live import LIVE_STATUSES

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


def _evaluation(value: Any, info: ValidationInfo) -> Any:
    """The evaluation set as sent, after reporting the first number no float64 can hold."""
    errors = ErrorCollector()
    stack: list[tuple[Any, str]] = [(value, info.field_name or "evaluation")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > _FLOAT_MAX:
            errors.add(where, "must be finite (beyond the range of a float64)")
            break
    if errors:
        raise problems(errors)
    return value


#: The policy's defaults: ``max_ece`` falls back to the contract's own policy threshold.
DEFAULT_GATE_POLICY: dict[str, Any] = {
    "ece_rule": EceRule.ESTIMATE.value,
    "max_ece_ci_upper": None,
    "min_eval_samples": 500,
    "min_bin_samples": 0,
    "require_nll_improvement": True,
    "require_disjoint_eval": True,
    "require_measured_baseline": False,
    "max_live_status": None,
}
SampleCount = Annotated[int, integer_in(0, MAX_SAMPLES), JSON_INTEGER]


def _fraction(value: Any, handler: ValidatorFunctionWrapHandler) -> float:
    """A JSON number in [0, 1] (integers of any size, infinities and NaN are refused)."""
    try:
        return float(handler(value))
    except ValidationError as exc:
        not_number = exc.errors()[0]["type"] == "float_type"
        raise problem(
            "expected a number in [0, 1]" if not_number else "must be a number in [0, 1]"
        ) from None


#: A number in [0, 1], its messages saying so.
GateFraction = Annotated[Fraction, WrapValidator(_fraction)]


class GatePolicy(BodyModel):
    """The gate policy; absent fields take their defaults (``DEFAULT_GATE_POLICY``), an absent
    or null ``max_ece`` is the contract policy's."""

    max_ece: GateFraction | None = None
    ece_rule: Annotated[
        one_of([rule.value for rule in EceRule]),  # type: ignore[valid-type]
        Field(
            description="how eval_ece judges max_ece: estimate (the debiased ECE must not "
            "exceed it), shown_above (fail only when the one-sided 95% evidence shows the ECE "
            "above it), shown_below (the 95% interval's upper bound must not exceed it)"
        ),
    ] = DEFAULT_GATE_POLICY["ece_rule"]
    max_ece_ci_upper: Annotated[
        GateFraction | None,
        Field(
            description="the older spelling of ece_rule shown_below: adds the check "
            "eval_ece_ci_upper, the 95% interval's upper bound against this number",
            deprecated=True,
        ),
    ] = None
    min_eval_samples: SampleCount = DEFAULT_GATE_POLICY["min_eval_samples"]
    min_bin_samples: SampleCount = DEFAULT_GATE_POLICY["min_bin_samples"]
    require_nll_improvement: bool = DEFAULT_GATE_POLICY["require_nll_improvement"]
    require_disjoint_eval: bool = DEFAULT_GATE_POLICY["require_disjoint_eval"]
    require_measured_baseline: bool = DEFAULT_GATE_POLICY["require_measured_baseline"]
    max_live_status: Annotated[
        one_of([status.value for status in LIVE_STATUSES]) | None,  # type: ignore[valid-type]
        Field(
            description="also fail when a slice of the model (cohort and window) exported now "
            "has this status or a worse one: warn or alert; null (the default) does not look"
        ),
    ] = DEFAULT_GATE_POLICY["max_live_status"]

    def stored(self) -> dict[str, Any]:
        """The policy with every default filled in, without ``max_ece`` when it is null."""
        out = self.model_dump()
        if out["max_ece"] is None:
            del out["max_ece"]
        return out


class GateRequestBody(BodyModel):
    """``{"contract_id", "policy"?, "evaluation"?}``: the evaluation is a labeled set, parsed
    later against the contract; here its numbers are only checked to fit a float64."""

    contract_id: Name
    policy: GatePolicy | None = None
    evaluation: Annotated[Any, PlainValidator(_evaluation)] = None


def _evaluation_schema(schema: dict[str, Any]) -> None:
    """The evaluation is stated by the labeled set's schema, or null."""
    schema["properties"]["evaluation"] = {"anyOf": [LABELED_SET_SCHEMA, {"type": "null"}]}


GATE_POLICY = Declared("GatePolicy", GatePolicy)
GATE_REQUEST = Declared("GateRequest", GateRequestBody, adjust=_evaluation_schema)


def parse_gate_request(body: Any, now: datetime | None = None) -> GateRequest:
    """Validate a ``POST /v1/gate`` body, listing every problem in one ``ValidationFailed``."""
    errors = ErrorCollector()
    parsed = GATE_REQUEST.parse(body, errors, now or datetime.now(UTC))
    errors.raise_if_any("the gate request is invalid")
    assert parsed is not None
    policy = GatePolicy() if parsed.policy is None else parsed.policy
    return GateRequest(
        contract_id=parsed.contract_id, policy=policy.stored(), evaluation=parsed.evaluation
    )
