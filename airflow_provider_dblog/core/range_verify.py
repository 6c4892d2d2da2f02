"""``dblog verify --ranges``: find drift by key ranges, reading only the ranges that differ.

The replay of the changelog is local; the source table is not. Both sides digest a key range
(from exclusive, to inclusive) as its row count and the sum of its rows' hashes: the source in
SQL where the rows are (``Source.range_digest``), the replay in Python (``Source.row_hasher``,
the same row text from canonical values). Ranges are cut at the replay's keys: first every
``span`` keys, then a range that differs is halved at its middle replay key, down to ranges of
at most ``leaf`` replay keys, whose source rows are read and compared value by value
(core/verify.compare). So an unchanged table costs one digest query per ``span`` rows and no
row transfer, and a drift of a few rows reads a few small ranges.

Needs keys that sort alike in the database and in Python (integer columns,
key_types.orders_like_python): the replay's keys then cut ranges the database reads the same
way. Other tables, and sources without digests, are compared whole (verify.check_table).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from .events import Key, Row, TableSchema
from .key_types import orders_like_python
from .protocols import RangeDigests
from .verify import Mismatch, TableCheck, check_table, compare, replay, source_form

Bound = Optional[Key]  # None: no bound on that side


@dataclasses.dataclass
class RangeStats:
    digests: int = 0  # digest queries on the source
    rows_read: int = 0  # source rows read to compare leaf ranges value by value
    ranges_read: int = 0


def describe(stats: Optional[RangeStats]) -> str:
    """How a table was compared, for a report line: by ranges (with ``stats``) or whole (None)."""
    if stats is None:
        return " (compared whole: no range digests for this source or key)"
    return f" (by ranges: {stats.digests} range digests, {stats.rows_read} source rows read)"


def supports_ranges(source: Any, schema: TableSchema) -> bool:
    """Whether ``source`` digests key ranges (protocols.RangeDigests) and this table's key
    sorts alike in the database and in Python."""
    by_name = {c.name: c for c in schema.columns}
    keys = [by_name[k] for k in schema.key if k in by_name]
    return isinstance(source, RangeDigests) and len(keys) == len(schema.key) and orders_like_python(keys)


def _inside(key: Key, low: Bound, high: Bound) -> bool:
    return (low is None or key > low) and (high is None or key <= high)


def find_drift(
    digest: Callable[[Bound, Bound], tuple[int, int]],
    read: Callable[[Bound, Bound], dict[Key, Row]],
    hashes: dict[Key, int],
    rows_of: Callable[[list[Key]], dict[Key, Row]],
    span: int = 10_000,
    leaf: int = 64,
) -> tuple[list[Mismatch], RangeStats]:
    """The mismatches between the source (``digest`` and ``read`` of a key range) and the
    other side (the replay or a mirror: ``hashes`` of its rows by key, ``rows_of`` a list of
    its keys), found by bisection; and what it cost. The other side's rows are asked for
    once, for the keys of every range left to compare row by row."""
    keys = sorted(hashes)
    stats = RangeStats()
    # ranges as (low, high, the other side's keys inside): every key lies in exactly one
    cuts = keys[span - 1 : -1 : span] if keys else []
    bounds: list[Bound] = [None, *cuts, None]
    todo: list[tuple[Bound, Bound, list[Key]]] = []
    start = 0
    for low, high in zip(bounds, bounds[1:]):
        end = len(keys) if high is None else keys.index(high, start) + 1
        todo.append((low, high, keys[start:end]))
        start = end
    leaves: list[tuple[Bound, Bound, list[Key]]] = []
    while todo:
        low, high, inside = todo.pop()
        stats.digests += 1
        if digest(low, high) == (len(inside), sum(hashes[k] for k in inside)):
            continue
        if len(inside) > leaf:
            mid = len(inside) // 2
            todo += [(low, inside[mid - 1], inside[:mid]), (inside[mid - 1], high, inside[mid:])]
            continue
        leaves.append((low, high, inside))
    other = rows_of([k for _, _, inside in leaves for k in inside]) if leaves else {}
    found: list[Mismatch] = []
    for low, high, inside in leaves:
        rows = read(low, high)
        stats.rows_read += len(rows)
        stats.ranges_read += 1
        found += compare(rows, {k: other[k] for k in inside})
    found.sort(key=lambda m: repr(m.key))
    return found, stats


def read_range(source: Any, schema: TableSchema, low: Bound, high: Bound) -> dict[Key, Row]:
    """The source's rows of the key range (low, high], by key (chunk SELECTs of 10,000)."""
    rows: dict[Key, Row] = {}
    after = low
    while True:
        got = source.select_chunk(schema, after, 10_000, high).rows
        for r in got:
            rows[schema.key_of(r)] = r
        if len(got) < 10_000:
            return rows
        after = schema.key_of(got[-1])


def check_table_by_ranges(
    source: Any, output: Any, table: str, span: int = 10_000, leaf: int = 64
) -> tuple[TableCheck, Optional[RangeStats]]:
    """``verify.check_table`` by ranges where the source and the key allow it (stats None:
    compared whole)."""
    schema = source.table_schema(table)
    # Digests are of canonical values: an output with rows of its own form is compared whole.
    if not supports_ranges(source, schema) or source_form(output, schema) is not None:
        return check_table(source, output, table), None
    mirror = replay(output.scan(source.source_id, table))
    row_hash = source.row_hasher(schema)
    found, stats = find_drift(
        lambda low, high: source.range_digest(schema, low, high),
        lambda low, high: read_range(source, schema, low, high),
        {k: row_hash(row) for k, row in mirror.items()},
        lambda keys: {k: mirror[k] for k in keys},
        span,
        leaf,
    )
    source_rows = len(mirror) + sum(m.kind == "missing" for m in found) - sum(m.kind == "extra" for m in found)
    return TableCheck(table, source_rows, len(mirror), found), stats
