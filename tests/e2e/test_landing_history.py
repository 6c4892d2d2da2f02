"""History mirrors (SCD type 2, ``land_changelog --history``, spark/history.py) against the
source itself: a capture runs while single-writer rounds of random inserts, updates and
deletes (and one TRUNCATE; on MariaDB also deletes the binlog never sees, which a dump's
range events repair) change a table; after each round the test takes a snapshot of the
table and the log position at that moment. Landed with its history, the table "as of" each
of those positions (the documented query, ``history.as_of``) must equal that snapshot, row
for row, and the current versions must equal the table. Landed again from a new checkpoint,
the history does not change. ``verify_mirror --history`` finds it equal to the table (and an
overlap planted in it), and a consistent cut reads it equal to the mirror at the cut."""

from __future__ import annotations

import random
import uuid

import pytest

from airflow_provider_dblog.core.events import Position
from tests.e2e.test_landing import spark  # noqa: F401 - the shared SparkSession fixture
from tests.e2e.test_landing_sources import Engine
from tests.integration.databases import ADAPTERS

pytestmark = pytest.mark.integration


def position_now(db, c) -> str:
    """A changelog position after every transaction committed so far and before any later
    one (nothing writes meanwhile: the test is the only writer)."""
    cur = c.cursor()
    if db.kind == "postgres":
        from airflow_provider_dblog.sources.postgres.log import parse_lsn

        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        return Position(f"{parse_lsn(cur.fetchone()[0]):016X}0000000000").encode()
    from airflow_provider_dblog.sources.mysql.log import encode_coord, file_number

    cur.execute("SHOW MASTER STATUS")
    file, pos = cur.fetchone()[:2]
    return Position(encode_coord(file_number(file), int(pos), 0, 0)).encode()


def snapshot(db, c, table: str) -> dict[int, tuple]:
    cur = c.cursor()
    cur.execute(f"SELECT id, v, n FROM {table}")
    return {r[0]: (r[1], r[2]) for r in cur.fetchall()}


def round_of_changes(db, c, table: str, rng: random.Random, ids: list[int]) -> None:
    cur = c.cursor()
    for _ in range(rng.randint(3, 12)):  # a few transactions, some of several statements
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            if r < 0.35 or not ids:
                i = max(ids, default=0) + 1
                ids.append(i)
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", (i, f"new{i}", 0))
            elif r < 0.8:
                i = rng.choice(ids)
                cur.execute(f"UPDATE {table} SET v = %s, n = n + 1 WHERE id = %s", (f"u{rng.randrange(999)}", i))
            else:
                i = rng.choice(ids)
                ids.remove(i)
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (i,))
        c.commit()


