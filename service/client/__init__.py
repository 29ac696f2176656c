"""A Python client of calmon: ``from service.client import Calmon``."""

from service.client.calmon import Calmon
from service.client.results import (
    Contract,
    GateCheck,
    GateDecision,
    History,
    HistoryPoint,
    Reading,
    RequestFailed,
)
from service.client.sender import SenderStats
from service.client.transport import Unreachable

__all__ = [
    "Calmon",
    "Contract",
    "GateCheck",
    "GateDecision",
    "History",
    "HistoryPoint",
    "Reading",
    "RequestFailed",
    "SenderStats",
    "Unreachable",
]
