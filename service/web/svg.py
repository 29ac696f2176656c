"""The reliability diagram as SVG: bins against the diagonal with Wilson intervals, and the sample
count of every bin in a histogram beneath. Server-side, no JavaScript, nothing from a CDN."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flask import render_template

WIDTH, PLOT, HIST = 420, 300, 90
LEFT, TOP, GAP = 56, 34, 60


@dataclass(frozen=True)
class DiagramBar:
    """One non-empty bin laid out in pixels (y grows downwards)."""

    x: float
    width: float
    top: float
    height: float
    point_x: float
    point_y: float
    ci_top: float
    ci_bottom: float
    count_top: float
    count_height: float
    label: str
    n: int
    title: str


def _x(value: float) -> float:
    return LEFT + value * PLOT


def _y(value: float) -> float:
    return TOP + (1.0 - value) * PLOT


def layout(bins: Sequence[dict[str, Any]]) -> list[DiagramBar]:
    """Pixel geometry of each bin: dicts with ``lo``, ``hi``, ``n``, ``mean_confidence``,
    ``accuracy`` and ``ci`` (as in a reading's ``bins``)."""
    tallest = max((b["n"] for b in bins), default=1)
    base = TOP + PLOT + GAP + HIST
    bars = []
    for b in bins:
        lo, hi = _x(b["lo"]), _x(b["hi"])
        count_height = (HIST - 14) * b["n"] / tallest
        bars.append(
            DiagramBar(
                x=lo + 1,
                width=max(hi - lo - 2, 1),
                top=_y(b["accuracy"]),
                height=_y(0) - _y(b["accuracy"]),
                point_x=_x(b["mean_confidence"]),
                point_y=_y(b["accuracy"]),
                ci_top=_y(b["ci"][1]),
                ci_bottom=_y(b["ci"][0]),
                count_top=base - count_height,
                count_height=count_height,
                label=f"{b['n']:,}",
                n=b["n"],
                title=(
                    f"[{b['lo']:.2f}, {b['hi']:.2f}): n = {b['n']:,}, mean confidence "
                    f"{b['mean_confidence']:.3f}, observed {b['accuracy']:.3f} (95% interval "
                    f"{b['ci'][0]:.3f} - {b['ci'][1]:.3f})"
                ),
            )
        )
    return bars


def render(
    bins: Sequence[dict[str, Any]],
    *,
    title: str,
    subtitle: str,
    y_label: str = "observed frequency",
) -> str:
    """The diagram as a standalone SVG document."""
    return render_template(
        "ui/reliability.svg",
        bars=layout(bins),
        title=title,
        subtitle=subtitle,
        y_label=y_label,
        width=WIDTH,
        left=LEFT,
        top=TOP,
        plot=PLOT,
        hist=HIST,
        gap=GAP,
        height=TOP + PLOT + GAP + HIST + 34,
        ticks=[0, 0.25, 0.5, 0.75, 1.0],
        x=_x,
        y=_y,
    )
