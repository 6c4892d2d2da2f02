"""Catalog fingerprints (core/protocols.py ``CatalogFingerprints``) on the real servers: the
schema check reads only the tables whose fingerprint moved, so every schema change the
capture must notice has to move it. Each of the adapters' schema changes (added, renamed,
retyped and dropped columns, a widened type) moves the altered table's fingerprint and no
other's; a change of the primary key and of nullability too; a missing table is left out."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.errors import ConfigurationError, RequestError

from .databases import ADAPTERS

pytestmark = pytest.mark.integration


@pytest.fixture(params=sorted(ADAPTERS))
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"fp_{request.param}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


def _exec(db, sql: str) -> None:
    c = db.connect()
    try:
        c.cursor().execute(sql)
        c.commit()
    finally:
        c.close()


def test_every_schema_change_moves_its_tables_fingerprint_and_no_other(db):
    source = make_source(db.source_config(db.source_id))
    source.open()
    try:
        tables = db.tables()
        missing = f"{db.ns}.no_such_table"
        before = source.catalog_fingerprints([*tables, missing])
        assert set(before) == set(tables)  # the missing table left out, every other there
        accounts = f"{db.ns}.accounts"
        changes = [
            *db.schema_changes(),
            f"ALTER TABLE {accounts} {'ALTER COLUMN note SET NOT NULL' if db.kind == 'postgres' else 'MODIFY note varchar(300) NOT NULL'}",
            f"ALTER TABLE {accounts} DROP CONSTRAINT accounts_pkey, ADD PRIMARY KEY (id, name)"
            if db.kind == "postgres"
            else f"ALTER TABLE {accounts} DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)",
        ]
        for sql in changes:
            if "NOT NULL" in sql:
                _exec(db, f"UPDATE {accounts} SET note = '' WHERE note IS NULL")
            _exec(db, sql)
            after = source.catalog_fingerprints(tables)
            moved = {t for t in tables if after[t] != before[t]}
            altered = next(t for t in tables if f" {t} " in f"{sql} ")
            assert moved == {altered}, sql
            before = after
    finally:
        source.close()


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_every_tables_schema_read_at_once_equals_each_read_alone(kind):
    """Both sources' ``open()`` and the schema check's full passes read all their tables'
    catalogs at once (``CatalogSchemas``; ``catalog.read_tables`` / ``read_table_schemas``):
    the same as one table at a time on every type of the wide table (MariaDB's JSON columns
    included), a composite key, a key named in ``key_columns`` for a table without a primary
    key and a replica identity index; a table without a key or gone is an error for it alone."""
    db = ADAPTERS[kind]()
    db.wide = True
    db.partitioned = kind == "postgres"  # a partitioned table too (relkind p)
    sid = f"rs_{uuid.uuid4().hex[:6]}"
    db.create()
    try:
        _exec(db, f"CREATE TABLE {db.ns}.nokey (a int NOT NULL, b varchar(10) NOT NULL, UNIQUE (a, b))")
        if kind == "postgres":
            _exec(db, f"CREATE UNIQUE INDEX nokey_ab ON {db.ns}.nokey (b, a)")
            _exec(db, f"ALTER TABLE {db.ns}.nokey REPLICA IDENTITY USING INDEX nokey_ab")
        tables = [*db.tables(), f"{db.ns}.nokey"]
        keys = {f"{db.ns}.nokey": ["a", "b"]}
        source = make_source({**db.source_config(sid), "tables": tables, "key_columns": keys})
        source.open()
        try:
            together = source.catalog_schemas(tables)
            alone = {t: source.catalog_schema(t) for t in tables}
            assert together == alone
            if kind == "postgres":
                from airflow_provider_dblog.sources.postgres import catalog as pg

                with source._cur() as cur:
                    infos = pg.read_tables(cur, tables, keys)
                    assert infos == {t: pg.read_table(cur, t, keys.get(t)) for t in tables}
                assert infos[f"{db.ns}.nokey"].identity_columns == ("b", "a")
            gone = f"{db.ns}.gone"
            _exec(db, f"CREATE TABLE {gone} (a int)")  # no key, then dropped: the error, for it alone
            read = source.catalog_schemas([gone, *tables])
            assert isinstance(read[gone], ConfigurationError) and read[tables[0]] == alone[tables[0]]
            _exec(db, f"DROP TABLE {gone}")
            assert isinstance(source.catalog_schemas([gone])[gone], RequestError)
        finally:
            source.close()
        wide = together[f"{db.ns}.wide"]
        assert kind == "postgres" or any(c.type == "json" for c in wide.columns) == source._mariadb
        assert together[f"{db.ns}.orders"].key == ("region", "order_no")
    finally:
        db.drop(sid)
