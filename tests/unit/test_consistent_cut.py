"""Consistent cuts across mirrors (spark/consistent_cut.py), the pure part: which mirror
versions read one moment of the source, from the positions the landing job records per
commit (spark/mirror_commits.py). tests/e2e/test_landing_cuts.py runs it on real mirrors."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dblog.spark import mirror_commits as mc
from airflow_provider_dblog.spark.consistent_cut import MirrorHistory, NoConsistentCut, find_cut, transaction_of


def pos(lsn: int, index: int, sub: int = 0) -> str:
    """A PostgreSQL position: transaction = commit LSN, ``index`` = change in it."""
    from airflow_provider_dblog.sources.postgres.log import make_position

    return make_position(lsn, index).with_sub(sub).encode()


def meta(first: str, last: str, batch: int, landing: str = "L1", source: str = "pg1") -> dict:
    commit = mc.BatchCommit(source, first, last, batch, landing)
    return mc.parse_user_metadata(commit.user_metadata())


def test_transaction_of_matches_each_source_family():
    from airflow_provider_dblog.core.events import Position
    from airflow_provider_dblog.sources.mysql.log import encode_coord

    assert transaction_of(pos(0x1A, 1)) == transaction_of(pos(0x1A, 2, sub=5)) != transaction_of(pos(0x1B, 1))
    my = [Position(encode_coord(3, txn, event, row)).encode() for txn, event, row in ((100, 150, 0), (100, 300, 2))]
    other = Position(encode_coord(3, 400, 450, 0)).encode()
    assert transaction_of(my[0]) == transaction_of(my[1]) != transaction_of(other)
    with pytest.raises(ValueError, match="cannot tell the transaction"):
        transaction_of("0042.000000000")


def test_transaction_of_gtid_positions():
    gtid = pytest.importorskip("airflow_provider_dblog.sources.mysql.gtid")
    from airflow_provider_dblog.core.events import Position

    a, b = (Position(gtid.encode_gtid_coord(0, 17, row, "0-1-17")).encode() for row in (1, 2))
    c = Position(gtid.encode_gtid_coord(0, 18, 1, "0-1-18")).encode()
    assert transaction_of(a) == transaction_of(b) != transaction_of(c)


# Batches of one landing over transactions 0x10 (tables a, b), 0x20 (a, then b: the capture
# flushed in between, so batch 1 ends inside it), 0x30 (b only), 0x40 (a, b).
B0 = meta(pos(0x10, 1), pos(0x10, 2), 0)
B1 = meta(pos(0x20, 1), pos(0x20, 1), 1)
B2 = meta(pos(0x20, 2), pos(0x30, 1), 2)
B3 = meta(pos(0x40, 1), pos(0x40, 2), 3)


def mirrors() -> list[MirrorHistory]:
    return [
        # version 0: CREATE (no positions); 3: an OPTIMIZE after batch 1
        MirrorHistory("s.a", "/m/pg1/s.a", [(0, None), (1, B0), (2, B1), (3, None), (4, B3)]),
        MirrorHistory("s.b", "/m/pg1/s.b", [(0, None), (1, B0), (2, B2), (3, B3)]),
    ]


def test_a_cut_never_splits_a_transaction():
    # Inside transaction 0x20, or right after batch 1: the cut before 0x20.
    for at in (pos(0x20, 1), pos(0x20, 2)):
        cut = find_cut("pg1", mirrors(), at)
        assert cut.position == B0[mc.POSITION] and cut.versions == {"s.a": 1, "s.b": 1}
    # After batch 2 (0x20 whole, 0x30): a at its OPTIMIZE after batch 1 (its state since).
    cut = find_cut("pg1", mirrors(), pos(0x35, 1))
    assert cut.position == pos(0x30, 1) and cut.versions == {"s.a": 3, "s.b": 2}
    assert cut.sql("s.b") == "delta.`/m/pg1/s.b` VERSION AS OF 2"


def test_the_newest_batch_counts_once_the_changelog_shows_its_transaction_ended():
    assert find_cut("pg1", mirrors()).position == pos(0x30, 1)  # nothing known after 0x40
    assert find_cut("pg1", mirrors(), next_event=lambda p: None).position == pos(0x30, 1)
    cut = find_cut("pg1", mirrors(), next_event=lambda p: pos(0x41, 1) if p >= pos(0x40, 2) else None)
    assert cut.position == pos(0x40, 2) and cut.versions == {"s.a": 4, "s.b": 3}
    # The changelog's next event is still of 0x40 (landed half): not a cut.
    half = find_cut("pg1", mirrors(), next_event=lambda p: pos(0x40, 3) if p >= pos(0x40, 2) else pos(0x99, 1))
    assert half.position == pos(0x30, 1)


def test_positions_not_landed_or_before_every_cut_are_refused():
    with pytest.raises(NoConsistentCut, match="landed only up to"):
        find_cut("pg1", mirrors(), pos(0x50, 1))
    # Beyond the landed end, but before the changelog's next event: nothing in between.
    later = find_cut("pg1", mirrors(), pos(0x50, 1), next_event=lambda p: pos(0x60, 1) if p >= pos(0x40, 2) else None)
    assert later.position == pos(0x40, 2)
    with pytest.raises(NoConsistentCut, match="landed only up to"):
        find_cut("pg1", mirrors(), pos(0x60, 1), next_event=lambda p: pos(0x60, 1) if p >= pos(0x40, 2) else None)
    with pytest.raises(NoConsistentCut, match="no consistent cut"):
        find_cut("pg1", mirrors(), pos(0x10, 1))  # inside the first transaction
    with pytest.raises(NoConsistentCut, match="no mirror"):
        find_cut("other", mirrors())


def test_a_stopped_mirror_is_left_out():
    ms = mirrors() + [MirrorHistory("s.c", "/m/pg1/s.c", [(0, None), (1, B0)], stopped="incompatible ...")]
    cut = find_cut("pg1", ms, pos(0x35, 1))
    assert set(cut.versions) == {"s.a", "s.b"} and cut.stopped == {"s.c": "incompatible ..."}


def test_history_mirrors_are_read_at_the_cuts_position_where_they_hold_it():
    """A history is read by position (history.as_of) in its newest version, where it holds
    every event of its table up to the cut: its last commit is at or past the cut, or it has
    caught up with its mirror (a quiet table gets no commit in either). One a batch behind its
    mirror, one that stopped, and one with nothing landed are left out, each with why."""
    histories = [
        MirrorHistory("s.a", "/m/_history/pg1/s.a", [(0, None), (1, B0), (2, B1), (3, B3)]),  # past every cut
        MirrorHistory("s.b", "/m/_history/pg1/s.b", [(0, None), (1, B0), (2, B2)]),  # behind b's mirror (B3)
    ]
    cut = find_cut("pg1", mirrors(), pos(0x35, 1), histories=histories)
    assert cut.position == pos(0x30, 1)
    # b's history has landed up to the cut (B2 ends at 0x30) although it lacks B3: held
    assert cut.histories == {"s.a": "/m/_history/pg1/s.a", "s.b": "/m/_history/pg1/s.b"}
    at = pos(0x30, 1)
    assert cut.history_sql("s.a") == (
        f"(SELECT * FROM delta.`/m/_history/pg1/s.a` WHERE _valid_from <= '{at}' "
        f"AND (_valid_to IS NULL OR _valid_to > '{at}'))"
    )
    newest = find_cut(
        "pg1", mirrors(), next_event=lambda p: pos(0x41, 1) if p >= pos(0x40, 2) else None, histories=histories
    )
    assert newest.position == pos(0x40, 2) and set(newest.histories) == {"s.a"}
    assert newest.histories_left_out == {"s.b": f"landed only up to {pos(0x30, 1)}, its mirror up to {pos(0x40, 2)}"}
    # A quiet table: its mirror's and its history's last commits are B0, the cut is far past.
    quiet = [MirrorHistory("s.q", "/m/pg1/s.q", [(0, None), (1, B0)])]
    quiet_history = [MirrorHistory("s.q", "/m/_history/pg1/s.q", [(0, None), (1, B0)])]
    cut = find_cut("pg1", mirrors() + quiet, pos(0x35, 1), histories=quiet_history)
    assert cut.histories == {"s.q": "/m/_history/pg1/s.q"}
    left = [
        MirrorHistory("s.a", "/h/s.a", [(0, None), (1, B3)], stopped="unchanged TOAST ..."),
        MirrorHistory("s.b", "/h/s.b", [(0, None)]),
    ]
    cut = find_cut("pg1", mirrors(), pos(0x35, 1), histories=left)
    assert cut.histories == {} and cut.histories_left_out == {
        "s.a": "stopped: unchanged TOAST ...",
        "s.b": "nothing landed yet",
    }
    # A history added to the landing at batch 2: it lacks the keys untouched since, never held.
    late = [MirrorHistory("s.b", "/h/s.b", [(0, None), (1, B2), (2, B3)])]
    cut = find_cut("pg1", mirrors(), pos(0x35, 1), histories=late)
    assert cut.histories == {} and cut.histories_left_out["s.b"].startswith("added after its mirror")
    assert "history_sql" in cut.as_dict() and "history_sql" not in find_cut("pg1", mirrors(), pos(0x35, 1)).as_dict()


def test_landing_again_from_a_new_checkpoint():
    """A new landing (lost checkpoint) lands everything again in one batch: the versions
    before it still give the old cuts, the newest cut is after it."""
    again = meta(pos(0x10, 1), pos(0x40, 2), 0, landing="L2")
    ms = [MirrorHistory(m.table, m.path, m.commits + [(m.commits[-1][0] + 1, again)]) for m in mirrors()]
    assert find_cut("pg1", ms, pos(0x35, 1)).versions == {"s.a": 3, "s.b": 2}
    newest = find_cut("pg1", ms, next_event=lambda p: pos(0x41, 1) if p >= pos(0x40, 2) else None)
    assert newest.versions == {"s.a": 5, "s.b": 4}


def test_commit_metadata_round_trip_and_foreign_commits():
    assert meta(pos(1, 1), pos(2, 1), 7)[mc.BATCH] == 7
    assert mc.parse_user_metadata(None) is None
    assert mc.parse_user_metadata("a user's note") is None
    assert mc.parse_user_metadata(json.dumps({"x": 1})) is None
