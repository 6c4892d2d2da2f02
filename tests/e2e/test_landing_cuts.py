"""Consistent cuts across mirrors (issue 12 part 5), real Spark + Delta: every mirror commit
records the position it is complete up to, and spark/consistent_cut.py picks the mirror
versions that read one moment of the source, never half of a transaction that updated two
tables, not even when the capture's changelog commits and the landing's micro-batches split it.
"""

from __future__ import annotations

import io
import json
import uuid
from contextlib import redirect_stdout

import pytest

from tests.e2e.test_landing import Changelog, land, mirror, spark  # noqa: F401 - spark: the shared fixture

pytestmark = pytest.mark.integration


def at(lsn: int, index: int):
    """A PostgreSQL position: ``index``-th change of the transaction committed at ``lsn``."""
    from airflow_provider_dblog.core.events import Position

    return Position(f"{lsn:016X}{index:010d}")


def balances(spark, cut, table: str) -> dict:  # noqa: F811
    from airflow_provider_dblog.spark.consistent_cut import read_at

    return {r.id: r.bal for r in read_at(spark, cut, table).where("NOT _deleted").collect()}


@pytest.mark.soak  # make soak: one of the longest runs (README)
def test_a_cut_reads_one_moment_of_the_source(spark, tmp_path):  # noqa: F811
    from delta.tables import DeltaTable

    from airflow_provider_dblog.spark import mirror_commits as mc
    from airflow_provider_dblog.spark.consistent_cut import NoConsistentCut, consistent_cut, main

    src = "cut_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    a, b = (log.schema(t, [("id", "integer"), ("bal", "integer")]) for t in ("bank.a", "bank.b"))
    other = log.schema("bank.other", [("id", "integer"), ("bal", "integer")])
    # Transfers between the two tables keep a.bal + b.bal = 100 after every transaction.
    log.append(  # T1: open both accounts (and a row in a third table)
        log.ev(a, "c", {"id": 1, "bal": 100}, position=at(0x10, 1)),
        log.ev(b, "c", {"id": 1, "bal": 0}, position=at(0x10, 2)),
        log.ev(other, "c", {"id": 1, "bal": 7}, position=at(0x10, 3)),
    )
    # T2 moves 30 from a to b; the capture flushed in the middle, so it spans two changelog
    # commits, and the landing (one changelog commit per micro-batch here) two batches.
    log.append(log.ev(a, "u", {"id": 1, "bal": 70}, position=at(0x20, 1)))
    log.append(log.ev(b, "u", {"id": 1, "bal": 30}, position=at(0x20, 2)))
    log.append(  # T3 moves 10 more
        log.ev(a, "u", {"id": 1, "bal": 60}, position=at(0x30, 1)),
        log.ev(b, "u", {"id": 1, "bal": 40}, position=at(0x30, 2)),
    )
    land(spark, tmp_path, max_files_per_batch=1)
    paths = {t: mirror(tmp_path, src, t) for t in ("bank.a", "bank.b", "bank.other")}

    # Every landing commit records where its batch began and the position the mirror is
    # complete up to; a's history holds the half-applied T2 (a debited, b not yet credited).
    hist = DeltaTable.forPath(spark, paths["bank.a"]).history().orderBy("version").collect()
    metas = [mc.parse_user_metadata(h.userMetadata) for h in hist]
    assert [(m[mc.FROM], m[mc.POSITION]) for m in metas if m] == [
        (at(0x10, 1).encode(), at(0x10, 3).encode()),
        (at(0x20, 1).encode(), at(0x20, 1).encode()),
        (at(0x30, 1).encode(), at(0x30, 2).encode()),
    ]
    half = next(h.version for h, m in zip(hist, metas) if m and m[mc.POSITION] == at(0x20, 1).encode())
    a_half = spark.read.format("delta").option("versionAsOf", half).load(paths["bank.a"]).first().bal
    assert a_half == 70  # while b's mirror still said 0 then: a naive "latest at that time" reads 70

    def check(cut, want_a: int, want_b: int) -> None:
        assert balances(spark, cut, "bank.a") == {1: want_a} and balances(spark, cut, "bank.b") == {1: want_b}
        assert balances(spark, cut, "bank.other") == {1: 7}
        total = spark.sql(
            f"SELECT x.bal + y.bal AS total FROM {cut.sql('bank.a')} x JOIN {cut.sql('bank.b')} y ON x.id = y.id "
            "WHERE NOT x._deleted AND NOT y._deleted"
        ).first()
        assert total.total == 100

    # Asked for the moment T2's first half landed (a batch boundary, inside T2): the cut
    # before T2. At T2's last change: after T2.
    cut = consistent_cut(spark, str(tmp_path), src, at(0x20, 1).encode())
    assert cut.position == at(0x10, 3).encode()
    check(cut, 100, 0)
    assert consistent_cut(spark, str(tmp_path), src, at(0x20, 2).encode()).position == at(0x20, 2).encode()
    # The newest cut: T3 is landed, but whether it ended is not known until the changelog
    # holds a later event; so the cut after T2.
    cut = consistent_cut(spark, str(tmp_path), src)
    assert cut.position == at(0x20, 2).encode()
    check(cut, 70, 30)
    # The capture writes T4 (not landed yet): T3 has ended, the newest cut is after it.
    log.append(
        log.ev(a, "u", {"id": 1, "bal": 50}, position=at(0x40, 1)),
        log.ev(b, "u", {"id": 1, "bal": 50}, position=at(0x40, 2)),
    )
    cut = consistent_cut(spark, str(tmp_path), src)
    assert cut.position == at(0x30, 2).encode()
    check(cut, 60, 40)
    with pytest.raises(NoConsistentCut, match="landed only up to"):
        consistent_cut(spark, str(tmp_path), src, at(0x40, 2).encode())

    # The command line: the same cut as JSON, with FROM items for SQL.
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--lake", str(tmp_path), "--source", src, "--position", at(0x35, 1).encode()]) == 0
    printed = json.loads(out.getvalue())
    assert printed["position"] == at(0x30, 2).encode() and printed["versions"] == cut.versions
    assert printed["sql"]["bank.a"] == f"delta.`{paths['bank.a']}` VERSION AS OF {cut.versions['bank.a']}"
