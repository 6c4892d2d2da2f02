"""Per-database helpers for integration tests: connections, DDL and a random workload.

Both adapters create the same three tables (one with a composite key; text, JSON, numeric,
timestamp and NULL-able columns) in a schema/database of their own, and run the same kinds
of random transactions: inserts, updates, deletes and primary-key updates.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import uuid

import pytest


def env(name: str) -> str:
    v = os.environ.get(name)
    if v is None:
        pytest.skip(
            f"{name} is not set: start the servers with `scripts/services up` and "
            '`eval "$(scripts/services env)"` (make test does both)'
        )
    return v


class Adapter:
    kind: str
    approx_rows = 400  # the seeded table size, for picking random existing keys
    ns: str  # schema (PostgreSQL) or database (MySQL) holding the test tables

    def tables(self) -> list[str]:
        return [f"{self.ns}.accounts", f"{self.ns}.orders", f"{self.ns}.notes"]

    # -- random workload ---------------------------------------------------------------
    def _value_row(self, rng: random.Random) -> dict:
        return {
            "name": rng.choice(["ann", "bob", "çé", "d'x", 'e"y', ""]) + str(rng.randrange(1000)),
            "balance": f"{rng.randrange(-(10**6), 10**6) / 100:.2f}",
            "meta": None if rng.random() < 0.2 else json.dumps({"k": rng.randrange(100), "l": [1, "x"]}),
            "updated": (
                dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randrange(10**7), microseconds=rng.randrange(10**6))
            ).isoformat(sep=" "),
            "note": None if rng.random() < 0.3 else "n" * rng.randrange(0, 40),
        }

    def seed(self, rng: random.Random, n: int) -> None:
        with self.connect() as c:
            for i in range(1, n + 1):
                self._insert_account(c, i, self._value_row(rng))
                self._insert_order(c, rng.choice(["eu", "us", "ap"]), i, rng)
                self._insert_note(c, rng)
            c.commit()

    def random_transaction(self, c, rng: random.Random, next_id) -> None:
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            table = rng.choice(["accounts", "orders", "notes"])
            if table == "accounts":
                if r < 0.35:
                    self._insert_account(c, next_id(), self._value_row(rng))
                elif r < 0.75:
                    self._exec(
                        c,
                        f"UPDATE {self.ns}.accounts SET name=%s, balance=%s, note=%s WHERE id=%s",
                        (
                            f"u{rng.randrange(10**6)}",
                            f"{rng.randrange(10**5) / 100:.2f}",
                            None if rng.random() < 0.3 else "upd",
                            self._some_id(c, rng, "accounts", "id"),
                        ),
                    )
                elif r < 0.9:
                    self._exec(
                        c, f"DELETE FROM {self.ns}.accounts WHERE id=%s", (self._some_id(c, rng, "accounts", "id"),)
                    )
                else:  # primary-key update
                    self._exec(
                        c,
                        f"UPDATE {self.ns}.accounts SET id=%s WHERE id=%s",
                        (next_id(), self._some_id(c, rng, "accounts", "id")),
                    )
            elif table == "orders":
                region = rng.choice(["eu", "us", "ap"])
                if r < 0.35:
                    self._insert_order(c, region, next_id(), rng)
                elif r < 0.75:
                    self._exec(
                        c,
                        f"UPDATE {self.ns}.orders SET status=%s, amount=%s WHERE region=%s AND order_no=%s",
                        (
                            rng.choice(["new", "paid", "sent"]),
                            f"{rng.randrange(10**6) / 1000:.3f}",
                            region,
                            self._some_id(c, rng, "orders", "order_no"),
                        ),
                    )
                elif r < 0.9:
                    self._exec(
                        c,
                        f"DELETE FROM {self.ns}.orders WHERE order_no=%s",
                        (self._some_id(c, rng, "orders", "order_no"),),
                    )
                else:  # composite primary-key update (one column of the key changes)
                    self._exec(
                        c,
                        f"UPDATE {self.ns}.orders SET region=%s WHERE order_no=%s",
                        (
                            rng.choice(["eu2", "us2", "ap2"]) + str(rng.randrange(9)),
                            self._some_id(c, rng, "orders", "order_no"),
                        ),
                    )
            else:
                if r < 0.4:
                    self._insert_note(c, rng)
                elif r < 0.8:
                    self._exec(
                        c,
                        f"UPDATE {self.ns}.notes SET body=%s, flag=%s WHERE uid=%s",
                        (json.dumps({"v": rng.random()}), rng.random() < 0.5, self._some_id(c, rng, "notes", "uid")),
                    )
                else:
                    self._exec(c, f"DELETE FROM {self.ns}.notes WHERE uid=%s", (self._some_id(c, rng, "notes", "uid"),))
        c.commit()

    def gap_changes(self, c, rng: random.Random, next_id) -> dict:
        """Changes made while nothing captures (skipped by --reset-position): deletes of
        accounts (integer keys: a table dump's ranges repair them), updates of every table,
        new accounts. Deletes of orders/notes would need a key-list dump naming them."""
        cur = c.cursor()
        cur.execute(f"SELECT id FROM {self.ns}.accounts ORDER BY id")
        ids = [r[0] for r in cur.fetchall()]
        gone = rng.sample(ids, min(len(ids), 8)) + ids[-2:]  # the greatest keys too: above the bound
        for i in set(gone):
            self._exec(c, f"DELETE FROM {self.ns}.accounts WHERE id=%s", (i,))
        for _ in range(5):
            self._exec(
                c,
                f"UPDATE {self.ns}.accounts SET name=%s WHERE id=%s",
                ("changed in the gap", self._some_id(c, rng, "accounts", "id")),
            )
            self._exec(c, f"UPDATE {self.ns}.orders SET status=%s WHERE region=%s", ("gap", rng.choice(["eu", "us"])))
            self._insert_account(c, next_id(), self._value_row(rng))
        c.commit()
        return {"deleted": sorted(set(gone))}

    def tls_source_config(self, source_id: str, **overrides) -> dict:
        """source_config for the TLS-only user (scripts/services): full verification of the
        server (the test CA, host 127.0.0.1), a client certificate whose key is encrypted."""
        return {
            **self.source_config(source_id),
            "user": env("DBLOG_TLS_USER"),
            "sslmode": "verify-full",
            "sslrootcert": env("DBLOG_TLS_CA"),
            "sslcert": env("DBLOG_TLS_CERT"),
            "sslkey": env("DBLOG_TLS_KEY"),
            "sslpassword_env": "DBLOG_TLS_KEY_PASSWORD",
            **overrides,
        }

    def schema_changes(self) -> list[str]:
        """ALTER TABLEs the oracle runs under load, in this order: ADD COLUMN with a constant
        and with a volatile default, RENAME COLUMN, a compatible type change, DROP COLUMN
        (columns the workload's statements do not name)."""
        raise NotImplementedError

    def truncate(self, c, tables: list[str]) -> None:
        """TRUNCATE of captured tables (PostgreSQL: all in one statement; MariaDB: one
        statement each, in the table's database: it is recognised by its statement text)."""
        if self.kind == "postgres":
            self._exec(c, "TRUNCATE " + ", ".join(f"{self.ns}.{t}" for t in tables), None)
        else:
            for t in tables:
                self._exec(c, f"TRUNCATE TABLE `{self.ns}`.`{t}`", None)
        c.commit()

    def _some_id(self, c, rng: random.Random, table: str, col: str):
        # a random existing key (or none: then the statement changes nothing)
        cur = c.cursor()
        # uniform over the whole table, so writes hit keys of any chunk, not just the first
        cur.execute(
            f"SELECT {col} FROM {self.ns}.{table} ORDER BY {col} LIMIT 1 OFFSET %s",
            (rng.randrange(0, self.approx_rows),),
        )
        row = cur.fetchone()
        return row[0] if row else None

    def _exec(self, c, sql, params):
        c.cursor().execute(sql, params)

    def _insert_account(self, c, i, v):
        self._exec(
            c,
            f"INSERT INTO {self.ns}.accounts (id, name, balance, meta, updated, note) VALUES (%s,%s,%s,%s,%s,%s)",
            (i, v["name"], v["balance"], v["meta"], v["updated"], v["note"]),
        )

    def _insert_order(self, c, region, no, rng):
        self._exec(
            c,
            f"INSERT INTO {self.ns}.orders (region, order_no, status, amount, created) VALUES (%s,%s,%s,%s,%s)",
            (region, no, "new", f"{rng.randrange(10**6) / 1000:.3f}", "2024-05-06 07:08:09.123456"),
        )

    def _insert_note(self, c, rng):
        self._exec(
            c,
            f"INSERT INTO {self.ns}.notes (uid, body, flag) VALUES (%s,%s,%s)",
            (str(uuid.UUID(int=rng.getrandbits(128))), json.dumps({"t": "x" * rng.randrange(5)}), None),
        )


def toast_text(rng: random.Random) -> str:
    """About 3 kB of random hex: too big and too random to stay inline, so it is TOASTed."""
    return "%x" % rng.getrandbits(12_000)


class PostgresAdapter(Adapter):
    kind = "postgres"

    def __init__(self):
        self.host, self.port = env("DBLOG_PG_HOST"), int(env("DBLOG_PG_PORT"))
        self.user, self.password, self.db = env("DBLOG_PG_USER"), env("DBLOG_PG_PASSWORD"), env("DBLOG_PG_DATABASE")
        self.ns = "t_" + uuid.uuid4().hex[:8]

    def connect(self):
        import psycopg2

        return psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.db)

    def schema_changes(self) -> list[str]:
        a, o = f"{self.ns}.accounts", f"{self.ns}.orders"
        return [
            f"ALTER TABLE {a} ADD COLUMN extra integer DEFAULT 7",
            f"ALTER TABLE {o} ADD COLUMN stamp integer DEFAULT floor(random() * 1000)",
            f"ALTER TABLE {a} RENAME COLUMN extra TO extra2",
            f"ALTER TABLE {a} ALTER COLUMN note TYPE varchar(300)",
            f"ALTER TABLE {o} DROP COLUMN stamp",
        ]

    def create(self) -> None:
        with self.connect() as c:
            cur = c.cursor()
            cur.execute(f"CREATE SCHEMA {self.ns}")
            cur.execute(f"""CREATE TABLE {self.ns}.accounts (id bigint PRIMARY KEY, name text NOT NULL,
                balance numeric(12,2), meta jsonb, updated timestamp(6), note varchar(100))""")
            cur.execute(f"""CREATE TABLE {self.ns}.orders (region varchar(8), order_no int, status text,
                amount numeric(12,3), created timestamptz, PRIMARY KEY (region, order_no))""")
            cur.execute(f"CREATE TABLE {self.ns}.notes (uid uuid PRIMARY KEY, body json, flag boolean)")
            # Unchanged TOAST values (issue 11): a big text column, with and without
            # REPLICA IDENTITY FULL; the workload's other updates leave it unchanged.
            cur.execute(f"ALTER TABLE {self.ns}.accounts ADD COLUMN doc text")
            cur.execute(f"ALTER TABLE {self.ns}.notes ADD COLUMN doc text")
            cur.execute(f"ALTER TABLE {self.ns}.notes REPLICA IDENTITY FULL")
            if self.partitioned:
                self.create_partitioned(c)
            c.commit()

    def seed(self, rng: random.Random, n: int) -> None:
        super().seed(rng, n)
        with self.connect() as c:  # a TOASTed value in about a third of the rows
            for table, key in (("accounts", "id"), ("notes", "uid")):
                c.cursor().execute(
                    f"UPDATE {self.ns}.{table} SET doc = %s WHERE {key} IN "
                    f"(SELECT {key} FROM {self.ns}.{table} ORDER BY {key} LIMIT %s)",
                    (toast_text(rng), n // 3),
                )
            if self.partitioned:
                for i in range(1, n + 1):
                    self._insert_ledger(c, i, self.LEDGER_REGIONS[i % len(self.LEDGER_REGIONS)], rng)
            c.commit()

    def random_transaction(self, c, rng: random.Random, next_id) -> None:
        if rng.random() < 0.1:  # give a row a new TOASTed value; the other updates keep it
            table, key = rng.choice([("accounts", "id"), ("notes", "uid")])
            self._exec(
                c,
                f"UPDATE {self.ns}.{table} SET doc = %s WHERE {key} = %s",
                (toast_text(rng), self._some_id(c, rng, table, key)),
            )
        if self.partitioned and rng.random() < 0.3:
            self.ledger_transaction(c, rng, next_id)
        super().random_transaction(c, rng, next_id)

    # -- a partitioned table (issue 10 part 3), opt in: set `partitioned = True` before create()
    partitioned = False
    LEDGER_REGIONS = ("eu", "us", "ap")  # partitions made by create(); the workload adds others
    LEDGER_NEW_REGIONS = ("sa", "af", "oc", "me")  # partitions the workload creates while capturing

    def tables(self) -> list[str]:
        return super().tables() + ([f"{self.ns}.ledger"] if self.partitioned else [])

    def create_partitioned(self, c) -> str:
        """ledger, partitioned by LIST (region) with the key (id, region) (a partitioned
        table's key must include its partition key); ledger_eu is itself partitioned by RANGE
        (id), so the seeded rows (small ids) and the workload's (from 10**6) land in different
        leaves. Returns the table's name."""
        t = f"{self.ns}.ledger"
        cur = c.cursor()
        cur.execute(f"""CREATE TABLE {t} (id bigint, region text, day date, amount numeric(12,2), memo text,
            PRIMARY KEY (id, region)) PARTITION BY LIST (region)""")
        cur.execute(f"CREATE TABLE {t}_eu PARTITION OF {t} FOR VALUES IN ('eu') PARTITION BY RANGE (id)")
        cur.execute(f"CREATE TABLE {t}_eu_lo PARTITION OF {t}_eu FOR VALUES FROM (MINVALUE) TO (1000000)")
        cur.execute(f"CREATE TABLE {t}_eu_hi PARTITION OF {t}_eu FOR VALUES FROM (1000000) TO (MAXVALUE)")
        for region in self.LEDGER_REGIONS[1:]:
            cur.execute(f"CREATE TABLE {t}_{region} PARTITION OF {t} FOR VALUES IN ('{region}')")
        return t

    def _insert_ledger(self, c, i: int, region: str, rng: random.Random) -> None:
        self._exec(
            c,
            f"INSERT INTO {self.ns}.ledger (id, region, day, amount, memo) VALUES (%s, %s, %s, %s, %s)",
            (
                i,
                region,
                dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(400)),
                f"{rng.randrange(-(10**6), 10**6) / 100:.2f}",
                None if rng.random() < 0.3 else "m" * rng.randrange(1, 30),
            ),
        )

    def ledger_transaction(self, c, rng: random.Random, next_id) -> None:
        """One random change of ledger (the caller commits): inserts (sometimes into a region
        whose partition it creates first, CREATE TABLE .. PARTITION OF while capturing),
        updates, deletes and cross-partition updates (a change of region, which is part of
        the key, moves the row to another partition)."""
        t, r = f"{self.ns}.ledger", rng.random()
        if r < 0.35:
            region = rng.choice(self.LEDGER_REGIONS)
            if rng.random() < 0.1:
                region = rng.choice(self.LEDGER_NEW_REGIONS)
                # Concurrent writers may race to create it: the loser's transaction fails and
                # the workload rolls it back, like a deadlock.
                self._exec(
                    c, f"CREATE TABLE IF NOT EXISTS {t}_{region} PARTITION OF {t} FOR VALUES IN ('{region}')", None
                )
            self._insert_ledger(c, next_id(), region, rng)
        elif r < 0.7:
            self._exec(
                c,
                f"UPDATE {t} SET amount = %s, memo = %s WHERE id = %s",
                (f"{rng.randrange(10**5) / 100:.2f}", rng.choice([None, "upd"]), self._some_id(c, rng, "ledger", "id")),
            )
        elif r < 0.85:
            self._exec(c, f"DELETE FROM {t} WHERE id = %s", (self._some_id(c, rng, "ledger", "id"),))
        else:  # to another existing partition
            self._exec(
                c,
                f"UPDATE {t} SET region = %s WHERE id = %s",
                (rng.choice(self.LEDGER_REGIONS), self._some_id(c, rng, "ledger", "id")),
            )

    def source_config(self, source_id: str) -> dict:
        return {
            "type": "postgres",
            "id": source_id,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "database": self.db,
            "tables": self.tables(),
            "password_env": "DBLOG_PG_PASSWORD",
        }

    def superconnect(self):
        """As the superuser: sees every session's TLS state, drops what dblog_tls created."""
        import psycopg2

        return psycopg2.connect(
            host=self.host,
            port=self.port,
            user=env("DBLOG_PG_SUPERUSER"),
            password=env("DBLOG_PG_SUPERUSER_PASSWORD"),
            dbname=self.db,
        )

    def drop(self, source_id: str) -> None:
        with self.superconnect() as c:
            c.autocommit = True
            cur = c.cursor()
            cur.execute(f"DROP SCHEMA IF EXISTS {self.ns} CASCADE")
            cur.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name=%s AND NOT active",
                (f"dblog_{source_id}",),
            )
            cur.execute(f'DROP PUBLICATION IF EXISTS "dblog_{source_id}"')


