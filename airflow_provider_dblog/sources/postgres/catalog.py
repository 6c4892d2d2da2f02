"""What PostgreSQL's catalog says about captured tables: columns, key, replica identity,
partitions.

Plain functions over a psycopg2 cursor, used by sources/postgres/source.py. A table's key is its
primary key, or the user's ``key_columns`` for a table without one; either way the table's
replica identity must carry those columns, or deletes would reach the log without a key.
A partitioned table is captured as one table under its own name; its rows live in its leaf
partitions, whose replica identities are the ones that reach the log.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from ...core import names
from ...core.errors import ConfigurationError, DBLogError, RequestError
from ...core.events import Column, TableSchema


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A table's schema plus what decoding needs: the base type name of every column."""

    schema: TableSchema
    oid: int
    base_types: dict[str, str]  # column -> base type name (a domain's underlying type)
    replica_identity: str  # relreplident: d / n / f / i
    identity_columns: Optional[tuple[str, ...]]  # None: every column (FULL)
    partitioned: bool = False  # relkind 'p': rows live in its partitions


def split_table(table: str) -> tuple[str, str]:
    """(schema, table) of a name in DBLog's spelling (core/names.py)."""
    return names.split_table(table)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_table(table: str) -> str:
    schema, name = split_table(table)
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def list_tables(cur, exclude_schemas: Sequence[str]) -> list[str]:
    """Every ordinary and partitioned table outside the system schemas and
    ``exclude_schemas``; partitions are captured as part of their root, not on their own."""
    cur.execute(
        """
        SELECT n.nspname, c.relname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
          AND n.nspname <> ALL(%s)
        ORDER BY 1, 2
        """,
        (list(exclude_schemas),),
    )
    return [names.table_name(schema, name) for schema, name in cur.fetchall()]


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


def index_columns(cur: Any, oid: int, flag: str) -> tuple[str, ...]:
    """The columns, in index order, of the table's index with ``flag`` set in pg_index
    (``indisprimary``: its primary key; ``indisreplident``: its replica identity index)."""
    assert flag in ("indisprimary", "indisreplident")
    cur.execute(
        f"""
        SELECT a.attname FROM pg_index i
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        WHERE i.indrelid = %s AND i.{flag}
        ORDER BY k.ord
        """,
        (oid,),
    )
    return tuple(r[0] for r in cur.fetchall())


def fingerprints(cur, tables: Sequence[str]) -> dict[str, str]:
    """One query for every table: an md5 of what ``read_table`` reads of it (its columns'
    names, types as ``format_type`` prints them and nullability, its replica identity and
    its indexes); tables that do not exist are left out."""
    cur.execute(
        "SELECT t.name, md5(concat_ws('|', c.relreplident, "
        "(SELECT string_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod) || ':' || a.attnotnull, "
        "',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 "
        "AND NOT a.attisdropped), "
        "(SELECT string_agg(i.indexrelid || ':' || i.indisprimary || ':' || i.indisreplident || ':' "
        "|| i.indisunique || ':' || i.indisvalid || ':' || i.indkey::text, ',' ORDER BY i.indexrelid) "
        "FROM pg_index i WHERE i.indrelid = c.oid))) "
        "FROM unnest(%s::text[], %s::text[]) AS t(name, quoted) JOIN pg_class c ON c.oid = to_regclass(t.quoted)",
        (list(tables), [quote_table(t) for t in tables]),
    )
    return {name: digest for name, digest in cur.fetchall()}


ATTRIBUTES_SQL = """
    SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, a.atttypid
    FROM pg_attribute a
    WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
    ORDER BY a.attrelid, a.attnum
"""


