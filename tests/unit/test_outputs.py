"""Outputs on local directories: round trip, idempotent retry, fencing, public readability."""

import dataclasses
import json
import os
import textwrap

import pytest

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")

from airflow_provider_dblog.core.errors import ConfigurationError, StaleEpochError  # noqa: E402
from airflow_provider_dblog.core.events import (  # noqa: E402
    ChangeEvent,
    Column,
    Op,
    Origin,
    Position,
    TableSchema,
)
from airflow_provider_dblog.core.verify import replay  # noqa: E402
from airflow_provider_dblog.outputs import make_output  # noqa: E402
from airflow_provider_dblog.outputs.callable import CallableOutput  # noqa: E402
from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput, changelog_batch  # noqa: E402
from airflow_provider_dblog.outputs.jsonl import JsonLinesOutput  # noqa: E402


def pos(n, sub=0):
    # PostgreSQL-like coordinate: hex LSN + index, fixed width.
    return Position(f"{n:016X}{0:010d}", sub)


def ev(n, sub=0, *, source="pg1", table="public.t", op=Op.CREATE, key=None, before=None, after=None, **kw):
    key = (n,) if key is None else key
    if after is None and op in (Op.CREATE, Op.UPDATE, Op.READ):
        after = {"id": key[0], "v": f"row {n}"}
    return ChangeEvent(source, table, op, key, before, after, pos(n, sub), **kw)


def rich_events():
    """Every field and value shape the format must carry unchanged."""
    return [
        ev(
            1,
            commit_ts=1_700_000_000_000_001,
            txid="771",
            schema_id="abcd0123abcd0123",
            after={
                "id": 1,
                "name": 'Zoë 中文 🚀 \u2028 "q" \\',
                "price": "12.30",
                "f": 1.5,
                "big": 2**63 - 1,
                "ok": True,
                "none": None,
                "blob": {"$b64": "AAH/"},
                "doc": {"a": [1, {"b": None, "c": "é"}], "n": -0.25},
                "ts": "2024-02-29T23:59:59.999999+00:00",
                "d": "2024-02-29",
            },
        ),
        ev(
            2,
            op=Op.UPDATE,
            before={"id": 2, "v": "old"},
            after={"id": 2, "v": "new"},
            commit_ts=1_700_000_000_000_002,
            txid="772",
        ),
        ev(3, op=Op.DELETE, before={"id": 3, "v": "gone"}, after=None, commit_ts=0, txid="773"),
        ev(3, sub=1, op=Op.DELETE, before=None, after=None, txid=None),  # delete with no image
        ev(4, key=(4, "ü-key"), after={"id": 4, "k2": "ü-key"}, commit_ts=-1_000_000, txid="774"),
        ev(5, sub=7, op=Op.READ, origin=Origin.DUMP, dump_id="dump-42", commit_ts=None),
    ]


def make_delta(path):
    return DeltaChangelogOutput(str(path / "lake"))


def make_jsonl(path):
    return JsonLinesOutput(str(path / "jsonl"))


@pytest.fixture(params=["delta", "jsonl"])
def factory(request, tmp_path):
    mk = make_delta if request.param == "delta" else make_jsonl

    def new():
        out = mk(tmp_path)
        out.open()
        return out

    return new


def scan_sorted(out, source="pg1", table="public.t"):
    return sorted(out.scan(source, table), key=lambda e: e.position)


def delta_version(out, source="pg1"):
    return deltalake.DeltaTable(out.changelog_uri(source)).version()


# -- both file outputs ---------------------------------------------------------------------
def test_round_trip_keeps_every_field(factory):
    out = factory()
    events = rich_events()
    out.write(events[:3], epoch=None)
    out.write(events[3:], epoch=None)
    # Rows of another table and another source must not leak into the scan.
    out.write([ev(9, table="public.other"), ev(9, source="pg2")])
    assert scan_sorted(out) == events
    assert [e.key for e in scan_sorted(out, table="public.other")] == [(9,)]
    assert [e.source_id for e in scan_sorted(out, source="pg2")] == ["pg2"]
    out.close()