class MySQLAdapter(Adapter):
    kind = "mysql"

    def __init__(self):
        self.host, self.port = env("DBLOG_MYSQL_HOST"), int(env("DBLOG_MYSQL_PORT"))
        self.user, self.password = env("DBLOG_MYSQL_USER"), env("DBLOG_MYSQL_PASSWORD")
        self.ns = "t_" + uuid.uuid4().hex[:8]

    def connect(self):
        import pymysql

        return pymysql.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, autocommit=False, charset="utf8mb4"
        )

    def schema_changes(self) -> list[str]:
        a, o = f"{self.ns}.accounts", f"{self.ns}.orders"
        return [
            f"ALTER TABLE {a} ADD COLUMN extra int DEFAULT 7",
            f"ALTER TABLE {o} ADD COLUMN stamp int DEFAULT (FLOOR(RAND() * 1000))",
            f"ALTER TABLE {a} RENAME COLUMN extra TO extra2",
            f"ALTER TABLE {a} MODIFY note varchar(300)",
            f"ALTER TABLE {o} DROP COLUMN stamp",
        ]

    def create(self) -> None:
        c = self.connect()
        try:
            cur = c.cursor()
            cur.execute(f"CREATE DATABASE {self.ns}")
            cur.execute(f"""CREATE TABLE {self.ns}.accounts (id bigint PRIMARY KEY, name varchar(200) NOT NULL,
                balance decimal(12,2), meta json, updated datetime(6), note varchar(100))""")
            cur.execute(f"""CREATE TABLE {self.ns}.orders (region varchar(8), order_no int, status varchar(20),
                amount decimal(12,3), created timestamp(6) NULL, PRIMARY KEY (region, order_no))""")
            cur.execute(f"CREATE TABLE {self.ns}.notes (uid char(36) PRIMARY KEY, body json, flag tinyint(1))")
            c.commit()
        finally:
            c.close()

    def source_config(self, source_id: str) -> dict:
        return {
            "type": "mysql",
            "id": source_id,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "tables": self.tables(),
            "password_env": "DBLOG_MYSQL_PASSWORD",
        }

    def drop(self, source_id: str) -> None:
        c = self.connect()
        try:
            c.cursor().execute(f"DROP DATABASE IF EXISTS {self.ns}")
        finally:
            c.close()


ADAPTERS = {"postgres": PostgresAdapter, "mysql": MySQLAdapter}
