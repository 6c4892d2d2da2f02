"""What PostgreSQL's catalog says about captured tables: columns, key, replica identity.

Plain functions over a psycopg2 cursor, used by sources/postgres.py. A table's key is its
primary key, or the user's ``key_columns`` for a table without one; either way the table's
replica identity must carry those columns, or deletes would reach the log without a key.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional, Sequence

from ..core.errors import ConfigurationError, RequestError
from ..core.events import Column, TableSchema


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A table's schema plus what decoding needs: the base type name of every column."""

    schema: TableSchema
    oid: int
    base_types: dict[str, str]  # column -> base type name (a domain's underlying type)
    replica_identity: str  # relreplident: d / n / f / i
    identity_columns: Optional[tuple[str, ...]]  # None: every column (FULL)


def split_table(table: str) -> tuple[str, str]:
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise RequestError(
            f"table name {table!r} is not schema-qualified.",
            'name tables as "schema.table", e.g. "public.orders".',
        )
    return schema, name


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_table(table: str) -> str:
    schema, name = split_table(table)
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def list_tables(cur, exclude_schemas: Sequence[str]) -> list[str]:
    """Every ordinary table outside the system schemas and ``exclude_schemas``."""
    cur.execute(
        """
        SELECT n.nspname || '.' || c.relname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'r' AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
          AND n.nspname <> ALL(%s)
        ORDER BY 1
        """,
        (list(exclude_schemas),),
    )
    return [r[0] for r in cur.fetchall()]


def table_oid(cur, table: str) -> Optional[int]:
    schema, name = split_table(table)
    cur.execute(
        """
        SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
        """,
        (schema, name),
    )
    row = cur.fetchone()
    return row[0] if row else None


def type_names(cur, oids: Iterable[int]) -> dict[int, str]:
    """OID -> name of the type, following domains down to their base type."""
    oids = sorted(set(oids))
    if not oids:
        return {}
    cur.execute(
        """
        WITH RECURSIVE base(oid, cur) AS (
            SELECT t.oid, t.oid FROM pg_type t WHERE t.oid = ANY(%s::oid[])
            UNION ALL
            SELECT b.oid, t.typbasetype FROM base b JOIN pg_type t ON t.oid = b.cur
            WHERE t.typtype = 'd'
        )
        SELECT b.oid, format_type(b.cur, NULL) FROM base b JOIN pg_type t ON t.oid = b.cur
        WHERE t.typtype <> 'd'
        """,
        (oids,),
    )
    return {oid: name for oid, name in cur.fetchall()}


def type_label(format_type: str) -> str:
    # Lower case as Column.type asks, except quoted (case-sensitive) user type names.
    return format_type if '"' in format_type else format_type.lower()


def format_types(cur, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """(type OID, modifier) -> the type as a column of the catalog would show it."""
    pairs = sorted(set(pairs))
    if not pairs:
        return {}
    cur.execute(
        "SELECT o, m, format_type(o, m) FROM unnest(%s::oid[], %s::int[]) AS p(o, m)",
        ([p[0] for p in pairs], [p[1] for p in pairs]),
    )
    return {(o, m): type_label(t) for o, m, t in cur.fetchall()}


def read_table(cur, table: str, key_columns: Optional[Sequence[str]] = None) -> TableInfo:
    """The table's schema from the catalog; RequestError if it does not exist,
    ConfigurationError if it has no usable key."""
    oid = table_oid(cur, table)
    if oid is None:
        raise RequestError(
            f"table {table} does not exist (or this role cannot see it).",
            "check the schema-qualified name (names are case-sensitive) and the role's USAGE privilege on the schema.",
        )
    cur.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, a.atttypid
        FROM pg_attribute a
        WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (oid,),
    )
    rows = cur.fetchall()
    bases = type_names(cur, [r[3] for r in rows])
    columns = tuple(Column(r[0], type_label(r[1]), bool(r[2])) for r in rows)
    base_types = {r[0]: bases.get(r[3], r[1]) for r in rows}

    cur.execute(
        """
        SELECT a.attname FROM pg_index i
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        WHERE i.indrelid = %s AND i.indisprimary
        ORDER BY k.ord
        """,
        (oid,),
    )
    pk = tuple(r[0] for r in cur.fetchall())
    names = [c.name for c in columns]
    if pk:
        key = pk
    elif key_columns:
        missing = [c for c in key_columns if c not in names]
        if missing:
            raise ConfigurationError(
                f"key_columns for table {table} name column(s) {missing} that the table does "
                f"not have (its columns: {names}).",
                f"pass existing, unique, NOT NULL columns in key_columns[{table!r}].",
            )
        key = tuple(key_columns)
    else:
        raise ConfigurationError(
            f"table {table} has no primary key, so DBLog cannot chunk it or identify its rows.",
            f"add one (ALTER TABLE {quote_table(table)} ADD PRIMARY KEY (...)), or pass unique "
            f"NOT NULL columns as key_columns={{{table!r}: ['col', ...]}} and give the table a "
            f"replica identity that includes them (e.g. ALTER TABLE {quote_table(table)} "
            "REPLICA IDENTITY FULL).",
        )

    cur.execute("SELECT relreplident FROM pg_class WHERE oid = %s", (oid,))
    ident = cur.fetchone()[0]
    if isinstance(ident, bytes):
        ident = ident.decode()
    identity: Optional[tuple[str, ...]]
    if ident == "f":
        identity = None
    elif ident == "d":
        identity = pk
    elif ident == "i":
        cur.execute(
            """
            SELECT a.attname FROM pg_index i
            CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
            WHERE i.indrelid = %s AND i.indisreplident
            ORDER BY k.ord
            """,
            (oid,),
        )
        identity = tuple(r[0] for r in cur.fetchall())
    else:
        identity = ()
    schema = TableSchema(table, columns, key)
    return TableInfo(schema, oid, base_types, ident, identity)


def check_replica_identity(info: TableInfo) -> None:
    """Deletes (and key-changing updates) carry only the replica identity's columns: they
    must include the key, or the log could not say which row went away."""
    if info.identity_columns is None:
        return
    missing = [c for c in info.schema.key if c not in info.identity_columns]
    if missing:
        table = info.schema.table
        raise ConfigurationError(
            f"the replica identity of table {table} ({_identity_label(info)}) does not include "
            f"its key column(s) {missing}, so deletes in the log would not say which row was "
            "deleted.",
            f"run ALTER TABLE {quote_table(table)} REPLICA IDENTITY FULL (or REPLICA IDENTITY "
            f"USING INDEX on a unique index over {list(info.schema.key)}).",
        )


def _identity_label(info: TableInfo) -> str:
    return {"d": "DEFAULT, and no primary key", "n": "NOTHING", "i": "USING INDEX"}.get(
        info.replica_identity, info.replica_identity
    )
