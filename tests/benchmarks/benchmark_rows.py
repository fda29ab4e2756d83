"""A benchmark module that reports the ``full_rows_to`` its ``figures`` was given (test_command's
``--full-rows-to`` tests): the figure's value is that node count."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks import figures as fig

DEFAULT = 1000


def figures(quick: bool = False, nodes: Sequence[int] = (), full_rows_to: int = DEFAULT) -> list[fig.Figure]:
    return [fig.Figure("P0", "full rows up to", fig.reported(), float(full_rows_to), "nodes")]
