"""A table whose name holds a dot (PostgreSQL "dot.ted", MariaDB `dot.ted`) is captured,
dumped and requested under one unambiguous name, ns."dot.ted" (core/names.py): it was
written as ns.dot.ted, which a consumer could not tell from schema ns.dot, table ted."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core import dump_requests
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.names import split_table

from .databases import ADAPTERS
from .test_engine import Running, wait

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mysql"])
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"dot_{request.param}_{uuid.uuid4().hex[:6]}"
    q = '"' if request.param == "postgres" else "`"
    with d.connect() as c:
        c.cursor().execute(f"CREATE TABLE {d.ns}.{q}dot.ted{q} (id int PRIMARY KEY, v varchar(20))")
        c.cursor().execute(f"INSERT INTO {d.ns}.{q}dot.ted{q} VALUES (1, 'before')")
        c.commit()
    d.dotted = f'{d.ns}."dot.ted"'
    d.insert = f"INSERT INTO {d.ns}.{q}dot.ted{q} VALUES (2, 'logged')"
    yield d
    d.drop(d.source_id)


def test_a_dotted_table_is_captured_and_dumped_under_its_quoted_name(db, tmp_path):
    config = dict(db.source_config(db.source_id), tables=[*db.tables(), db.dotted])
    r = Running(db, tmp_path, db.source_id, source_config=config).start()
    try:
        with db.connect() as c:
            c.cursor().execute(db.insert)
            c.commit()
        source = make_source(config)  # the request's own connection, as `dblog dump` has
        # a request names it as the changelog does (a needless quote of the schema is dropped)
        spec = dump_requests.request_dump(source, r.state, f'"{db.ns}"."dot.ted"')
        assert list(spec.tables) == [db.dotted]
        wait(lambda: r.status(spec.dump_id).status is DumpStatus.DONE, 120, "the dump", r)
    finally:
        r.stop()
    events = r.events(db.dotted)
    assert {e.table for e in events} == {db.dotted}
    assert split_table(events[0].table) == (db.ns, "dot.ted")
    rows = {e.key[0]: e.after["v"] for e in events if e.after and e.key}  # not the range statements
    assert rows == {1: "before", 2: "logged"}