# MariaDB's in make soak: each case is about a minute on a 2-core machine (README, "make soak")
@pytest.mark.parametrize("kind", ["postgres", pytest.param("mysql", marks=pytest.mark.soak)])
def test_history_as_of_each_snapshot_equals_the_source_then(kind, spark, tmp_path):  # noqa: F811
    from airflow_provider_dblog.outputs.lake_layout import history_path
    from airflow_provider_dblog.spark.history import as_of
    from airflow_provider_dblog.spark.land_changelog import land

    rng = random.Random(2026)
    db = ADAPTERS[kind]()
    source_id = f"hist_{kind}_{uuid.uuid4().hex[:6]}"
    db.create()
    table = f"{db.ns}.h"
    engine = conn = None
    try:
        with db.connect() as c:
            c.cursor().execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v varchar(40), n int)")
            for i in range(1, 41):  # before the capture: only the dump delivers them
                c.cursor().execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", (i, f"seed{i}", 0))
            c.commit()
        cfg = {**db.source_config(source_id), "tables": [table, f"{db.ns}.notes"]}
        lake = str(tmp_path / "lake")
        engine = Engine(cfg, f"delta://{lake}", str(tmp_path / "state.db"))
        engine.dump_all(chunk_size=7)
        ids = list(range(1, 41))
        snaps: list[tuple[str, dict]] = []
        conn = db.connect()
        for n in range(8):
            if n == 4:  # a TRUNCATE ends every version open at it
                conn.cursor().execute(f"TRUNCATE TABLE {table}")
                conn.commit()
                ids.clear()
            if n in (3, 6) and db.kind == "mysql":
                # Rows deleted where the binlog does not see it: only a dump's range events
                # (op k) tell; they end those keys' versions (at n = 3 in the batch that
                # also holds the TRUNCATE after them: ended at the range, not the TRUNCATE).
                conn.commit()  # the snapshot's read: sql_log_bin changes only outside a transaction
                cur = conn.cursor()
                cur.execute("SET SESSION sql_log_bin = 0")
                for i in ids[:3]:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (i,))
                conn.commit()
                cur.execute("SET SESSION sql_log_bin = 1")
                del ids[:3]
                engine.dump_all(chunk_size=7)
            round_of_changes(db, conn, table, rng, ids)
            snaps.append((position_now(db, conn), snapshot(db, conn, table)))
            if n == 2:
                engine.sync(db)
                land(spark, lake, source=source_id, log=lambda m: None, history=[table])  # a batch mid-way
        final = snapshot(db, conn, table)
        conn.close()
        conn = None
        engine.sync(db)
        engine.stop()
        engine = None
        land(spark, lake, source=source_id, log=lambda m: None, history=[table])

        path = history_path(f"{lake}/mirrors", source_id, table)

        def rows_as_of(position: str) -> dict[int, tuple]:
            got = as_of(spark, path, position).select("id", "v", "n").collect()
            return {r.id: (r.v, r.n) for r in got}

        for position, expected in snaps:
            assert rows_as_of(position) == expected, position
        history = spark.read.format("delta").load(path)
        current = {r.id: (r.v, r.n) for r in history.where("_current").select("id", "v", "n").collect()}
        assert current == final
        assert history.where("_valid_to IS NULL").count() == history.where("_current").count() == len(final)
        closed = history.where("NOT _current").count()
        assert closed > 40, closed  # updates, deletes and the TRUNCATE ended versions
        # versions of a key never overlap (so at most one is open)
        spans: dict[str, list] = {}
        for r in history.select("_key", "_valid_from", "_valid_to").collect():
            spans.setdefault(r._key, []).append((r._valid_from, r._valid_to))
        for key, vs in spans.items():
            vs.sort()
            for (f1, t1), (f2, _) in zip(vs, vs[1:]):
                assert t1 is not None and f1 < t1 <= f2, (key, vs)
        n_versions = history.count()
        # registered in the catalog beside the mirror, as ..._history
        from airflow_provider_dblog.outputs.lake_layout import history_catalog_name

        assert spark.table(history_catalog_name(source_id, table)).count() == n_versions

        # Landing the same changelog again from a new checkpoint changes nothing.
        again = land(
            spark, lake, source=source_id, checkpoint=str(tmp_path / "cp2"), log=lambda m: None, history=[table]
        )
        assert again["events"] > 0
        assert spark.read.format("delta").load(path).count() == n_versions
        for position, expected in snaps:
            assert rows_as_of(position) == expected, position

        # verify_mirror --history: the current versions equal the table, no versions overlap.
        from airflow_provider_dblog.config import make_source
        from airflow_provider_dblog.spark.verify_mirror import verify_table

        source = make_source(cfg)
        source.open()
        try:
            assert verify_table(spark, source, f"{lake}/mirrors", table, history=True) == (len(final), len(final), [])
            # A consistent cut reads the history as of its position, equal to the mirror's
            # version at the cut: at each landed batch boundary that is a cut (the mid-way
            # landing's at least; the newest counts only once the changelog goes on past it).
            from airflow_provider_dblog.spark import mirror_commits as mc
            from airflow_provider_dblog.spark.consistent_cut import (
                NoConsistentCut,
                consistent_cut,
                read_at,
                read_histories,
            )

            (mirror,) = [m for m in read_histories(spark, f"{lake}/mirrors", source_id) if m.table == table]
            boundaries = sorted({meta[mc.POSITION] for _, meta in mirror.commits if meta is not None})
            cut_at = set()
            for at in boundaries:
                try:
                    cut = consistent_cut(spark, lake, source_id, at)
                except NoConsistentCut:
                    continue
                cut_at.add(cut.position)
                assert cut.histories == {table: path}, cut
                history_at = spark.sql(f"SELECT id, v, n FROM {cut.history_sql(table)}").collect()
                mirror_at = read_at(spark, cut, table).where("NOT _deleted").select("id", "v", "n").collect()
                assert {r.id: (r.v, r.n) for r in history_at} == {r.id: (r.v, r.n) for r in mirror_at}, cut
            assert len(boundaries) >= 2 and boundaries[0] in cut_at, (boundaries, cut_at)
            # A history whose versions overlap (an ended version opened again) is a landing fault.
            reopened = history.where("NOT _current").select("_key").first()._key
            spark.sql(
                f"UPDATE delta.`{path}` SET _valid_to = NULL, _current = true "
                f"WHERE _key = '{reopened}' AND NOT _current"
            )
            _, _, found = verify_table(spark, source, f"{lake}/mirrors", table, history=True)
            assert [m.kind for m in found if m.kind == "overlap"] == ["overlap"], found
        finally:
            source.close()
    finally:
        if conn is not None:  # an open transaction would hold DROP DATABASE's lock
            conn.close()
        if engine is not None:
            engine.stop_event.set()
            engine.thread.join(60)
        db.drop(source_id)


