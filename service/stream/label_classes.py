"""What a label means: a class of the contract its prediction is bound to.

A label is sent as a class index ``0..K-1`` or as a class name. Contract versions of one model
may add, drop or reorder classes, so a label is read by the classes of its prediction's
contract, whichever version is current when the label arrives. Until its prediction is stored
a label is known only as sent: ``SentLabel`` holds it so, with a provisional index (for a name,
its index under the newest version that knows it) that the judgement at the join replaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SentLabel:
    """A label as sent: ``name`` the class name (None for a label sent as an index) and
    ``index`` the index sent, or for a name its provisional index."""

    index: int
    name: str | None = None

    def as_sent(self) -> int | str:
        """The label in the form it was sent, for replies."""
        return self.index if self.name is None else self.name


def known_labels(versions: Sequence[Sequence[str]]) -> tuple[dict[str, int], int]:
    """The class names any of ``versions`` (class lists, newest version first) knows, each with
    its index under the newest version that knows it; and the largest K among them."""
    index_of: dict[str, int] = {}
    for classes in reversed(versions):
        index_of.update((name, k) for k, name in enumerate(classes))
    return index_of, max((len(classes) for classes in versions), default=0)


def class_index(label: SentLabel, classes: Sequence[str]) -> int | None:
    """The class index ``label`` means under a contract of ``classes``; None if that contract
    has no such class (a name it does not know, an index past its K)."""
    if label.name is None:
        return label.index if 0 <= label.index < len(classes) else None
    try:
        return classes.index(label.name)
    except ValueError:
        return None


def same_label(new: SentLabel, old: SentLabel, classes: Sequence[str] | None) -> bool:
    """Whether a label met again agrees with the one stored before for the same prediction.

    Labels sent alike agree; otherwise with ``classes`` (the prediction's contract is known)
    both are read by them; without, two names compare as names, anything else by index (a name
    by its provisional index).
    """
    if new.as_sent() == old.as_sent():
        return True
    if classes is not None:
        index = class_index(new, classes)
        return index is not None and index == class_index(old, classes)
    if new.name is not None and old.name is not None:
        return new.name == old.name
    return new.index == old.index
