"""The series budget: all plus the most labeled slices, ties by name, with a keep factor."""

from __future__ import annotations

from service.export.budget import KEEP_FACTOR, SliceExport, choose_exported


def test_all_then_the_most_labeled_slices_ties_by_name() -> None:
    labeled = [("all", 500), ("a=1", 10), ("b=1", 40), ("c=1", 40), ("d=1", 5)]
    assert choose_exported(labeled, (), 3) == SliceExport(("all", "b=1", "c=1"), 2)
    assert choose_exported(labeled, (), 1) == SliceExport(("all",), 4)
    assert choose_exported(labeled, (), 50) == SliceExport(("all", "b=1", "c=1", "a=1", "d=1"), 0)


def test_all_is_exported_before_it_has_data() -> None:
    assert choose_exported([("x=1", 3)], (), 2) == SliceExport(("all", "x=1"), 0)


def test_an_exported_slice_keeps_its_place_until_a_challenger_has_25_percent_more() -> None:
    previous = ("all", "kept=1")
    close = [("kept=1", 100), ("new=1", int(100 * KEEP_FACTOR))]
    assert choose_exported(close, previous, 2).exported == ("all", "kept=1")
    ahead = [("kept=1", 100), ("new=1", int(100 * KEEP_FACTOR) + 1)]
    assert choose_exported(ahead, previous, 2).exported == ("all", "new=1")
    # Without the previous choice the larger count wins at once.
    assert choose_exported(close, (), 2).exported == ("all", "new=1")
