"""How the operator words lists and counts for people: status messages, Events, logs (one owner).

Why: a message that names every node grows with the fleet. A condition message is capped at
`CONDITION_MESSAGE_LIMIT` characters by the CRD schema, and one past it makes the API server refuse the whole
status write (422): at 1,000 nodes that do not answer an uninstall, the finalizer's status could never be
written and the uninstall never finished. Messages name a few and count the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

NAMES_SHOWN = 10
"""Lists in messages are cut after this many names (status stays small on big fleets)."""

CONDITION_MESSAGE_LIMIT = 32768
"""The most characters a condition's ``message`` may have (the CRD's ``maxLength``, as in metav1.Condition)."""

CUT = " … (cut)"


def names(items: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """``a, b and 3 more``: the first ``shown`` of ``items``, and how many are left out."""
    listed = ", ".join(items[:shown])
    return listed + (f" and {len(items) - shown:,} more" if len(items) > shown else "")


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 node``, ``2 nodes``: messages are read by people."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def at_most(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying it was cut: the last guard before a length-capped field."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT
