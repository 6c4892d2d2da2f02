import random

import pytest

from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Position, TableSchema, split_key_update


def test_position_encoding_sorts_like_positions():
    rng = random.Random(7)
    ps = [Position(f"{rng.randrange(16**6):06X}{rng.randrange(10**4):04d}", rng.randrange(10**5)) for _ in range(2000)]
    assert sorted(ps, key=lambda p: p.encode()) == sorted(ps)
    for p in ps[:50]:
        assert Position.parse(p.encode()) == p
        assert len(p.encode()) == len(ps[0].encode())  # fixed width


def test_dump_rows_at_hw_sort_between_hw_and_next_event():
    hw, nxt = Position("00000A"), Position("00000B")
    rows = [hw.with_sub(i) for i in (1, 2, 999_999)]
    assert all(hw.encode() < r.encode() < nxt.encode() for r in rows)


@pytest.mark.parametrize("bad", ["", "abc", "x.12", "a.b.000000001x"])
def test_position_parse_rejects_garbage(bad):
    with pytest.raises(ValueError):
        Position.parse(bad)


def test_position_coordinate_cannot_contain_separator():
    with pytest.raises(ValueError):
        Position("a.b")


def test_schema_id_changes_with_schema():
    a = TableSchema("s.t", (Column("id", "integer", False), Column("v", "text")), ("id",))
    b = TableSchema("s.t", (Column("id", "integer", False), Column("v", "text"), Column("w", "text")), ("id",))
    assert a.schema_id() == TableSchema.from_json(a.to_json()).schema_id()
    assert a.schema_id() != b.schema_id()


def test_primary_key_update_splits_into_delete_and_create():
    e = ChangeEvent("s", "s.t", Op.UPDATE, (2,), {"id": 1, "v": "a"}, {"id": 2, "v": "a"}, Position("0001"))
    d, c = split_key_update(e, (1,))
    assert (d.op, d.key, d.after, d.position.sub) == (Op.DELETE, (1,), None, 0)
    assert (c.op, c.key, c.before, c.position.sub) == (Op.CREATE, (2,), None, 1)
    assert d.position < c.position
