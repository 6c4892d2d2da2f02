"""Range repair (docs/design.md "Range repair"): what a dump chunk states it covers.

A chunk that covers a range emits, at its HW sub 0 and before its rows, an op ``k`` event
naming the keys it covers and ``since``: replay and the landing remove every covered key
whose last event is older than ``since`` (a row deleted while nothing was captured goes; a
key changed inside the window is the log's, Algorithm 1). Pure functions of the chunk.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .dumps import TableProgress
from .events import ChangeEvent, Op, Origin, Position, TableSchema
from .key_types import orders_like_python
from .scheduler import ChunkPlan
from .watermark import ChunkDone


@dataclasses.dataclass(frozen=True)
class OpenChunk:
    """The window's context: which plan the chunk in flight belongs to, the table's progress
    once its rows are emitted (their count is added at HW), and the schema its SELECT used
    (its rows carry that schema's id even if the log announces a new shape meanwhile)."""

    plan: ChunkPlan
    progress: TableProgress
    schema: TableSchema
    texts: bool = False  # the rows are their changelog JSON texts (core/row_text.py)


def orders_like_python_keys(schema: TableSchema) -> bool:
    by_name = {c.name: c for c in schema.columns}
    return orders_like_python([by_name[k] for k in schema.key])


def states_coverage(chunk: OpenChunk) -> bool:
    """Whether a chunk states what it covers (op k): key-list chunks always (a listed key
    the source lacks is gone; equality needs no order); table-dump chunks when their key
    columns order alike in the database, Python and Spark (integers); for other keys the
    table's last chunk only, covering the whole table (``range_event``)."""
    plan = chunk.plan
    if plan.keys is not None:
        return bool(plan.keys)
    if not plan.start.bounded or plan.where is not None:
        return False  # a filtered chunk: keys outside the filter are not absent
    if orders_like_python_keys(chunk.schema):
        return True
    return chunk.progress.done and plan.start.bound_at is not None  # `since`: the bound's position


def range_event(source_id: str, done: ChunkDone, chunk: OpenChunk) -> ChangeEvent:
    """What the chunk covers, at HW sub 0 (its rows follow at subs 1..n): the listed keys
    of a key-list chunk, or the key range from the previous chunk's last key (exclusive)
    to this chunk's last key; the table's last chunk runs to the end of the key space.
    Keys covered, not in the chunk and whose last event is older than ``since`` are gone."""
    plan, progress = chunk.plan, chunk.progress
    since = done.since or done.hw  # the LW, or an event the SELECT could not see
    body: dict[str, Any]
    if plan.keys is not None:
        body = {"keys": [list(k) for k in plan.keys]}
    else:
        low = plan.start.last_key
        last = progress.done
        if last and plan.start.bound_at is not None:
            # Above the upper bound: no key older than the bound's position exists there.
            since = min(since, Position.parse(plan.start.bound_at))
        if not orders_like_python_keys(chunk.schema):
            # Keys whose order downstream may differ from the database's (text, decimal,
            # uuid, dates): no key ranges, but the table's last chunk covers the whole
            # table since the bound's position. Every key older than that position that
            # the source still holds was selected by one of the dump's chunks (all at HW
            # positions after it) or changed in the log after it: what is older and
            # unchanged is gone (a gap after a lost position, rows deleted uncaptured).
            low = None
        high = None if last else progress.last_key
        body = {"from": list(low) if low is not None else None, "to": list(high) if high is not None else None}
    body["since"] = since.encode()
    return ChangeEvent(
        source_id,
        plan.table,
        Op.RANGE,
        (),
        None,
        body,
        done.hw.with_sub(0),
        None,
        None,
        Origin.DUMP,
        plan.dump_id,
        chunk.schema.schema_id(),
    )