def _char(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def read_table(cur, table: str, key_columns: Optional[Sequence[str]] = None) -> TableInfo:
    """The table's schema from the catalog; RequestError if it does not exist,
    ConfigurationError if it has no usable key."""
    oid = table_oid(cur, table)
    if oid is None:
        raise _no_table(table)
    cur.execute(ATTRIBUTES_SQL, ([oid],))
    rows = [r[1:] for r in cur.fetchall()]
    bases = type_names(cur, [r[3] for r in rows])
    pk = index_columns(cur, oid, "indisprimary")
    cur.execute("SELECT relreplident, relkind FROM pg_class WHERE oid = %s", (oid,))
    ident, relkind = (_char(v) for v in cur.fetchone())
    return _table_info(
        table, oid, rows, bases, pk, ident, relkind, lambda: index_columns(cur, oid, "indisreplident"), key_columns
    )


def read_tables(
    cur, tables: Sequence[str], key_columns: Mapping[str, Sequence[str]]
) -> dict[str, TableInfo | DBLogError]:
    """``read_table`` of many tables in four queries, not five per table (a source of a
    thousand tables opens, and the schema check's full pass runs, in a few round trips); for
    a table it would fail on, the error."""
    names_ = list(tables)
    parts = [split_table(t) for t in names_]
    cur.execute(
        """
        SELECT t.name, c.oid, c.relreplident, c.relkind
        FROM unnest(%s::text[], %s::text[], %s::text[]) AS t(name, nsp, rel)
        JOIN pg_namespace n ON n.nspname = t.nsp
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel AND c.relkind IN ('r', 'p')
        """,
        (names_, [p[0] for p in parts], [p[1] for p in parts]),
    )
    found = {name: (oid, _char(ident), _char(kind)) for name, oid, ident, kind in cur.fetchall()}
    oids = [f[0] for f in found.values()]
    cur.execute(ATTRIBUTES_SQL, (oids,))
    columns: dict[int, list[tuple]] = {oid: [] for oid in oids}
    for row in cur.fetchall():
        columns[row[0]].append(row[1:])
    cur.execute(
        """
        SELECT i.indrelid, i.indisprimary, i.indisreplident, a.attname FROM pg_index i
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        WHERE i.indrelid = ANY(%s::oid[]) AND (i.indisprimary OR i.indisreplident)
        ORDER BY i.indrelid, i.indexrelid, k.ord
        """,
        (oids,),
    )
    primary: dict[int, list[str]] = {}
    replident: dict[int, list[str]] = {}
    for oid, is_primary, is_replident, column in cur.fetchall():
        if is_primary:
            primary.setdefault(oid, []).append(column)
        if is_replident:
            replident.setdefault(oid, []).append(column)
    bases = type_names(cur, [r[3] for rows in columns.values() for r in rows])
    out: dict[str, TableInfo | DBLogError] = {}
    for table in names_:
        try:
            if table not in found:
                raise _no_table(table)
            oid, ident, relkind = found[table]
            out[table] = _table_info(
                table,
                oid,
                columns[oid],
                bases,
                tuple(primary.get(oid, ())),
                ident,
                relkind,
                functools.partial(tuple, replident.get(oid, ())),
                key_columns.get(table),
            )
        except DBLogError as exc:
            out[table] = exc
    return out


def _no_table(table: str) -> RequestError:
    return RequestError(
        f"table {table} does not exist (or this role cannot see it).",
        "check the schema-qualified name (names are case-sensitive) and the role's USAGE privilege on the schema.",
    )


def _table_info(
    table: str,
    oid: int,
    rows: Sequence[tuple],
    bases: dict[int, str],
    pk: tuple[str, ...],
    ident: str,
    relkind: str,
    replident_columns: Callable[[], tuple[str, ...]],
    key_columns: Optional[Sequence[str]],
) -> TableInfo:
    """The TableInfo from the catalog's rows of one table: (name, format_type, nullable,
    type OID) per column in order, its primary key, relreplident and relkind; the replica
    identity index's columns are asked for only when the identity is an index."""
    columns = tuple(Column(r[0], type_label(r[1]), bool(r[2])) for r in rows)
    base_types = {r[0]: bases.get(r[3], r[1]) for r in rows}
    names_ = [c.name for c in columns]
    if pk:
        key = pk
    elif key_columns:
        missing = [c for c in key_columns if c not in names_]
        if missing:
            raise ConfigurationError(
                f"key_columns for table {table} name column(s) {missing} that the table does "
                f"not have (its columns: {names_}).",
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
    identity: Optional[tuple[str, ...]]
    if ident == "f":
        identity = None
    elif ident == "d":
        identity = pk
    elif ident == "i":
        identity = replident_columns()
    else:
        identity = ()
    schema = TableSchema(table, columns, key)
    return TableInfo(schema, oid, base_types, ident, identity, relkind == "p")


def check_replica_identity(info: TableInfo) -> None:
    """Deletes (and key-changing updates) carry only the replica identity's columns: they
    must include the key, or the log could not say which row went away. A partitioned
    table's own identity never reaches the log (its partitions' do: ``check_partitions``)."""
    if info.identity_columns is None or info.partitioned:
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


# -- partitioned tables ------------------------------------------------------------------------
def server_version(cur) -> int:
    cur.execute("SHOW server_version_num")
    return int(cur.fetchone()[0])


def leaf_partitions(cur, roots: dict[str, int]) -> dict[str, dict[int, tuple[str, str]]]:
    """Per partitioned table (name -> OID), its leaf partitions at any depth: OID -> (name,
    relkind). A table that no longer exists is left out (the capture's schema check deals
    with it). PostgreSQL 12+ (pg_partition_tree); the source refuses partitioned tables
    before 13."""
    if not roots:
        return {}
    root_names, oids = list(roots), [roots[t] for t in roots]
    cur.execute(
        """
        SELECT r.name, c.oid, n.nspname, c.relname, c.relkind
        FROM unnest(%s::text[], %s::oid[]) AS r(name, oid)
        JOIN pg_class rc ON rc.oid = r.oid AND rc.relkind = 'p'
        CROSS JOIN LATERAL pg_partition_tree(r.oid::regclass) AS p
        JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE p.isleaf
        """,
        (root_names, oids),
    )
    out: dict[str, dict[int, tuple[str, str]]] = {}
    for root, oid, schema, name, relkind in cur.fetchall():
        out.setdefault(root, {})[oid] = (
            names.table_name(schema, name),
            relkind.decode() if isinstance(relkind, bytes) else relkind,
        )
    cur.execute("SELECT oid FROM pg_class WHERE oid = ANY(%s::oid[]) AND relkind = 'p'", (oids,))
    exist = {r[0] for r in cur.fetchall()}
    for root, oid in roots.items():
        if oid in exist:
            out.setdefault(root, {})  # partitioned but without partitions right now
    return out


def captured_ancestor(cur, table: str, captured: Iterable[str]) -> Optional[str]:
    """The captured table that ``table`` is a partition of (at any depth), or None: a
    partition's changes are captured under that ancestor's name. None too when ``table``
    does not exist (any more)."""
    return captured_ancestors(cur, [table], captured).get(table)


def captured_ancestors(cur, tables: Sequence[str], captured: Iterable[str]) -> dict[str, str]:
    """``captured_ancestor`` of each of ``tables`` that has one, in one query whatever their
    number (pg_inherits walked up from every partition at once; not pg_partition_ancestors:
    PostgreSQL 10+)."""
    if not tables:
        return {}
    parts = [split_table(t) for t in tables]
    cur.execute(
        """
        WITH RECURSIVE up(name, relid) AS (
            SELECT t.name, i.inhparent
            FROM unnest(%s::text[], %s::text[], %s::text[]) AS t(name, nsp, rel)
            JOIN pg_namespace n ON n.nspname = t.nsp
            JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel AND c.relispartition
            JOIN pg_inherits i ON i.inhrelid = c.oid
            UNION
            SELECT up.name, i.inhparent FROM up JOIN pg_class c ON c.oid = up.relid AND c.relispartition
            JOIN pg_inherits i ON i.inhrelid = c.oid
        )
        SELECT up.name, n.nspname, c.relname FROM up
        JOIN pg_class c ON c.oid = up.relid JOIN pg_namespace n ON n.oid = c.relnamespace
        """,
        (list(tables), [schema for schema, _ in parts], [name for _, name in parts]),
    )
    wanted = set(captured)
    out: dict[str, str] = {}
    for table, schema, name in cur.fetchall():
        ancestor = names.table_name(schema, name)
        if ancestor in wanted:
            out.setdefault(table, ancestor)
    return out


def table_name_of(cur, oid: int) -> Optional[str]:
    """The current "schema.table" name of a relation, or None once it was dropped."""
    cur.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
        (oid,),
    )
    row = cur.fetchone()
    return names.table_name(*row) if row else None


def check_partitions(cur, root: TableInfo, leaves: dict[int, tuple[str, str]]) -> None:
    """Each leaf partition's changes must reach the log with the root's key: a foreign table
    partition has no log, and a leaf's replica identity (its own, not the root's) must
    carry the key columns."""
    table = root.schema.table
    for name, relkind in leaves.values():
        if relkind != "r":
            raise ConfigurationError(
                f"partition {name} of table {table} is a foreign table, so changes of its rows never "
                "reach this database's log while chunk SELECTs of the parent would read them.",
                f"detach it (ALTER TABLE {quote_table(table)} DETACH PARTITION {quote_table(name)}) "
                "or leave the table out of the capture.",
            )
        leaf = read_table(cur, name, root.schema.key)
        if leaf.schema.key != root.schema.key:  # the root's key names the rows, not the leaf's
            leaf = dataclasses.replace(leaf, schema=TableSchema(name, leaf.schema.columns, root.schema.key))
        check_replica_identity(leaf)
