"""What the writer hands back once everything put before it is durable (invariant 5).

The engine puts a marker into the writer's stream after the items it covers; ``Writer.completed``
returns it only after the output acknowledged all of them. Only then are the checkpoint and
the dump progress it carries stored.
"""

from __future__ import annotations

import dataclasses

from .dumps import TableProgress
from .events import Position, TableSchema


class Marker:
    """Base class of everything the writer completes; carries no data of its own."""

    __slots__ = ()

    @property
    def flush_now(self) -> bool:
        """Whether the writer should end its batch here rather than wait out its flush
        interval (someone waits for this marker to complete)."""
        return False


@dataclasses.dataclass(frozen=True, slots=True)
class LogCheckpoint(Marker):
    """The log is durable up to ``position``: store it as the source's checkpoint."""

    position: Position


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkProgress(Marker):
    """A chunk's rows are durable: store the table's progress (and finish the dump)."""

    dump_id: str
    table: str
    progress: TableProgress
    dump_done: bool

    @property
    def flush_now(self) -> bool:
        """A dump's last chunk: its DONE status (which a DumpOperator or `dblog status`
        waits for) need not wait for the flush interval too."""
        return self.dump_done


@dataclasses.dataclass(frozen=True, slots=True)
class TableReset(Marker):
    """The TRUNCATE (op t) that clears a table's rows before its primary key changed is
    durable: request the table's re-dump and record its new ``schema`` (core/schema_watch.py)."""

    schema: TableSchema
