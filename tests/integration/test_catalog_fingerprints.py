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


def test_mysql_reads_every_tables_schema_at_once_as_it_reads_each_alone():
    """``MySQLSource.open`` reads all its tables' schemas in three queries
    (``catalog.read_table_schemas``): the same schemas as one table at a time, on every type of
    the wide table (MariaDB's JSON columns included), a composite key and a key named in
    ``key_columns`` for a table without a primary key."""
    from airflow_provider_dblog.sources.mysql import catalog

    db = ADAPTERS["mysql"]()
    db.wide = True
    db.create()
    try:
        _exec(db, f"CREATE TABLE {db.ns}.nokey (a int NOT NULL, b varchar(10) NOT NULL, UNIQUE (a, b))")
        tables = [*db.tables(), f"{db.ns}.nokey"]
        keys = {f"{db.ns}.nokey": ["a", "b"]}
        source = make_source({**db.source_config(f"rs_{uuid.uuid4().hex[:6]}"), "tables": tables, "key_columns": keys})
        source.open()
        try:
            session, mariadb = source._require_session(), source._mariadb
            together = catalog.read_table_schemas(session, tables, keys, mariadb)
            alone = {t: catalog.read_table_schema(session, t, keys.get(t), mariadb) for t in tables}
            assert together == alone
            gone = f"{db.ns}.gone"
            _exec(db, f"CREATE TABLE {gone} (a int)")  # no key, then dropped: the error, for it alone
            read = catalog.read_table_schemas(session, [gone, *tables], keys, mariadb)
            assert isinstance(read[gone], ConfigurationError) and read[tables[0]] == alone[tables[0]]
            _exec(db, f"DROP TABLE {gone}")
            assert isinstance(catalog.read_table_schemas(session, [gone], {}, mariadb)[gone], RequestError)
        finally:
            source.close()
        assert any(c.type == "json" for c in together[f"{db.ns}.wide"].columns) == mariadb
        assert together[f"{db.ns}.orders"].key == ("region", "order_no")
    finally:
        db.drop("")
