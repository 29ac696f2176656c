"""Grouped row sums against a plain loop that adds each row into its group in turn."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.calibration.grouping import group_sums

_FINITE = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False, allow_subnormal=True)


def _one_row_at_a_time(values: np.ndarray, group: np.ndarray, n_groups: int, rows) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.zeros((n_groups, values.shape[1]))
    for p, g in enumerate(group):
        out[g] += values[p if rows is None else rows[p]]
    return out


@st.composite
def grouped_rows(draw):  # type: ignore[no-untyped-def]
    n_rows = draw(st.integers(1, 40))
    width = draw(st.integers(1, 6))
    values = draw(hnp.arrays(np.float64, (n_rows, width), elements=_FINITE))
    n_groups = draw(st.integers(1, 8))
    n_entries = draw(st.integers(0, 60))
    group = np.array(
        draw(st.lists(st.integers(0, n_groups - 1), min_size=n_entries, max_size=n_entries)),
        dtype=np.int64,
    )
    rows = draw(
        st.none()
        | st.lists(st.integers(0, n_rows - 1), min_size=n_entries, max_size=n_entries).map(
            lambda r: np.array(r, dtype=np.int64)
        )
    )
    if rows is None and n_entries > n_rows:
        group = group[:n_rows]
    return values, group, n_groups, rows


@settings(max_examples=300, deadline=None)
@given(grouped_rows())
def test_each_group_adds_its_rows_in_entry_order_from_zero(case) -> None:  # type: ignore[no-untyped-def]
    values, group, n_groups, rows = case
    if rows is None:
        values = values[: group.size]
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