def test_retry_of_a_batch_writes_nothing_twice(factory):
    out = factory()
    batch = [ev(i) for i in range(1, 6)]
    out.write(batch)
    out.write(batch)  # the whole batch again: nothing new
    out.write(batch[3:] + [ev(6), ev(7)])  # overlapping retry: only 6 and 7 are new
    assert [e.key[0] for e in scan_sorted(out)] == [1, 2, 3, 4, 5, 6, 7]
    assert out.last_position("pg1") == pos(7)
    assert out.last_position("unknown") is None
    out.close()


def test_last_position_survives_reopen(factory):
    out = factory()
    out.write([ev(1), ev(2), ev(2, sub=1, source="pg2")])
    out.close()
    again = factory()
    assert again.last_position("pg1") == pos(2)
    assert again.last_position("pg2") == pos(2, 1)
    again.write([ev(1), ev(2), ev(3)])  # the engine retrying after a crash
    assert [e.key[0] for e in scan_sorted(again)] == [1, 2, 3]
    again.close()


def test_stale_epoch_refused_and_nothing_written(factory):
    out = factory()
    out.write([ev(1)], epoch=5)
    out.write([ev(2)], epoch=5)  # same leader again: fine
    with pytest.raises(StaleEpochError) as info:
        out.write([ev(3)], epoch=4)
    assert "epoch 4" in str(info.value) and "Fix:" in str(info.value)
    assert [e.key[0] for e in scan_sorted(out)] == [1, 2]
    assert out.last_position("pg1") == pos(2)
    out.write([ev(3)], epoch=6)  # a newer leader takes over
    out.close()
    reopened = factory()  # the epoch is durable, not only in memory
    with pytest.raises(StaleEpochError):
        reopened.write([ev(4)], epoch=5)
    # Leases are per source: another source's lower epoch is not stale.
    reopened.write([ev(4, source="pg2")], epoch=1)
    assert [e.key[0] for e in scan_sorted(reopened)] == [1, 2, 3]
    reopened.close()


def test_schema_registration_is_idempotent(factory):
    schema = TableSchema("public.t", (Column("id", "integer", False), Column("v", "text")), ("id",))
    changed = TableSchema("public.t", schema.columns + (Column("w", "text"),), ("id",))
    out = factory()
    out.register_schema(schema)
    out.register_schema(schema)
    out.close()
    again = factory()
    again.register_schema(schema)
    again.register_schema(changed)
    assert again.read_schemas() == {schema.schema_id(): schema, changed.schema_id(): changed}
    again.close()


def test_many_schemas_register_at_once_and_idempotently(factory):
    schemas = [TableSchema(f"public.t{i}", (Column("id", "integer", False),), ("id",)) for i in range(40)]
    out = factory()
    out.register_schemas(schemas[:10] + schemas[:10])
    out.register_schemas(schemas)
    assert out.read_schemas() == {s.schema_id(): s for s in schemas}
    out.close()


