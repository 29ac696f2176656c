"""Pack ``CalibrationStats`` into flat float64 vectors that add element-wise.

Stored time buckets keep their statistics as one vector each; a window is the element-wise sum of
its buckets' vectors, unpacked once. Counts travel as float64, exact up to 2**53 rows.
The layout (task, edges, K, classwise tables, threshold) is not stored in the vector: it comes
from the contract the statistics belong to.

Size. A multiclass vector holds ``5 + 3 M + K`` statistics, plus ``3 K M`` for the class-wise
tables when they are kept, plus ``3 J`` = 111 refit knot sums (M bins, K classes, J knots); a
binary one ``5 + 3 M + 2 + 4 + 2 H + 111`` with H = ``AUC_CELLS``. The class-wise tables grow
with K times M (2.4 MB a bucket at K = 1,000 and M = 100), so bucket statistics keep them only
up to ``CLASSWISE_MAX_CELLS`` = 1,500 cells K M (``keeps_classwise``: K <= 100 at the default
15 bins, K <= 15 at 100 bins); every other part grows with K or M alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.calibration.calibration_stats import CalibrationStats, empty_stats
from service.calibration.refit import N_KNOTS
from service.calibration.vocabulary import Task

_SCALARS = ("n", "nll_sum", "brier_sum", "correct_sum", "confidence_sum")
_ARRAYS = (
    "bin_count",
    "bin_confidence_sum",
    "bin_correct_sum",
    "label_counts",
    "class_bin_count",
    "class_bin_prob_sum",
    "class_bin_label_sum",
    "confusion",
    "positive_hist",
    "negative_hist",
)
_INTEGER = {
    "n",
    "correct_sum",
    "bin_count",
    "bin_correct_sum",
    "label_counts",
    "class_bin_count",
    "class_bin_label_sum",
    "confusion",
    "positive_hist",
    "negative_hist",
}


#: Bucket statistics keep the class-wise (K, M) tables of a multiclass contract whose K classes
#: times M bins come to at most this many cells; above it a window's reading has no class-wise
#: ECE. 1,500 is K = 100 at the default 15 bins: the tables then hold 4,500 values (36 kB), and
#: no bucket row of any contract calmon accepts (K <= 1,000, M <= 100) exceeds 43 kB. Changing it
#: changes the stored layout of the buckets of every contract it moves across: that needs a
#: migration rewriting them (as revision 0014 drops the tables above 1,500 cells).
CLASSWISE_MAX_CELLS = 1500


def keeps_classwise(task: str, n_classes: int, n_bins: int) -> bool:
    """Whether bucket statistics of ``task`` with K = ``n_classes`` classes and M = ``n_bins``
    bins keep class-wise tables: multiclass with K M <= ``CLASSWISE_MAX_CELLS`` (binary
    statistics never have them; K = 2 keeps them at every M calmon accepts, up to 100)."""
    return task != Task.BINARY and n_classes * n_bins <= CLASSWISE_MAX_CELLS


@dataclass(frozen=True)
class StatsLayout:
    """Everything but the numbers: which fields a vector holds and their shapes.

    With ``refit``, the vector ends with the (3, J) refit-temperature knot sums of
    ``service.calibration.refit`` (flattened, loss first), after the statistics.
    """

    task: str
    edges: tuple[float, ...]
    n_classes: int
    classwise: bool = True
    threshold: float = 0.5
    refit: bool = False

    def empty(self) -> CalibrationStats:
        return empty_stats(
            self.task,
            np.asarray(self.edges),
            self.n_classes,
            classwise=self.classwise,
            threshold=self.threshold,
        )

    @property
    def stats_size(self) -> int:
        """Length of the statistics part of a packed vector."""
        return pack(self.empty()).size

    @property
    def size(self) -> int:
        """Length of a packed vector."""
        return self.stats_size + (3 * N_KNOTS if self.refit else 0)


def pack(stats: CalibrationStats) -> np.ndarray:
    """The statistics as one float64 vector (scalars first, then arrays in a fixed order)."""
    parts: list[Any] = [np.array([float(getattr(stats, name)) for name in _SCALARS])]
    for name in _ARRAYS:
        value = getattr(stats, name)
        if value is not None:
            parts.append(np.asarray(value, dtype=np.float64).ravel())
    return np.concatenate(parts)


def without_classwise(layout: StatsLayout) -> tuple[StatsLayout, np.ndarray]:
    """``layout`` without its class-wise tables, and the (L',) columns of a packed vector of
    ``layout`` that form the packed vector of the smaller layout (readings that need no
    class-wise reliability sum fewer columns)."""
    smaller = replace(layout, classwise=False)
    full, kept = layout.empty(), smaller.empty()
    columns: list[np.ndarray] = [np.arange(len(_SCALARS))]
    offset = len(_SCALARS)
    for name in _ARRAYS:
        value = getattr(full, name)
        if value is None:
            continue
        size = int(np.size(value))
        if getattr(kept, name) is not None:
            columns.append(np.arange(offset, offset + size))
        offset += size
    if layout.refit:
        columns.append(np.arange(offset, offset + 3 * N_KNOTS))
    return smaller, np.concatenate(columns)


def unpack_knots(vector: np.ndarray, layout: StatsLayout) -> np.ndarray:
    """The (3, J) refit knot sums at the end of a packed vector of a ``refit`` layout."""
    vector = np.asarray(vector, dtype=np.float64)
    if vector.ndim != 1:
        raise ValueError(f"expected one packed vector, got shape {vector.shape}")
    return unpack_knots_many(vector[None, :], layout)[0]


def unpack_knots_many(matrix: np.ndarray, layout: StatsLayout) -> np.ndarray:
    """The (S, 3, J) refit knot sums at the end of S packed vectors (S, L) of a refit layout."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if not layout.refit or matrix.ndim != 2 or matrix.shape[1] != layout.size:
        raise ValueError(f"packed vectors of shape {matrix.shape} have no refit knots")
    return matrix[:, layout.stats_size :].reshape(matrix.shape[0], 3, N_KNOTS)


def unpack_fields(matrix: np.ndarray, layout: StatsLayout) -> dict[str, np.ndarray]:
    """The statistics fields of S packed vectors (S, L) of ``layout``, each with a leading S axis.

    Counts come back as whole float64 numbers; the layout's refit knots are not included.
    """
    template = layout.empty()
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != layout.size:
        raise ValueError(f"packed statistics have {matrix.shape}, layout needs (S, {layout.size})")
    S = matrix.shape[0]
    fields: dict[str, np.ndarray] = {}
    offset = 0
    for name in _SCALARS:
        column = matrix[:, offset]
        fields[name] = np.rint(column) if name in _INTEGER else column
        offset += 1
    for name in _ARRAYS:
        shape_of = getattr(template, name)
        if shape_of is None:
            continue
        size = int(np.prod(shape_of.shape))
        chunk = matrix[:, offset : offset + size].reshape(S, *shape_of.shape)
        fields[name] = np.rint(chunk) if name in _INTEGER else chunk
        offset += size
    return fields


def unpack(vector: np.ndarray, layout: StatsLayout) -> CalibrationStats:
    """Rebuild statistics from a packed vector (or a sum of packed vectors) of ``layout``."""
    vector = np.asarray(vector, dtype=np.float64)
    if vector.shape != (layout.size,):
        raise ValueError(f"packed statistics have {vector.size} values, layout needs {layout.size}")
    values: dict[str, Any] = {}
    for name, column in unpack_fields(vector[None, :], layout).items():
        value = column[0]
        if name in _INTEGER:
            values[name] = int(value) if value.ndim == 0 else value.astype(np.int64)
        else:
            values[name] = float(value) if value.ndim == 0 else value.copy()
    return CalibrationStats(
        task=layout.task,
        edges=np.asarray(layout.edges),
        n_classes=layout.n_classes,
        threshold=layout.threshold if layout.task == Task.BINARY else None,
        **values,
    )


def pack_groups(sums: dict[str, Any]) -> np.ndarray:
    """Pack ``stats.grouped_stats`` output into a (G, L) matrix: row g is ``pack`` of group g."""
    G = np.asarray(sums["n"]).shape[0]
    parts: list[Any] = [
        np.column_stack([np.asarray(sums[name], dtype=np.float64) for name in _SCALARS])
    ]
    for name in _ARRAYS:
        if name in sums:
            parts.append(np.asarray(sums[name], dtype=np.float64).reshape(G, -1))
    return np.hstack(parts)
