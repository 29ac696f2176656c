"""The order of a cycle's models: the longest behind first, new data first among equals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.config import Settings
from service.export.change_store import FleetModel, StateRow
from service.export.plan import inputs_key, plan_work
from service.export.reading_store import ExpositionTimes

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_the_longest_behind_go_first_and_new_data_first_among_equals() -> None:
    settings = Settings()
    exposed = T0 + timedelta(minutes=10)
    fleet = {
        name: FleetModel("1:1:0", T0 + timedelta(minutes=minute))
        for name, minute in (
            ("current-data", 0),
            ("current-due", 1),
            ("current-new-version", 2),
            ("left-behind", 3),
            ("failed-long-ago", 4),
            ("new-before", 5),
            ("new-after", 12),
            ("quiet", 6),
        )
    }
    fleet["current-new-version"] = FleetModel("2:7:0", fleet["current-new-version"].registered_at)
    states = {
        name: StateRow(name, inputs_key(FleetModel("1:1:0", T0), settings), ("all",), 0, "ok", T0)
        for name in fleet
        if not name.startswith("new-")
    }
    previous = ExpositionTimes(
        exposed,
        tuple(sorted(set(fleet) - {"new-after"})),
        {
            "left-behind": (T0 + timedelta(minutes=8)).timestamp(),
            "failed-long-ago": T0.timestamp(),
            "new-before": fleet["new-before"].registered_at.timestamp(),
        },
    )
    markers = {m: {"all": 1} for m in ("current-data", "left-behind", "failed-long-ago")}
    due = {"current-due": {("all", "1h")}}

    work = plan_work(fleet, states, markers, due, settings, previous)

    assert [w.model for w in work] == [
        "failed-long-ago",
        "new-before",
        "left-behind",
        "current-data",
        "current-due",
        "current-new-version",
        "new-after",
    ]
    assert work[3].since == exposed.timestamp()
    assert plan_work(fleet, states, markers, due, settings)[0].model == "current-data"
