"""Keyset chunk queries for any primary key (DBLog paper, Algorithm 1 step "select chunk").

``WHERE key > last_key AND key <= upper_key ORDER BY key LIMIT n`` never scans rows it
skipped before, whatever the key type, and works for composite keys: PostgreSQL compares row
values natively and uses the index; MySQL/MariaDB are given the equivalent expanded
predicate, which their range optimiser turns into an index range (it does not always do so
for row constructors). ``upper_key`` is the table's greatest key when its dump started
(``max_key_query``): rows inserted later reach the changelog through the log, so a dump of a
growing table ends.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from . import names
from .events import Key, TableSchema


@dataclasses.dataclass(frozen=True)
class Dialect:
    name: str
    quote_char: str
    native_row_compare: bool
    # How a parameter placeholder for a key column is written, given the column's type
    # (PostgreSQL casts to the column type so text parameters compare as that type).
    placeholder: Callable[[str], str] = lambda col_type: "%s"

    def quote(self, ident: str) -> str:
        q = self.quote_char
        return q + ident.replace(q, q + q) + q

    def table(self, qualified: str) -> str:
        schema, name = names.split_table(qualified)
        return f"{self.quote(schema)}.{self.quote(name)}"


POSTGRES = Dialect("postgres", '"', True, lambda t: f"%s::{t}")
MYSQL = Dialect("mysql", "`", False)


def _key_types(schema: TableSchema) -> list[str]:
    types = {c.name: c.type for c in schema.columns}
    return [types[k] for k in schema.key]


def _compare(dialect: Dialect, schema: TableSchema, key: Key, op: str) -> tuple[str, list[Any]]:
    """Predicate ``key <op> value`` in key order (``op``: ``>`` or ``<=``), with its parameters."""
    cols = [dialect.quote(k) for k in schema.key]
    holders = [dialect.placeholder(t) for t in _key_types(schema)]
    if len(cols) != len(key):
        raise ValueError(f"key {key!r} does not match key columns {schema.key}")
    if len(cols) == 1:
        return f"{cols[0]} {op} {holders[0]}", [key[0]]
    if dialect.native_row_compare:
        return f"({', '.join(cols)}) {op} ({', '.join(holders)})", list(key)
    # (a, b, c) > (x, y, z)  ==  a > x OR (a = x AND (b > y OR (b = y AND c > z))), and
    # (a, b, c) <= (x, y, z) ==  a < x OR (a = x AND (b < y OR (b = y AND c <= z))),
    # written with a leading a >= x (a <= x) so the optimiser sees a range on the first column.
    strict, first = (">", ">=") if op == ">" else ("<", "<=")
    expr = f"{cols[-1]} {op} {holders[-1]}"
    params_tail = [key[-1]]
    for i in range(len(cols) - 2, -1, -1):
        expr = f"{cols[i]} {strict} {holders[i]} OR ({cols[i]} = {holders[i]} AND ({expr}))"
        params_tail = [key[i], key[i]] + params_tail
    return f"{cols[0]} {first} {holders[0]} AND ({expr})", [key[0]] + params_tail


def greater_than(dialect: Dialect, schema: TableSchema, after_key: Key) -> tuple[str, list[Any]]:
    """Predicate ``key > after_key`` in key order, with its parameters."""
    return _compare(dialect, schema, after_key, ">")


def at_most(dialect: Dialect, schema: TableSchema, upper_key: Key) -> tuple[str, list[Any]]:
    """Predicate ``key <= upper_key`` in key order (a dump's fixed upper bound), with its parameters."""
    return _compare(dialect, schema, upper_key, "<=")


def key_range(
    dialect: Dialect, schema: TableSchema, after_key: Optional[Key], upper_key: Optional[Key]
) -> tuple[list[str], list[Any]]:
    """The predicates of the key range (after_key, upper_key] (None: unbounded on that side),
    each a conjunction at its top level (AND-join them as they are), and their parameters."""
    preds: list[str] = []
    params: list[Any] = []
    for key, predicate in ((after_key, greater_than), (upper_key, at_most)):
        if key is not None:
            pred, more = predicate(dialect, schema, key)
            preds.append(pred)
            params += more
    return preds, params


def chunk_query(
    dialect: Dialect,
    schema: TableSchema,
    select_list: Sequence[str],
    after_key: Optional[Key],
    limit: int,
    upper_key: Optional[Key] = None,
    where: Optional[str] = None,
) -> tuple[str, list[Any]]:
    """The next chunk: rows with a key greater than ``after_key`` and at most ``upper_key``
    (the bound the table's dump fixed when it started), in key order; with ``where`` (a
    filtered dump's predicate, checked by core/predicates.py) only the rows it accepts."""
    if limit < 1:
        raise ValueError("chunk limit must be >= 1")
    order = ", ".join(dialect.quote(k) for k in schema.key)
    sql = f"SELECT {', '.join(select_list)} FROM {dialect.table(schema.table)}"
    preds, params = key_range(dialect, schema, after_key, upper_key)
    if where is not None:
        # Parenthesised, and with literal % doubled: the driver formats the query.
        preds.append(f"({where.replace('%', '%%')})")
    if preds:
        sql += " WHERE " + " AND ".join(preds)
    sql += f" ORDER BY {order} LIMIT {int(limit)}"
    return sql, params


def max_key_query(dialect: Dialect, schema: TableSchema, select_list: Sequence[str]) -> tuple[str, list[Any]]:
    """The row with the table's greatest key (one index lookup from the end): where a table
    dump fixes its upper bound when it starts."""
    order = ", ".join(f"{dialect.quote(k)} DESC" for k in schema.key)
    return f"SELECT {', '.join(select_list)} FROM {dialect.table(schema.table)} ORDER BY {order} LIMIT 1", []


def keys_query(
    dialect: Dialect, schema: TableSchema, select_list: Sequence[str], keys: Sequence[Key]
) -> tuple[str, list[Any]]:
    """The rows with exactly these keys (a key-list dump's chunk)."""
    if not keys:
        raise ValueError("keys_query needs at least one key")
    cols = [dialect.quote(k) for k in schema.key]
    holders = [dialect.placeholder(t) for t in _key_types(schema)]
    params: list[Any] = []
    if len(cols) == 1:
        pred = f"{cols[0]} IN ({', '.join(holders[0] for _ in keys)})"
        params = [k[0] for k in keys]
    else:
        one = "(" + " AND ".join(f"{c} = {h}" for c, h in zip(cols, holders)) + ")"
        pred = " OR ".join(one for _ in keys)
        for k in keys:
            params.extend(k)
    order = ", ".join(cols)
    sql = f"SELECT {', '.join(select_list)} FROM {dialect.table(schema.table)} WHERE {pred} ORDER BY {order}"
    return sql, params
