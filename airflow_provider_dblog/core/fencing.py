"""Fencing of a deposed leader's writes (DESIGN invariant 7)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .events import ChangeEvent, Key, Position, TableSchema
from .protocols import FullRowIndex, LeaderLease, Output, RowTextOutput, WholeRowConsumers


class FencedOutput:
    """The output, with a lease check before every commit: a process that lost its lease
    stops before writing. (A process paused in the middle of a commit is caught by the
    output's own epoch check instead, invariant 7.)

    It declares the capabilities of the output it wraps and no others (core/protocols.py):
    ``takes_row_text`` and ``needs_whole_rows()`` as the output's, and ``full_row_keys`` only through ``fenced_output``'s
    subclass for a ``FullRowIndex``. Anything else is delegated (``__getattr__``), which
    ``isinstance`` does not see on Python 3.12 and later."""

    def __init__(self, output: Output, lease: LeaderLease):
        self._output = output
        self._lease = lease
        self.takes_row_text = isinstance(output, RowTextOutput) and output.takes_row_text

    def needs_whole_rows(self) -> bool:
        return isinstance(self._output, WholeRowConsumers) and self._output.needs_whole_rows()

    def open(self) -> None:
        self._output.open()

    def register_schema(self, schema: TableSchema) -> None:
        self._output.register_schema(schema)

    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        self._output.register_schemas(schemas)

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        self._lease.check()
        self._output.write(events, epoch=epoch)

    def last_position(self, source_id: str) -> Optional[Position]:
        return self._output.last_position(source_id)

    def close(self) -> None:
        self._output.close()

    def __repr__(self) -> str:  # the output's own (it never shows a secret)
        return repr(self._output)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._output, name)


class _FencedFullRowIndex(FencedOutput):
    """A fenced ``FullRowIndex`` output: the index is a read, so it needs no lease check."""

    _output: Any  # a FullRowIndex too

    def full_row_keys(self, source_id: str, table: str) -> list[Key]:
        keys: list[Key] = self._output.full_row_keys(source_id, table)
        return keys


def fenced_output(output: Output, lease: LeaderLease) -> FencedOutput:
    """``output`` behind the lease check, with the same capabilities."""
    if isinstance(output, FullRowIndex):
        return _FencedFullRowIndex(output, lease)
    return FencedOutput(output, lease)