# -- Delta ---------------------------------------------------------------------------------
def test_delta_one_commit_per_write(tmp_path):
    out = make_delta(tmp_path)
    out.open()
    out.write([ev(1), ev(1, source="pg2")], epoch=1)
    v0 = delta_version(out)
    for i in range(1, 4):
        # Several tables of a source in one batch are one commit; each source has its table.
        out.write([ev(10 * i), ev(10 * i, table="public.u"), ev(10 * i, source="pg2")], epoch=1)
        assert delta_version(out) == delta_version(out, "pg2") == v0 + i
    out.write([ev(30)], epoch=1)  # fully skipped retry: no empty commit
    assert delta_version(out) == v0 + 3
    with pytest.raises(StaleEpochError):
        out.write([ev(40)], epoch=0)
    assert delta_version(out) == v0 + 3
    assert out.changelog_uri("pg2") == f"{out.root}/changelogs/pg2" != out.changelog_uri("pg1")
    meta = deltalake.DeltaTable(out.changelog_uri("pg1")).history(limit=1)[0]
    assert meta["dblog.last_position.pg1"] == pos(30).encode() and "dblog.last_position.pg2" not in meta
    assert meta["dblog.epoch"] == 1
    assert [e.source_id for e in scan_sorted(out, "pg2")] == ["pg2"] * 4
    assert not os.path.exists(out.shared_uri)  # a new lake has no shared table
    assert out.last_position("nobody") is None and not os.path.exists(f"{out.root}/changelogs/nobody")
    assert list(out.scan("nobody", "public.t")) == [] and out.full_row_keys("nobody", "public.t") == []
    out.close()


def test_delta_a_lake_of_the_shared_layout_keeps_every_source_in_its_one_table(tmp_path):
    """A lake written before the table per source (``<lake>/changelog``) is read and written
    as it is: new sources too, so that readers find each source by one existence check."""
    from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA

    shared = str(tmp_path / "lake" / "changelog")
    deltalake.DeltaTable.create(shared, CHANGELOG_SCHEMA)
    out = make_delta(tmp_path)
    out.open()
    out.write([ev(1)], epoch=1)
    out.write([ev(2, source="pg2")], epoch=4)
    assert out.changelog_uri("pg1") == out.changelog_uri("pg2") == shared
    assert deltalake.DeltaTable(shared).version() == 2
    assert not os.path.exists(tmp_path / "lake" / "changelogs")
    assert out.changelog_uris() == [shared]
    again = make_delta(tmp_path)
    again.open()
    assert (again.last_position("pg1"), again.last_position("pg2")) == (pos(1), pos(2))
    with pytest.raises(StaleEpochError):
        again.write([ev(3, source="pg2")], epoch=3)
    assert [e.key[0] for e in scan_sorted(again, "pg2")] == [2]


def test_delta_captures_sharing_a_root_never_commit_to_one_table(tmp_path):
    """Two writers of two sources into one root: each commit is its table's next version, so
    none is ever lost to the other writer (each was a race, and a retry, in one shared table)."""
    a, b = make_delta(tmp_path), make_delta(tmp_path)
    a.open()
    b.open()
    for n in range(1, 6):
        a.write([ev(n, source="a")], epoch=1)
        b.write([ev(n, source="b")], epoch=1)
    for source in ("a", "b"):
        versions = [c["version"] for c in deltalake.DeltaTable(a.changelog_uri(source)).history()]
        assert sorted(versions) == list(range(6)), source  # create + 5 appends, nobody else's
    assert a.changelog_uris() == [f"{a.root}/changelogs/a", f"{a.root}/changelogs/b"]
    assert [e.key[0] for e in scan_sorted(b, "a")] == [1, 2, 3, 4, 5]


def test_delta_registers_many_schemas_in_one_commit(tmp_path):
    """A capture of 1,000 tables registers 1,000 schemas before its first batch: one commit,
    not one each (that took 90 s, bench/many_tables.py)."""
    out = make_delta(tmp_path)
    out.open()
    versions = lambda: deltalake.DeltaTable(out.schemas_uri).version()  # noqa: E731
    v0 = versions()
    out.register_schemas([TableSchema(f"public.t{i}", (Column("id", "integer", False),), ("id",)) for i in range(50)])
    assert versions() == v0 + 1
    out.close()


def test_delta_deposed_leader_is_fenced_by_a_newer_commit(tmp_path):
    old = make_delta(tmp_path)
    old.open()
    old.write([ev(1)], epoch=1)
    new = make_delta(tmp_path)
    new.open()
    new.write([ev(2)], epoch=2)
    # The old leader's cache still says epoch 1; it must look at the table before writing.
    with pytest.raises(StaleEpochError):
        old.write([ev(3)], epoch=1)
    assert [e.key[0] for e in scan_sorted(new)] == [1, 2]


