"""``calmon demo``: a realistic scenario (``scenario``) streamed into a running calmon (``run``)."""

from service.demo.run import DemoFailed, DemoOptions, Progress, gauge_lines, run_demo
from service.demo.scenario import (
    COHORTS,
    DRIFTING,
    LABEL_DELAY_HOURS,
    STEP,
    Scenario,
    build_scenario,
    reference_sets,
    ticks,
)

__all__ = [
    "COHORTS",
    "DRIFTING",
    "LABEL_DELAY_HOURS",
    "STEP",
    "DemoFailed",
    "DemoOptions",
    "Progress",
    "Scenario",
    "build_scenario",
    "gauge_lines",
    "reference_sets",
    "run_demo",
    "ticks",
]
