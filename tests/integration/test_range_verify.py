"""``dblog verify --ranges`` on real PostgreSQL and MariaDB (issue 15 part 4, detection): each
column's text computed in SQL equals the one computed from the replay, for every column type
of the oracle's 30-column tables (on MariaDB, JSON documents whose source text Python does not
spell alike differ, and only those); so unchanged tables are verified without reading a row,
and drift is found by bisection exactly as the whole-table comparison finds it, reading a small
part."""

from __future__ import annotations

import itertools
import json
import random
import uuid

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.range_verify import check_table_by_ranges
from airflow_provider_dblog.core.row_digest import NULL
from airflow_provider_dblog.core.verify import check_table, replay
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.sources.mysql import digest as mysql_digest
from airflow_provider_dblog.sources.postgres import digest as postgres_digest

from .capture_proc import dblog, write_config
from .databases import ADAPTERS
from .test_engine import dumped_once

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mysql"])
def db(request):
    db = ADAPTERS[request.param]()
    db.wide = True  # every column type the database has in the oracle, with edge values
    db.create()
    db.source_id = f"rng_{uuid.uuid4().hex[:6]}"
    yield db
    db.drop(db.source_id)


def checks(db, lake: str, tables: list[str], span: int):
    src, out = make_source(db.source_config(db.source_id)), make_output(lake)
    src.open()
    out.open()
    try:
        return {t: (check_table(src, out, t), *check_table_by_ranges(src, out, t, span=span)) for t in tables}
    finally:
        src.close()
        out.close()


def column_differences(db, lake: str, table: str) -> dict[str, list]:
    """Per column, the rows whose text in SQL differs from the text Python renders from the
    replay: [(key, SQL text, Python text, replayed value)]."""
    src, out = make_source(db.source_config(db.source_id)), make_output(lake)
    src.open()
    out.open()
    try:
        schema = src.table_schema(table)
        rows = replay(out.scan(src.source_id, table))
    finally:
        src.close()
        out.close()
    digest = postgres_digest if db.kind == "postgres" else mysql_digest
    names = [n for n, _ in digest.renderers(schema)]
    with db.connect() as c:
        cur = c.cursor()
        if db.kind == "mysql":
            cur.execute("SET time_zone = '+00:00'")  # as the source's sessions
        cur.execute(f"SELECT {', '.join(schema.key)}, {', '.join(digest.texts_sql(schema))} FROM {table}", ())
        got = {tuple(r[: len(schema.key)]): r[len(schema.key) :] for r in cur.fetchall()}
    assert set(got) == set(rows), table
    diff: dict[str, list] = {}
    for key, texts in got.items():
        for (name, render), text in zip(digest.renderers(schema), texts):
            value = rows[key][name]
            mine = NULL if value is None else render(value)
            if mine != text:
                diff.setdefault(name, []).append((key, text, mine, value))
    assert set(diff) <= set(names)
    return diff


def test_ranges_read_nothing_of_equal_tables_and_find_drift_like_a_whole_compare(db, tmp_path):
    db.seed(random.Random(61), 300)
    accounts, wide = f"{db.ns}.accounts", f"{db.ns}.wide"
    with db.connect() as c:
        bulk = (
            "SELECT seq, 'bulk' FROM generate_series(5000, 30000) seq"
            if db.kind == "postgres"
            else f"SELECT seq, 'bulk' FROM {db.ns}.seq_5000_to_30000"  # MariaDB's sequence engine
        )
        c.cursor().execute(f"INSERT INTO {accounts} (id, name) {bulk}")
        c.commit()
    r = dumped_once(db, tmp_path)

    differences = column_differences(db, r.lake, wide)
    json_spelling = differences.pop("j", []) if db.kind == "mysql" else []
    assert differences == {}, {n: d[:3] for n, d in differences.items()}  # every type rendered alike
    for key, text, _, value in json_spelling:  # the same document, spelt otherwise in the source
        assert json.loads(text) == value, (key, text, value)
    assert len(json_spelling) < db.approx_rows / 2

    equal = checks(db, r.lake, [accounts, wide], span=500)
    for t, (whole, ranged, stats) in equal.items():
        assert whole.mismatches == [] and ranged.mismatches == [], (t, whole.mismatches[:3], ranged.mismatches[:3])
        assert stats is not None, t
        assert stats.rows_read == 0 or (t == wide and json_spelling), (t, stats)
        assert ranged.source_rows == whole.source_rows
    assert equal[accounts][2].digests == -(-equal[accounts][0].source_rows // 500)  # one per 500 rows

    with db.connect() as c:  # drift: changes the capture never sees
        db.gap_changes(c, random.Random(62), itertools.count(100_000).__next__)
        c.commit()
    r.start(reset_position=True)
    r.stop()
    drift = checks(db, r.lake, [accounts, wide], span=500)
    for t, (whole, ranged, _) in drift.items():
        assert [(m.key, m.kind) for m in ranged.mismatches] == [(m.key, m.kind) for m in whole.mismatches], t
        assert ranged.source_rows == whole.source_rows
    whole, ranged, stats = drift[accounts]
    assert {m.kind for m in ranged.mismatches} == {"missing", "different", "extra"}
    # each differing key costs at most one leaf range (<= 64 replay keys) of reading
    assert stats.ranges_read <= len(whole.mismatches), (stats, len(whole.mismatches))
    assert stats.rows_read < whole.source_rows / 10, stats  # a small part of the table is read

    config = write_config(tmp_path / "v.toml", db.source_config(db.source_id), tmp_path / "state.db", r.lake)
    out = dblog(config, "verify", "--ranges", "--table", accounts, check=False)
    assert out.returncode == 1, out.stderr
    assert f"{len(whole.mismatches)} mismatches (by ranges: " in out.stdout, out.stdout