def test_delta_retry_after_unknown_outcome_finds_the_commit(tmp_path):
    # Writer A's commit landed but A never learned it (timeout); A retries the batch.
    # Another instance stands in for "the commit A did not see".
    a = make_delta(tmp_path)
    a.open()
    b = make_delta(tmp_path)
    b.open()
    batch = [ev(1), ev(2)]
    b.write(batch, epoch=1)
    version = delta_version(a)
    a.write(batch, epoch=1)
    assert delta_version(a) == version
    assert a.last_position("pg1") == pos(2)
    assert len(scan_sorted(a)) == 2


def test_delta_reloads_the_table_and_still_sees_every_commit(tmp_path, monkeypatch):
    # Every few commits the output loads the changelog afresh (appends to a long-lived,
    # incrementally updated table object slow down with its commit count). Across reloads it
    # must still fold in foreign commits (here a newer leader's epoch) and skip retries.
    monkeypatch.setattr(DeltaChangelogOutput, "reload_every", 3)
    a = make_delta(tmp_path)
    a.open()
    b = make_delta(tmp_path)
    b.open()
    for n in range(1, 8):
        a.write([ev(n)], epoch=1)
    a.write([ev(6), ev(7)], epoch=1)  # a retry of durable events writes nothing
    b.write([ev(8)], epoch=2)
    for n in range(9, 12):
        b.write([ev(n)], epoch=2)
    assert a._tables["pg1"].loaded_version > 0  # it did reload
    with pytest.raises(StaleEpochError):
        a.write([ev(20)], epoch=1)
    assert [e.key[0] for e in scan_sorted(a)] == list(range(1, 12))
    assert a.last_position("pg1") == pos(11)


def test_delta_open_finds_positions_behind_foreign_commits(tmp_path):
    out = make_delta(tmp_path)
    out.open()
    out.write([ev(1, source="pg1")], epoch=1)
    other = make_delta(tmp_path)  # the source's next leader
    other.open()
    other.write([ev(5, source="pg1")], epoch=2)
    other.write([ev(6, source="pg1")], epoch=2)
    again = make_delta(tmp_path)
    again.open()
    again.write([ev(7, source="pg1")], epoch=3)  # catches up: its cumulative metadata holds all
    latest = deltalake.DeltaTable(out.changelog_uri("pg1")).history(limit=1)[0]
    assert latest["dblog.last_position.pg1"] == pos(7).encode() and latest["dblog.epoch.pg1"] == 3
    assert latest["dblog.seen_version"] == latest["version"] - 1
    # More commits without DBLog metadata than one history page (e.g. a user's OPTIMIZE or
    # a foreign append) must not hide the positions from a reopening writer.
    for i in range(40):
        deltalake.write_deltalake(
            out.changelog_uri("pg1"), changelog_batch([ev(100 + i, source="x")], None), mode="append"
        )
    fresh = make_delta(tmp_path)
    fresh.open()
    assert fresh.last_position("pg1") == pos(7)
    with pytest.raises(StaleEpochError):
        fresh.write([ev(8, source="pg1")], epoch=2)
    assert fresh.last_position("x") is None  # no table of its own


def test_delta_compact_keeps_data_equal(tmp_path):
    out = make_delta(tmp_path)
    out.open()
    for i in range(1, 21):
        out.write([ev(i), ev(i, table="public.u")], epoch=3)
    before_t, before_u = scan_sorted(out), scan_sorted(out, table="public.u")
    files_before = len(deltalake.DeltaTable(out.changelog_uri("pg1")).file_uris())
    metrics = out.compact()
    assert metrics["numFilesRemoved"] == files_before == 20
    assert len(deltalake.DeltaTable(out.changelog_uri("pg1")).file_uris()) < files_before
    assert scan_sorted(out) == before_t
    assert scan_sorted(out, table="public.u") == before_u
    out.write([ev(20)], epoch=3)  # still idempotent after the OPTIMIZE commit
    out.close()
    again = make_delta(tmp_path)
    again.open()
    assert again.last_position("pg1") == pos(20)
    with pytest.raises(StaleEpochError):
        again.write([ev(21)], epoch=2)
    assert len(scan_sorted(again)) == 20


