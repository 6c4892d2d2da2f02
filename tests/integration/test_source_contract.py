"""The Source contract (tests/contract/source_contract.py) against PostgreSQL (pgoutput and
wal2json) and MariaDB (scripts/services up pg mysql): the sources made from their configuration
as the CLI and the operators make them (config.make_source), over tables of each test's own."""

from __future__ import annotations

import time
import uuid
from typing import Any, Sequence

import pytest

from airflow_provider_dblog.config import make_source
from tests.contract.source_contract import ITEMS, PAIRS, Change, SourceContract, SourceHarness

from .databases import ADAPTERS, Adapter, env

pytestmark = pytest.mark.integration

# The contract's table shapes in each database's types.
SHAPES = {
    "postgres": {
        ITEMS: "id integer PRIMARY KEY, v text",
        PAIRS: "region varchar(8), n integer, v text, PRIMARY KEY (region, n)",
    },
    "mysql": {
        ITEMS: "id int PRIMARY KEY, v varchar(100)",
        PAIRS: "region varchar(8), n int, v varchar(100), PRIMARY KEY (region, n)",
    },
}


class SqlHarness(SourceHarness):
    """The harness over a real server: a schema (PostgreSQL) or database (MariaDB) of its own
    (the adapter's ``ns``), one source id, and one connection that commits each write."""

    bad_filter = "no_such_column = 1"

    def __init__(self, adapter: Adapter, **config: Any):
        self.adapter = adapter
        self.config = config  # source configuration besides the adapter's (e.g. the plugin)
        self.ns = adapter.ns
        self.source_id = f"{self.ns}_contract"  # also a valid replication slot name
        self.missing_table = f"{self.ns}.no_such_table"
        self.sources: list[Any] = []
        self.conn = adapter.connect()
        self._run(f"CREATE SCHEMA {self.ns}")  # a database on MariaDB

    def _run(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql, tuple(params) or None)
        self.conn.commit()  # never left in a transaction: PostgreSQL's slot creation waits for it

    def create_table(self, name: str, shape: str) -> str:
        table = f"{self.ns}.{name}"
        self._run(f"CREATE TABLE {table} ({SHAPES[self.adapter.kind][shape]})")
        return table

    def write(self, table: str, *changes: Change) -> None:
        def where(key: dict) -> tuple[str, list]:
            return " AND ".join(f"{c} = %s" for c in key), list(key.values())

        with self.conn.cursor() as cur:
            for kind, *args in changes:
                if kind == "insert":
                    row = args[0]
                    cols = ", ".join(row)
                    cur.execute(
                        f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(row))})", tuple(row.values())
                    )
                elif kind == "update":
                    cond, params = where(args[0])
                    sets = ", ".join(f"{c} = %s" for c in args[1])
                    cur.execute(f"UPDATE {table} SET {sets} WHERE {cond}", (*args[1].values(), *params))
                else:
                    cond, params = where(args[0])
                    cur.execute(f"DELETE FROM {table} WHERE {cond}", tuple(params))
        self.conn.commit()

    def drop_table(self, table: str) -> None:
        self._run(f"DROP TABLE {table}")

    def equals(self, column: str, value: str) -> str:
        return f"{column} = '{value}'"

    def source(self, tables: Sequence[str]) -> Any:
        src = make_source({**self.adapter.source_config(self.source_id), **self.config, "tables": list(tables)})
        self.sources.append(src)
        src.open()
        return src

    def close(self) -> None:
        for src in self.sources:
            src.close()
        self._run("DELETE FROM dblog.watermarks WHERE source_id = %s", (self.source_id,))  # keep it small
        self.conn.close()
        # The schema or database, and the replication slot and publication (PostgreSQL); a
        # closed walsender may take a moment to let go of its slot.
        for _ in range(50):
            self.adapter.drop(self.source_id)
            if self.adapter.kind != "postgres" or not self._slot_left():
                break
            time.sleep(0.1)

    def _slot_left(self) -> bool:
        with self.adapter.superconnect() as c, c.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (f"dblog_{self.source_id}",))
            return cur.fetchone() is not None


@pytest.fixture(params=["postgres", "postgres-wal2json", "mysql"])
def harness(request):
    kind, _, plugin = request.param.partition("-")
    adapter = ADAPTERS[kind]()  # skips the test when the server is not configured
    adapter.ns = f"sc_{uuid.uuid4().hex[:10]}"
    env("DBLOG_PG_SUPERUSER" if kind == "postgres" else "DBLOG_MYSQL_USER")
    h = SqlHarness(adapter, **({"plugin": plugin} if plugin else {}))
    yield h
    h.close()


class TestSourceContract(SourceContract):
    pass
