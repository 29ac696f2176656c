"""An operation's summary is the first paragraph of its route's docstring."""

from __future__ import annotations

import pytest

from service.web.operations import operation, operation_of


def test_the_summary_is_the_docstrings_first_paragraph_on_one_line() -> None:
    @operation(operation_id="example")
    def view() -> None:
        """Read the thing of a model, as JSON or as CSV
        (wrapped over two lines).

        More on how it reads.
        """

    found = operation_of(view)
    assert found is not None
    assert found.summary == "Read the thing of a model, as JSON or as CSV (wrapped over two lines)"


def test_a_route_without_a_docstring_is_refused() -> None:
    with pytest.raises(ValueError, match="no docstring"):

        @operation(operation_id="example")
        def view() -> None:
            pass
