"""Sums of array rows by group: the reduction every grouped statistic of a batch ends in."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from service.calibration._checks import FloatArray, IntArray


def group_sums(
    values: FloatArray, group: IntArray, n_groups: int, rows: IntArray | None = None
) -> FloatArray:
    """Return the (G, C) sums of the rows of (R, C) float64 ``values`` by group.

    Entry p of (P,) ``group`` (integers in 0..G-1) adds row ``rows[p]`` of ``values`` (row p
    without ``rows``) into sum ``group[p]``. Each sum starts from zero and adds its rows in the
    order of p; a group without rows sums to zeros. One sparse-by-dense product does it in a
    single pass over the rows, at a cost that does not grow with the number of groups (unlike
    ``np.add.reduceat``, which pays a setup per group, or a ``np.bincount`` per column).
    """
    group = np.asarray(group, dtype=np.int64).ravel()
    order = np.argsort(group, kind="stable")
    sources = order if rows is None else np.asarray(rows, dtype=np.int64).ravel()[order]
    starts = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=n_groups), out=starts[1:])
    indicator = sparse.csr_array(
        (np.ones(group.size), sources, starts), shape=(n_groups, values.shape[0])
    )
    return np.asarray(indicator @ values, dtype=np.float64)
