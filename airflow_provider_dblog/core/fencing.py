"""Fencing of a deposed leader's writes (DESIGN invariant 7)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .events import ChangeEvent
from .protocols import LeaderLease, Output


class FencedOutput:
    """The output, with a lease check before every commit: a process that lost its lease
    stops before writing. (A process paused in the middle of a commit is caught by the
    output's own epoch check instead, invariant 7.)"""

    def __init__(self, output: Output, lease: LeaderLease):
        self._output = output
        self._lease = lease

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        self._lease.check()
        self._output.write(events, epoch=epoch)

    def __repr__(self) -> str:  # the output's own (it never shows a secret)
        return repr(self._output)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._output, name)