def test_history_fills_unchanged_toast_values(spark, tmp_path):  # noqa: F811
    """PostgreSQL, a table without REPLICA IDENTITY FULL: updates that leave a TOASTed value
    unchanged log a placeholder for it. The history fills each from the key's earlier event
    in the batch or its open version, so the table as of every snapshot equals the source,
    large values included. A history added later, whose first batch holds a placeholder of a
    key it has no version of, stops (its mirror goes on) with the fix, instead of guessing."""
    from airflow_provider_dblog.outputs.lake_layout import history_path
    from airflow_provider_dblog.spark.history import as_of
    from airflow_provider_dblog.spark.land_changelog import land
    from airflow_provider_dblog.spark.mirror_tables import PROP_STOPPED

    rng = random.Random(39)
    db = ADAPTERS["postgres"]()
    source_id = f"hist_toast_{uuid.uuid4().hex[:6]}"
    db.create()
    table = f"{db.ns}.ht"

    def big() -> str:  # random letters: pglz leaves it above the 2 kB TOAST threshold
        return "".join(rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", k=6000))

    def snap(c) -> dict[int, tuple]:
        cur = c.cursor()
        cur.execute(f"SELECT id, big, n FROM {table}")
        return {r[0]: (r[1], r[2]) for r in cur.fetchall()}

    engine = conn = None
    try:
        with db.connect() as c:
            c.cursor().execute(
                f"CREATE TABLE {table} (id int PRIMARY KEY, big text, n int)"
            )  # REPLICA IDENTITY DEFAULT
            for i in range(1, 9):
                c.cursor().execute(f"INSERT INTO {table} VALUES (%s, %s, 0)", (i, big()))
            c.commit()
        cfg = {**db.source_config(source_id), "tables": [table, f"{db.ns}.notes"]}
        lake = str(tmp_path / "lake")
        engine = Engine(cfg, f"delta://{lake}", str(tmp_path / "state.db"))
        engine.dump_all(chunk_size=3)
        conn = db.connect()
        snaps: list[tuple[str, dict]] = []
        late_mirrors = str(tmp_path / "late")
        for n in range(6):
            cur = conn.cursor()
            for _ in range(rng.randint(3, 6)):  # most updates leave big unchanged: a placeholder
                i = rng.randint(1, 8)
                if rng.random() < 0.75:
                    cur.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (i,))
                else:
                    cur.execute(f"UPDATE {table} SET big = %s, n = n + 1 WHERE id = %s", (big(), i))
                conn.commit()
            snaps.append((position_now(db, conn), snap(conn)))
            if n == 1:
                engine.sync(db)
                land(spark, lake, source=source_id, log=lambda m: None, history=[table])  # a batch mid-way
                # a second landing without a history until now
                land(spark, lake, source=source_id, mirrors=late_mirrors, log=lambda m: None, register=False)
        final = snap(conn)
        conn.close()
        conn = None
        engine.sync(db)
        engine.stop()
        engine = None
        land(spark, lake, source=source_id, log=lambda m: None, history=[table])
        path = history_path(f"{lake}/mirrors", source_id, table)
        history = spark.read.format("delta").load(path)
        assert history.where("_valid_to IS NULL").count() == len(final)
        for position, expected in snaps:
            got = {r.id: (r.big, r.n) for r in as_of(spark, path, position).select("id", "big", "n").collect()}
            assert got == expected, position
        assert {r.id: (r.big, r.n) for r in history.where("_current").collect()} == final

        # The history added later: its first batch holds placeholders of keys it has no version of.
        lines: list[str] = []
        land(spark, lake, source=source_id, mirrors=late_mirrors, log=lines.append, register=False, history=[table])
        late = history_path(late_mirrors, source_id, table)
        props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{late}`").collect()}
        assert "REPLICA IDENTITY FULL" in props.get(PROP_STOPPED, ""), props
        assert any("history" in m and "stopped" in m and "REPLICA IDENTITY FULL" in m for m in lines), lines
        mirror = spark.read.format("delta").load(f"{late_mirrors}/{source_id}/{table}").where("NOT _deleted")
        assert {r.id: (r.big, r.n) for r in mirror.collect()} == final  # the mirror went on
    finally:
        if conn is not None:
            conn.close()
        if engine is not None:
            engine.stop_event.set()
            engine.thread.join(60)
        db.drop(source_id)
