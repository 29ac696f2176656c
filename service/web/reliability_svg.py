"""The reliability diagram as SVG: bins against the diagonal with Wilson intervals, and the sample
count of every bin in a histogram beneath. Server-side, no JavaScript, nothing from a CDN.

Two sizes share one template: ``FULL`` (the page's and the API's diagrams) and ``SMALL`` (one
per class in a multiclass contract's class-wise grid; bin counts as tooltips, not labels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flask import render_template

from service.calibration.readings import ReliabilityBin


@dataclass(frozen=True)
class Frame:
    """A diagram's geometry in pixels: the square plot's side, the count histogram's height, the
    margins left of, above and right of the plot, and the gap between plot and histogram."""

    plot: int
    hist: int
    left: int
    top: int
    gap: int
    right: int = 64
    kind: str = "full"

    @property
    def count_labels(self) -> bool:
        """Whether bin counts are printed over the histogram (else only in tooltips)."""
        return self.kind == "full"

    @property
    def width(self) -> int:
        return self.left + self.plot + self.right

    @property
    def height(self) -> int:
        return self.top + self.plot + self.gap + self.hist + 34

    def x(self, value: float) -> float:
        """Pixel column of a probability."""
        return self.left + value * self.plot

    def y(self, value: float) -> float:
        """Pixel row of a frequency (y grows downwards)."""
        return self.top + (1.0 - value) * self.plot


FULL = Frame(plot=300, hist=90, left=56, top=34, gap=60)
SMALL = Frame(plot=150, hist=44, left=58, top=34, gap=56, right=40, kind="small")


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


def layout(bins: Sequence[ReliabilityBin], frame: Frame = FULL) -> list[DiagramBar]:
    """Pixel geometry of each of a reading's non-empty ``bins``."""
    tallest = max((b.n for b in bins), default=1)
    base = frame.top + frame.plot + frame.gap + frame.hist
    x, y = frame.x, frame.y
    bars = []
    for b in bins:
        lo, hi = x(b.lo), x(b.hi)
        count_height = (frame.hist - 14) * b.n / tallest
        bars.append(
            DiagramBar(
                x=lo + 1,
                width=max(hi - lo - 2, 1),
                top=y(b.accuracy),
                height=y(0) - y(b.accuracy),
                point_x=x(b.mean_confidence),
                point_y=y(b.accuracy),
                ci_top=y(b.ci_upper),
                ci_bottom=y(b.ci_lower),
                count_top=base - count_height,
                count_height=count_height,
                label=f"{b.n:,}",
                n=b.n,
                title=(
                    f"[{b.lo:.2f}, {b.hi:.2f}): n = {b.n:,}, mean confidence "
                    f"{b.mean_confidence:.3f}, observed {b.accuracy:.3f} (95% interval "
                    f"{b.ci_lower:.3f} - {b.ci_upper:.3f})"
                ),
            )
        )
    return bars


def _summary(bins: Sequence[ReliabilityBin]) -> str:
    n = sum(b.n for b in bins)
    if not n:
        return "No labeled predictions yet."
    gap = sum(b.n * abs(b.mean_confidence - b.accuracy) for b in bins) / n
    return (
        f"{len(bins)} non-empty bins holding {n:,} labeled predictions; the count-weighted gap "
        f"between mean confidence and observed frequency is {gap:.3f}."
    )


def render(
    bins: Sequence[ReliabilityBin],
    *,
    title: str,
    subtitle: str,
    y_label: str = "observed frequency",
    x_label: str = "predicted probability (mean confidence per bin)",
    frame: Frame = FULL,
) -> str:
    """The diagram as a standalone SVG document (also inlined in the pages)."""
    tick: Callable[[float], str] = "{:.2f}".format
    return render_template(
        "ui/reliability.svg",
        bars=layout(bins, frame),
        title=title,
        subtitle=subtitle,
        summary=_summary(bins),
        y_label=y_label,
        x_label=x_label,
        frame=frame,
        ticks=[(t, tick(t)) for t in (0, 0.25, 0.5, 0.75, 1.0)],
    )
