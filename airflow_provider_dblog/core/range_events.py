"""Range repair (docs/design.md "Range repair"): what a dump chunk states it covers.

A chunk that covers a range emits, at its HW sub 0 (and 1) and before its rows, op ``k`` events
naming the keys it covers and ``since``: replay and the landing remove every covered key
whose last event is older than ``since`` (a row deleted while nothing was captured goes; a
key changed inside the window is the log's, Algorithm 1). Pure functions of the chunk.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from .dumps import TableProgress
from .events import ChangeEvent, Key, Op, Origin, Position, TableSchema
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
    table's last chunk only, covering the whole table (``range_events``)."""
    plan = chunk.plan
    if plan.keys is not None:
        return bool(plan.keys)
    if not plan.start.bounded or plan.where is not None:
        return False  # a filtered chunk: keys outside the filter are not absent
    if orders_like_python_keys(chunk.schema):
        return True
    return chunk.progress.done and plan.start.bound_at is not None  # `since`: the bound's position


def range_events(source_id: str, done: ChunkDone, chunk: OpenChunk) -> list[ChangeEvent]:
    """What the chunk covers, at HW subs 0, 1 (its rows follow): the listed keys of a
    key-list chunk, or the key range from the previous chunk's last key (exclusive) to this
    chunk's last key. Keys covered, not in the chunk and whose last event is older than
    ``since`` are gone.

    A table's last chunk also covers the key space above the dump's upper bound, with an
    earlier ``since``: the log position read when the bound was fixed (no key older than
    that exists above the bound, else the bound would be greater). Its SELECT read every key
    up to the bound, so that range keeps the chunk's own ``since``: two events, as one range
    with the bound's ``since`` would spare rows deleted uncaptured whose last event came
    between the two positions (the capture's lag behind the source when the bound was read).
    """
    plan, progress = chunk.plan, chunk.progress
    since = done.since or done.hw  # the LW, or an event the SELECT could not see
    if plan.keys is not None:
        return [_range(source_id, done, chunk, {"keys": [list(k) for k in plan.keys]}, since, 0)]
    low = plan.start.last_key
    last = progress.done
    bound_at = Position.parse(plan.start.bound_at) if last and plan.start.bound_at is not None else None
    if not orders_like_python_keys(chunk.schema):
        # Keys whose order downstream may differ from the database's (text, decimal, uuid,
        # dates): no key ranges, but the table's last chunk covers the whole table since the
        # bound's position. Every key older than that position that the source still holds
        # was selected by one of the dump's chunks (all at HW positions after it) or changed
        # in the log after it: what is older and unchanged is gone (a gap after a lost
        # position, rows deleted uncaptured).
        whole = min(since, bound_at) if bound_at is not None else since
        return [_range(source_id, done, chunk, {"from": None, "to": None}, whole, 0)]
    if not last:
        return [_range(source_id, done, chunk, _span(low, progress.last_key), since, 0)]
    upper = plan.start.upper_key
    if bound_at is None:  # progress stored before bounds were dated: one range, to the end
        return [_range(source_id, done, chunk, _span(low, None), since, 0)]
    above = min(since, bound_at)
    if upper is None or (low is not None and low >= upper):  # nothing up to the bound to read
        return [_range(source_id, done, chunk, _span(low, None), above, 0)]
    return [
        _range(source_id, done, chunk, _span(low, upper), since, 0),
        _range(source_id, done, chunk, _span(upper, None), above, 1),
    ]


def _span(low: Optional[Key], high: Optional[Key]) -> dict[str, Any]:
    return {"from": list(low) if low is not None else None, "to": list(high) if high is not None else None}


def _range(
    source_id: str, done: ChunkDone, chunk: OpenChunk, body: dict[str, Any], since: Position, sub: int
) -> ChangeEvent:
    plan = chunk.plan
    return ChangeEvent(
        source_id,
        plan.table,
        Op.RANGE,
        (),
        None,
        {**body, "since": since.encode()},
        done.hw.with_sub(sub),
        None,
        None,
        Origin.DUMP,
        plan.dump_id,
        chunk.schema.schema_id(),
    )