def test_delta_changelog_is_readable_by_other_engines(tmp_path):
    out = make_delta(tmp_path)
    out.open()
    # Positions whose true order differs from the order they are written in, with subs
    # (9 < 10 < 100) and coordinates (0x9 < 0xA < 0x10) that naive text would misorder.
    tricky = [pos(0x9, 10), pos(0x9, 9), pos(0x10, 0), pos(0xA, 0), pos(0x1_0000_0000, 0), pos(0x9, 100)]
    events = [
        ChangeEvent(
            "pg1", "public.t", Op.CREATE, (i,), None, {"id": i, "s": "é"}, p, commit_ts=1_700_000_000_000_000 + i
        )
        for i, p in enumerate(tricky)
    ]
    out.write(events, epoch=2)  # one batch, out of order (nothing is skipped on a fresh table)
    out.close()
    want = [p.encode() for p in sorted(tricky)]  # Position's own (coord, sub) order
    dt = deltalake.DeltaTable(out.changelog_uri("pg1"))

    duckdb = pytest.importorskip("duckdb")
    dataset = dt.to_pyarrow_dataset()
    con = duckdb.connect()
    con.register("changelog", dataset)
    rows = con.execute(
        'SELECT position, "table", op, json_extract_string("after", \'$.s\'), '
        "typeof(commit_ts), CAST(json_extract(key, '$[0]') AS INTEGER), epoch "
        "FROM changelog ORDER BY position"
    ).fetchall()
    assert [r[0] for r in rows] == want
    assert {r[1] for r in rows} == {"public.t"} and {r[2] for r in rows} == {"c"}
    assert {r[3] for r in rows} == {"é"}
    assert rows[0][4] == "TIMESTAMP WITH TIME ZONE"
    assert [r[5] for r in rows] == [tricky.index(p) for p in sorted(tricky)]
    assert {r[6] for r in rows} == {2}

    frame = dt.to_pandas()
    assert str(frame["commit_ts"].dtype) == "datetime64[us, UTC]"
    assert frame.sort_values("position")["position"].tolist() == want
    assert frame["written_at"].notna().all()

    pl = pytest.importorskip("polars")
    lazy = pl.read_delta(out.changelog_uri("pg1")).sort("position")
    assert lazy["position"].to_list() == want
    assert str(lazy.schema["commit_ts"]) == "Datetime(time_unit='us', time_zone='UTC')"
    assert lazy["after"].str.json_path_match("$.s").to_list() == ["é"] * len(want)


def truncate_history():
    """Rows before a TRUNCATE (one updated after it), the TRUNCATE, rows after it."""
    return [
        ev(1),
        ev(2),
        ev(3, op=Op.TRUNCATE, key=(), commit_ts=1_700_000_000_000_003, txid="773", schema_id="abcd0123abcd0123"),
        ev(4, key=(2,), after={"id": 2, "v": "after"}),
        ev(5),
        ev(6, op=Op.DELETE, key=(5,), before=None, after=None),
        ev(7, key=(7,), op=Op.READ, origin=Origin.DUMP, dump_id="d1"),
    ]


def test_truncate_round_trips_and_replays_to_the_rows_written_after_it(factory):
    out = factory()
    events = truncate_history()
    out.write(events, epoch=None)
    got = scan_sorted(out)
    assert got == events
    t = got[2]
    assert t.op is Op.TRUNCATE and t.key == () and t.before is None and t.after is None
    assert replay(got) == {(2,): {"id": 2, "v": "after"}, (7,): {"id": 7, "v": "row 7"}}


