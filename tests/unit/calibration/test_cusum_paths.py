"""The detector's CUSUM recursion against the textbook form, bit for bit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from service.calibration import sequential

INCREMENT = st.one_of(
    st.floats(-50, 50, allow_nan=False),
    st.sampled_from([0.0, -0.0, float("nan"), 1e-300, -1e-300]),
)


def textbook(Z: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, B) ``S_b = max(0, S_{b-1} + Z_b)`` per pattern, all patterns a block at a time, and
    the rows of each pattern's current stretch (reset where ``S`` is not positive)."""
    P, B = Z.shape
    S, stretch, path = np.zeros(P), np.zeros(P), np.zeros((P, B))
    for b in range(B):
        S = np.maximum(0.0, S + Z[:, b])
        stretch = np.where(S > 0.0, stretch + rows[b], 0.0)
        path[:, b] = S
    return path, stretch.astype(np.int64)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    patterns=st.integers(1, 5),
    blocks=st.integers(0, 40),
)
def test_paths_follow_the_textbook_recursion(
    data: st.DataObject, patterns: int, blocks: int
) -> None:
    Z = data.draw(arrays(np.float64, (patterns, blocks), elements=INCREMENT))
    rows = data.draw(arrays(np.float64, (blocks,), elements=st.integers(0, 10_000)))
    lookback = data.draw(st.integers(0, blocks))
    tables = SimpleNamespace(rows=rows)
    expected, expected_stretch = textbook(Z[:, lookback:], rows[lookback:])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sequential, "block_increments", lambda _t, _d: (Z, ["p"] * patterns))
        whole, stretch, _ = sequential._paths(tables, lookback, None, whole_path=True)  # type: ignore[arg-type]
        end, end_stretch, _ = sequential._paths(tables, lookback, None)  # type: ignore[arg-type]

    assert whole.tobytes() == expected.tobytes()
    assert stretch.tolist() == end_stretch.tolist() == expected_stretch.tolist()
    assert end.tobytes() == expected[:, -1:].tobytes()
