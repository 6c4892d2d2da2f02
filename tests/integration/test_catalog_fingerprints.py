"""Catalog fingerprints (core/protocols.py ``CatalogFingerprints``) on the real servers: the
schema check reads only the tables whose fingerprint moved, so every schema change the
capture must notice has to move it. Each of the adapters' schema changes (added, renamed,
retyped and dropped columns, a widened type) moves the altered table's fingerprint and no
other's; a change of the primary key and of nullability too; a missing table is left out."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_dblog.config import make_source

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