def test_the_documented_consumer_queries_apply_a_truncate(tmp_path):
    """docs/changelog-format.md, "Reading it": DuckDB, pandas and Polars give the replay
    (they skip a dump chunk's range row, op k, which covers no key that is gone here)."""
    out = make_delta(tmp_path)
    out.open()
    covers = {"from": [6], "to": None, "since": pos(7).encode()}
    chunk_range = ev(7, op=Op.RANGE, key=(), after=covers, origin=Origin.DUMP, dump_id="d1")
    history = truncate_history()
    history[-1] = dataclasses.replace(history[-1], position=pos(7, 1))
    out.write(history[:-1] + [chunk_range, history[-1], ev(8)], epoch=None)
    out.close()
    dt = deltalake.DeltaTable(out.changelog_uri("pg1"))

    duckdb = pytest.importorskip("duckdb")
    changelog = dt.to_pyarrow_dataset()  # noqa: F841 - read by name in the query
    rows = duckdb.sql("""
        SELECT CAST(after->>'$.id' AS INTEGER) AS id, source_id, after->>'$.v' AS v
        FROM (
            SELECT *, max(CASE WHEN op = 't' THEN position END) OVER (PARTITION BY source_id) AS truncated_at
            FROM changelog WHERE "table" = 'public.t'
        )
        WHERE op NOT IN ('t', 'k')
        QUALIFY row_number() OVER (PARTITION BY source_id, key ORDER BY position DESC) = 1
            AND op <> 'd' AND (truncated_at IS NULL OR position > truncated_at)
    """).fetchall()
    assert sorted(rows) == [(2, "pg1", "after"), (7, "pg1", "row 7"), (8, "pg1", "row 8")]

    df = dt.to_pandas(filters=[("table", "=", "public.t")])
    cut = df[df.op == "t"].groupby("source_id")["position"].max()
    df = df[~df.op.isin(["t", "k"])].sort_values("position").drop_duplicates(["source_id", "key"], keep="last")
    df = df[df.position > df.source_id.map(cut).fillna("")]
    assert sorted(json.loads(a)["v"] for a in df.loc[df.op != "d", "after"]) == ["after", "row 7", "row 8"]

    pl = pytest.importorskip("polars")
    cur = (
        pl.scan_delta(out.changelog_uri("pg1"))
        .filter(pl.col("table") == "public.t")
        .with_columns(pl.col("position").filter(pl.col("op") == "t").max().over("source_id").alias("truncated_at"))
        .filter(~pl.col("op").is_in(["t", "k"]))
        .sort("position")
        .group_by("source_id", "key")
        .last()
        .filter(
            (pl.col("op") != "d") & (pl.col("truncated_at").is_null() | (pl.col("position") > pl.col("truncated_at")))
        )
        .with_columns(pl.col("after").str.json_path_match("$.v").alias("v"))
        .collect()
    )
    assert sorted(cur["v"].to_list()) == ["after", "row 7", "row 8"]


def test_callable_output_passes_a_truncate_on():
    got = []
    out = CallableOutput(got.extend)
    events = truncate_history()
    out.write(events, epoch=None)
    assert got == events and got[2].op is Op.TRUNCATE
    assert replay(got) == {(2,): {"id": 2, "v": "after"}, (7,): {"id": 7, "v": "row 7"}}


