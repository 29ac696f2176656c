"""Typed results of the client's synchronous calls; each keeps the whole reply in ``raw``.

Times are the replies' RFC 3339 text; ECE values are fractions in [0, 1] (None without labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class RequestFailed(Exception):
    """The service replied with an error status; ``reply`` is its error envelope."""

    def __init__(self, status: int, reply: Any) -> None:
        error = reply.get("error", {}) if isinstance(reply, dict) else {}
        details = "; ".join(
            f"{d.get('field')}: {d.get('message')}" for d in error.get("details", [])[:10]
        )
        message = f"{status} {error.get('code', 'error')}: {error.get('message', reply)}"
        super().__init__(message + (f" ({details})" if details else ""))
        self.status = status
        self.reply = reply


@dataclass(frozen=True)
class Contract:
    """A registered contract (the reply of fit, register and ``GET .../contract``)."""

    id: str
    model: str
    version: int
    task: str
    classes: list[str]
    content_sha256: str
    #: Fit warnings: objects with ``code`` and ``message``.
    warnings: list[dict[str, str]]
    raw: dict[str, Any]

    @classmethod
    def of(cls, reply: dict[str, Any]) -> Contract:
        return cls(
            id=reply["id"],
            model=reply["model"],
            version=int(reply["version"]),
            task=reply["task"],
            classes=list(reply["classes"]),
            content_sha256=reply.get("content_sha256", ""),
            warnings=list(reply.get("warnings") or []),
            raw=reply,
        )


@dataclass(frozen=True)
class Reading:
    """``GET /v1/models/{model}/calibration``: a window's reading of a cohort slice."""

    model: str
    cohort: str
    window_start: str
    window_end: str
    n_predictions: int
    n_labeled: int
    ece: float | None
    ece_debiased: float | None
    status: str
    raw: dict[str, Any]

    @classmethod
    def of(cls, reply: dict[str, Any]) -> Reading:
        metrics = reply.get("metrics", {})
        return cls(
            model=reply["model"],
            cohort=reply["cohort"],
            window_start=reply["window"]["start"],
            window_end=reply["window"]["end"],
            n_predictions=int(reply["n_predictions"]),
            n_labeled=int(reply["n_labeled"]),
            ece=metrics.get("ece"),
            ece_debiased=metrics.get("ece_debiased"),
            status=reply.get("drift", {}).get("status", ""),
            raw=reply,
        )


@dataclass(frozen=True)
class HistoryPoint:
    """One step ``[start, start + step)`` of a history."""

    start: str
    n_predictions: int
    n_labeled: int
    ece_debiased: float | None
    status: str


@dataclass(frozen=True)
class History:
    """``GET /v1/models/{model}/history``: one point per step, oldest first."""

    model: str
    cohort: str
    step_seconds: int
    points: list[HistoryPoint]
    raw: dict[str, Any]

    @classmethod
    def of(cls, reply: dict[str, Any]) -> History:
        return cls(
            model=reply["model"],
            cohort=reply["cohort"],
            step_seconds=int(reply["step_seconds"]),
            points=[
                HistoryPoint(
                    p["start"], p["n_predictions"], p["n_labeled"], p["ece_debiased"], p["status"]
                )
                for p in reply["points"]
            ],
            raw=reply,
        )


@dataclass(frozen=True)
class GateCheck:
    name: str
    passed: bool
    message: str


@dataclass(frozen=True)
class GateDecision:
    """``POST /v1/gate``: pass or fail, each check, and the evidence."""

    id: str
    decision: str
    checks: list[GateCheck]
    raw: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.decision == "pass"

    @classmethod
    def of(cls, reply: dict[str, Any]) -> GateDecision:
        return cls(
            id=reply["id"],
            decision=reply["decision"],
            checks=[GateCheck(c["name"], bool(c["passed"]), c["message"]) for c in reply["checks"]],
            raw=reply,
        )
