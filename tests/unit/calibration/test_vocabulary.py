"""The task and status vocabularies: their texts, the status order and the numbers calmon
publishes and stores for it, and that the rest of the service spells them only through them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from service.calibration.vocabulary import ATTENTION, Status, Task, severity_of, worst_status

SERVICE = Path(__file__).resolve().parents[3] / "service"
VOCABULARY = SERVICE / "calibration" / "vocabulary.py"
TEXTS = {member.value for member in (*Task, *Status)}


def test_members_are_their_texts() -> None:
    assert [t.value for t in Task] == ["multiclass", "binary"]
    assert [s.value for s in Status] == ["insufficient_data", "ok", "warn", "alert"]
    stored = {"binary": 1, "alert": 2}
    assert stored[Task.BINARY] == 1 and stored[Status.ALERT] == 2
    assert {Task.BINARY: 1}["binary"] == 1
    assert json.dumps({Status.WARN: Task.MULTICLASS}) == '{"warn": "multiclass"}'
    assert f"{Status.INSUFFICIENT_DATA}" == "insufficient_data"


def test_severity_stored_and_published() -> None:
    assert [(s.value, s.severity, s.gauge_value) for s in Status] == [
        ("insufficient_data", 0, -1),
        ("ok", 1, 0),
        ("warn", 2, 1),
        ("alert", 3, 2),
    ]
    assert [severity_of(t) for t in ("alert", "warn", "ok", "insufficient_data")] == [3, 2, 1, 0]
    assert [severity_of(t) for t in (None, "None", "", "ALERT", ["alert"])] == [-1] * 5
    assert ATTENTION == ("alert", "warn")


@pytest.mark.parametrize(
    ("texts", "worst"),
    [
        ([], None),
        (["ok", "alert", "warn"], "alert"),
        (["insufficient_data", "ok"], "ok"),
        (["None", "insufficient_data"], "None"),
        (["insufficient_data", "None"], "insufficient_data"),
    ],
)
def test_worst_status_is_the_first_most_severe(texts: list[str], worst: str | None) -> None:
    assert worst_status(texts) == worst


def _compared_texts(path: Path) -> list[str]:
    """``line: text`` of every comparison of a vocabulary text spelled as a string literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                if isinstance(operand, ast.Constant) and operand.value in TEXTS:
                    found.append(f"{node.lineno}: {operand.value!r}")
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for p in SERVICE.rglob("*.py") if p != VOCABULARY),
    ids=lambda p: str(p.relative_to(SERVICE)),
)
def test_tasks_and_statuses_are_compared_through_the_enums(path: Path) -> None:
    assert _compared_texts(path) == []