# -- JSON lines ----------------------------------------------------------------------------
def test_jsonl_torn_last_line_is_truncated_on_open(tmp_path):
    out = make_jsonl(tmp_path)
    out.open()
    out.write([ev(1), ev(2)])
    out.close()
    path = out.changelog_path
    good_size = os.path.getsize(path)
    line = json.dumps({"source_id": "pg1", "table": "public.t", "position": pos(3).encode()})
    with open(path, "ab") as f:
        f.write(line[: len(line) // 2].encode())  # crash in the middle of a line
    again = make_jsonl(tmp_path)
    again.open()
    assert os.path.getsize(path) == good_size
    assert again.last_position("pg1") == pos(2)
    again.write([ev(2), ev(3)])
    assert [e.key[0] for e in scan_sorted(again)] == [1, 2, 3]
    with open(path, "rb") as f:
        assert all(json.loads(raw)["source_id"] == "pg1" for raw in f)
    again.close()


def test_jsonl_damage_before_the_tail_is_an_error(tmp_path):
    out = make_jsonl(tmp_path)
    out.open()
    out.write([ev(1)])
    out.close()
    with open(out.changelog_path, "ab") as f:
        f.write(b"{not json\n")
    good = make_jsonl(tmp_path)
    good.open()
    good.write([ev(2)])  # truncated the bad tail, then appended
    good.close()
    with open(out.changelog_path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data.replace(b'"op":"c"', b'"op":"c', 1))  # corrupt the first of two lines
    with pytest.raises(ConfigurationError, match="line 1"):
        make_jsonl(tmp_path).open()


def test_jsonl_lines_are_plain_json(tmp_path):
    out = make_jsonl(tmp_path)
    out.open()
    out.write([rich_events()[0]], epoch=7)
    with open(out.changelog_path, encoding="utf-8") as f:
        rec = json.loads(f.readline())
    assert list(rec) == [f.name for f in deltalake_schema_fields()]
    assert rec["key"] == [1] and rec["after"]["blob"] == {"$b64": "AAH/"}
    assert rec["commit_ts"] == "2023-11-14T22:13:20.000001+00:00"
    assert rec["epoch"] == 7 and rec["written_at"].endswith("+00:00")
    assert "Zoë" in open(out.changelog_path, encoding="utf-8").read()  # not \u-escaped


def deltalake_schema_fields():
    from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA

    return list(CHANGELOG_SCHEMA)


# -- callable ------------------------------------------------------------------------------
def test_callable_output_gets_batches_once(tmp_path, monkeypatch):
    (tmp_path / "my_sink.py").write_text(
        textwrap.dedent("""
        BATCHES = []
        def collect(events):
            BATCHES.append(list(events))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = make_output("python:my_sink:collect")
    assert isinstance(out, CallableOutput)
    out.open()
    out.write([ev(1), ev(2)], epoch=1)
    out.write([ev(2), ev(3)], epoch=1)
    out.write([ev(3)], epoch=1)
    import my_sink

    assert [[e.key[0] for e in b] for b in my_sink.BATCHES] == [[1, 2], [3]]
    assert out.last_position("pg1") == pos(3)
    with pytest.raises(StaleEpochError):
        out.write([ev(4)], epoch=0)
    assert len(my_sink.BATCHES) == 2


def test_callable_failure_does_not_advance_position():
    calls = []

    def flaky(events):
        calls.append(len(events))
        if len(calls) == 1:
            raise RuntimeError("sink down")

    out = CallableOutput(flaky)
    with pytest.raises(RuntimeError):
        out.write([ev(1)])
    assert out.last_position("pg1") is None
    out.write([ev(1)])
    assert calls == [1, 1]


@pytest.mark.parametrize("path", ["nomodule_xyz:fn", "json:no_such_fn", "json", "json:__doc__"])
def test_callable_bad_paths_name_the_fix(path):
    with pytest.raises(ConfigurationError, match="module:function"):
        CallableOutput(path)


# -- factory -------------------------------------------------------------------------------
def test_make_output_forms(tmp_path):
    assert isinstance(make_output(f"delta://{tmp_path}/a"), DeltaChangelogOutput)
    assert make_output(f"delta://{tmp_path}/a").root == f"{tmp_path}/a"
    assert make_output(str(tmp_path / "b")).root == str(tmp_path / "b")
    assert make_output("rel/lake").root == os.path.abspath("rel/lake")
    assert make_output("delta://rel/lake").root == os.path.abspath("rel/lake")
    assert make_output("s3://bucket/prefix").shared_uri == "s3://bucket/prefix/changelog"
    j = make_output(f"jsonl://{tmp_path}/j")
    assert isinstance(j, JsonLinesOutput) and j.directory == f"{tmp_path}/j"
    for bad in ("kafka://broker/topic", "ftp:x", "", "jsonl://"):
        with pytest.raises(ConfigurationError) as info:
            make_output(bad)
        assert "delta:///" in info.value.fix and "python:" in info.value.fix


def test_delta_refuses_a_foreign_table(tmp_path):
    deltalake.write_deltalake(str(tmp_path / "lake" / "changelog"), pa.table({"x": [1]}))
    with pytest.raises(ConfigurationError, match="not a DBLog table"):
        make_delta(tmp_path).open()


def test_delta_refuses_a_foreign_table_of_a_source(tmp_path):
    deltalake.write_deltalake(str(tmp_path / "lake" / "changelogs" / "pg1"), pa.table({"x": [1]}))
    out = make_delta(tmp_path)
    out.open()
    with pytest.raises(ConfigurationError, match="not a DBLog table"):
        out.write([ev(1)], epoch=1)


def test_delta_scan_of_a_missing_output_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigurationError, match="no DBLog output"):
        list(make_delta(tmp_path).scan("pg1", "public.t"))


@pytest.fixture
def immutable():
    """Make a directory refuse writes, root included (chattr +i: the capture's tests run as
    root, for whom a read-only mode changes nothing)."""
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    made: list[str] = []

    def make(path):
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
        made.append(str(path))

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", path], check=True)


@pytest.mark.parametrize("part", ["", "_delta_log"])
def test_delta_storage_refusing_writes_is_a_dblog_error_naming_it(tmp_path, immutable, part):
    from airflow_provider_dblog.core.errors import OutputStorageError

    out = make_delta(tmp_path)
    out.open()
    out.write([ev(1)], epoch=1)
    immutable(os.path.join(out.changelog_uri("pg1"), part))
    with pytest.raises(OutputStorageError) as info:
        out.write([ev(2)], epoch=1)
    assert f"storage at {out.root} is not writable (Operation not permitted)" in info.value.cause
    assert f"make {out.root} writable" in info.value.fix
    assert out.last_position("pg1") == pos(1)  # nothing taken for written


@pytest.mark.parametrize(
    "code,needle",
    [(28, "is full (No space left on device)"), (30, "is not writable (Read-only file system)"), (2, None)],
)
def test_storage_errors_are_told_by_errno_or_delta_rs_os_error(code, needle):
    from airflow_provider_dblog.outputs._common import storage_error

    for exc in (OSError(code, os.strerror(code)), Exception(f"Generic LocalFileSystem error: x (os error {code})")):
        found = storage_error(exc, "/lake")
        if needle is None:
            assert found is None  # not the storage refusing writes: raised as it is
        else:
            assert found is not None and f"the changelog's storage at /lake {needle}." in found.cause


@pytest.mark.parametrize(
    "url",
    [
        "kafka://user:s3cr3t@broker:9092",
        "s3x://KEY:s3cr3t@bucket/x",
        "delta://user:s3cr3t@host/lake",
        "s3://KEY:s3cr3t@bucket/lake",
        "user:s3cr3t@host/lake",
    ],
)
def test_an_output_url_with_credentials_is_refused_without_repeating_them(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        make_output(url)
    assert "carries credentials" in str(info.value) and "s3cr3t" not in str(info.value)
    assert list(tmp_path.iterdir()) == []  # no directory named after the password
    with pytest.raises(ConfigurationError, match="carries credentials"):
        DeltaChangelogOutput(url)
