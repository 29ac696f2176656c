"""Grouped row sums against a plain loop that adds each row into its group in turn."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.calibration.grouping import group_sums

_FINITE = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False, allow_subnormal=True)


Case = tuple[np.ndarray, np.ndarray, int, np.ndarray | None]


def _one_row_at_a_time(
    values: np.ndarray, group: np.ndarray, n_groups: int, rows: np.ndarray | None
) -> np.ndarray:
    out = np.zeros((n_groups, values.shape[1]))
    for p, g in enumerate(group):
        out[g] += values[p if rows is None else rows[p]]
    return out


@st.composite
def grouped_rows(draw: st.DrawFn) -> Case:
    """Values, a group per entry, and either a row per entry or (without rows) one entry per
    row of values."""
    n_rows = draw(st.integers(1, 40))
    values = draw(hnp.arrays(np.float64, (n_rows, draw(st.integers(1, 6))), elements=_FINITE))
    n_groups = draw(st.integers(1, 8))
    n_entries = draw(st.integers(0, 60))
    group = draw(hnp.arrays(np.int64, n_entries, elements=st.integers(0, n_groups - 1)))
    if draw(st.booleans()):
        rows = draw(hnp.arrays(np.int64, n_entries, elements=st.integers(0, n_rows - 1)))
        return values, group, n_groups, rows
    entries = min(n_entries, n_rows)
    return values[:entries], group[:entries], n_groups, None


@settings(max_examples=300, deadline=None)
@given(grouped_rows())
def test_each_group_adds_its_rows_in_entry_order_from_zero(case: Case) -> None:
    values, group, n_groups, rows = case
    got = group_sums(values, group, n_groups, rows)
    assert got.shape == (n_groups, values.shape[1])
    assert np.array_equal(got, _one_row_at_a_time(values, group, n_groups, rows))


def test_groups_without_rows_are_zero_and_order_within_a_group_is_kept() -> None:
    # 1e16 + 1 - 1e16 is 0 in float64 when added left to right, 1 in the other order.
    values = np.array([[1e16], [1.0], [-1e16], [5.0]])
    got = group_sums(values, np.array([2, 2, 2, 0]), 4)
    assert got.tolist() == [[5.0], [0.0], [0.0], [0.0]]
    reordered = group_sums(values, np.array([2, 2, 2]), 3, rows=np.array([0, 2, 1]))
    assert reordered.tolist() == [[0.0], [0.0], [1.0]]
