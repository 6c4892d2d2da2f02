"""``dblog verify --ranges`` on a real PostgreSQL (issue 15 part 4, detection): row digests
computed in SQL equal those computed from the replay for every column type of the oracle's
30-column table, so unchanged tables are verified without reading a row; drift is found by
bisection, exactly as the whole-table comparison finds it, reading a small part."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.range_verify import check_table_by_ranges
from airflow_provider_dblog.core.verify import check_table
from airflow_provider_dblog.outputs import make_output

from .capture_proc import dblog, write_config
from .databases import ADAPTERS
from .test_engine import dumped_once

pytestmark = pytest.mark.integration


@pytest.fixture
def pg():
    db = ADAPTERS["postgres"]()
    db.wide = True  # every column type PostgreSQL has in the oracle, with edge values
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


def test_ranges_read_nothing_of_equal_tables_and_find_drift_like_a_whole_compare(pg, tmp_path):
    db = pg
    db.seed(random.Random(61), 300)
    accounts, wide = f"{db.ns}.accounts", f"{db.ns}.wide"
    with db.connect() as c:
        c.cursor().execute(
            f"INSERT INTO {accounts} (id, name) SELECT seq, 'bulk' FROM generate_series(5000, 30000) seq"
        )
        c.commit()
    r = dumped_once(db, tmp_path)

    equal = checks(db, r.lake, [accounts, wide], span=500)
    for t, (whole, ranged, stats) in equal.items():
        assert whole.mismatches == [] and ranged.mismatches == [], (t, whole.mismatches[:3], ranged.mismatches[:3])
        assert stats is not None and stats.rows_read == 0, (t, stats)  # every type rendered alike
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
