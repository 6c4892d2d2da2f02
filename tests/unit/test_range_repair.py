"""Range repair (issue 11, part 6): a dump chunk's range event (op k) removes the keys of its
range that the chunk does not hold and whose last event is older than its LW position."""

from __future__ import annotations

from airflow_provider_dblog.core.dumps import TableProgress
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema
from airflow_provider_dblog.core.key_types import orders_like_python
from airflow_provider_dblog.core.range_events import OpenChunk, range_events
from airflow_provider_dblog.core.scheduler import ChunkPlan
from airflow_provider_dblog.core.verify import replay
from airflow_provider_dblog.core.watermark import ChunkDone


def pos(n: int, sub: int = 0) -> Position:
    return Position(f"{n:08d}", sub)


def log(op: Op, key: int, at: int, v: str = "x") -> ChangeEvent:
    after = None if op is Op.DELETE else {"id": key, "v": v}
    return ChangeEvent("s", "t.a", op, (key,), None, after, pos(at))


def rng(low, high, since: int, hw: int) -> ChangeEvent:
    body = {"from": [low] if low is not None else None, "to": [high] if high is not None else None}
    body["since"] = pos(since).encode()
    return ChangeEvent("s", "t.a", Op.RANGE, (), None, body, pos(hw), origin=Origin.DUMP, dump_id="d")


def dumped(key: int, hw: int, sub: int, v: str = "x") -> ChangeEvent:
    return ChangeEvent("s", "t.a", Op.READ, (key,), None, {"id": key, "v": v}, pos(hw, sub), origin=Origin.DUMP)


def test_keys_deleted_while_nothing_was_captured_disappear():
    # Keys 1..5 captured; 2 and 4 were deleted during a gap; the chunk (0, 5] holds 1, 3, 5.
    history = [log(Op.CREATE, k, k) for k in range(1, 6)]
    chunk = [rng(None, 5, since=10, hw=12), dumped(1, 12, 1), dumped(3, 12, 2), dumped(5, 12, 3)]
    assert set(replay(history + chunk)) == {(1,), (3,), (5,)}
    assert set(replay(chunk[::-1] + history)) == {(1,), (3,), (5,)}  # any order


def test_a_key_changed_inside_the_window_survives():
    # 7 inserted between LW (10) and HW (12): not in the chunk, but the log's business.
    history = [log(Op.CREATE, k, k) for k in (1, 2)] + [log(Op.CREATE, 7, 11)]
    chunk = [rng(None, 9, since=10, hw=12), dumped(1, 12, 1)]
    assert set(replay(history + chunk)) == {(1,), (7,)}
    # Changed after HW too: a later log event always wins.
    assert set(replay(history + chunk + [log(Op.CREATE, 2, 13)])) == {(1,), (2,), (7,)}


def test_keys_outside_the_range_are_untouched():
    history = [log(Op.CREATE, k, k) for k in (1, 3, 5, 9)]
    chunk = [rng(3, 5, since=10, hw=12), dumped(5, 12, 1)]  # (3, 5]: from is exclusive
    assert set(replay(history + chunk)) == {(1,), (3,), (5,), (9,)}
    history.append(log(Op.CREATE, 4, 4))
    assert set(replay(history + chunk)) == {(1,), (3,), (5,), (9,)}


def test_an_empty_last_chunk_clears_its_range():
    history = [log(Op.CREATE, k, k) for k in (1, 2, 3)]
    assert set(replay(history + [rng(1, 3, since=10, hw=12)])) == {(1,)}


def test_range_repair_only_for_integer_keys():
    assert orders_like_python([Column("id", "bigint unsigned"), Column("n", "smallint")])
    assert not orders_like_python([Column("id", "integer"), Column("name", "varchar(20)")])
    assert not orders_like_python([Column("d", "numeric(10,2)")])
    assert not orders_like_python([])


def listed(keys, since: int, hw: int) -> ChangeEvent:
    body = {"keys": [[k] for k in keys], "since": pos(since).encode()}
    return ChangeEvent("s", "t.a", Op.RANGE, (), None, body, pos(hw), origin=Origin.DUMP, dump_id="d")


def test_a_key_list_chunk_deletes_listed_keys_the_source_no_longer_has():
    # 1..4 captured; 2 and 3 deleted in a gap; the repair lists 1, 2, 3; 3 came back inside
    # the window (a log event after since); 4 is not listed and stays.
    history = [log(Op.CREATE, k, k) for k in range(1, 5)] + [log(Op.CREATE, 3, 11, "back")]
    chunk = [listed([1, 2, 3], since=10, hw=12), dumped(1, 12, 1)]
    assert set(replay(history + chunk)) == {(1,), (3,), (4,)}
    assert replay(history + chunk)[(3,)]["v"] == "back"


def last_chunk(low, upper, bound_at: int, since: int, hw: int, text_key: bool = False) -> list[ChangeEvent]:
    """The range events of a table dump's last chunk, which read (low, upper] between
    ``since`` (its LW) and ``hw``; the dump fixed its upper bound at log position ``bound_at``."""
    schema = TableSchema("t.a", (Column("id", "text" if text_key else "integer", False), Column("v", "text")), ("id",))
    last_key, upper_key = ((k,) if k is not None else None for k in (low, upper))
    start = TableProgress(last_key, 0, 1, False, 0, upper_key, pos(bound_at, 10**9 - 1).encode())
    plan = ChunkPlan("d", "t.a", start, 10)
    done = TableProgress(start.last_key, 0, 2, True, 0, start.upper_key, start.bound_at)
    chunk = OpenChunk(plan, done, schema)
    return range_events("s", ChunkDone(pos(hw), [], 0, chunk, since=pos(since)), chunk)


def test_the_last_chunk_keeps_its_own_since_up_to_the_bound():
    # The capture had read up to 5 when the dump fixed its bound (9); 6 and 7 were changed
    # after that (the capture behind), then deleted while nothing was captured; the last
    # chunk, (3, 9] from LW 10, finds 8 only. A range (3, None] since the bound's position
    # would keep 6 and 7; the chunk's own range since its LW removes them.
    history = [log(Op.CREATE, k, k) for k in range(1, 10)] + [log(Op.UPDATE, 6, 7), log(Op.UPDATE, 7, 8)]
    ks = last_chunk(3, 9, bound_at=5, since=10, hw=12)
    assert [(k.after["from"], k.after["to"], k.position) for k in ks] == [([3], [9], pos(12)), ([9], None, pos(12, 1))]
    assert [k.after["since"] for k in ks] == [pos(10).encode(), pos(5, 10**9 - 1).encode()]
    chunk = [*ks, dumped(8, 12, 2)]
    assert set(replay(history + chunk)) == {(1,), (2,), (3,), (8,)}
    # Above the bound: only keys older than the bound's position go (10 came after it).
    assert set(replay(history + [log(Op.CREATE, 10, 6)] + chunk)) == {(1,), (2,), (3,), (8,), (10,)}


def test_a_last_chunk_with_nothing_left_below_the_bound_states_one_range():
    [k] = last_chunk(9, 9, bound_at=5, since=10, hw=12)
    assert (k.after["from"], k.after["to"], k.position.sub) == ([9], None, 0)
    [k] = last_chunk(None, None, bound_at=5, since=10, hw=12)  # the table was empty at the bound
    assert (k.after["from"], k.after["to"], k.after["since"]) == (None, None, pos(5, 10**9 - 1).encode())


def test_a_text_keyed_last_chunk_covers_the_whole_table_since_the_bound():
    [k] = last_chunk(None, None, bound_at=5, since=10, hw=12, text_key=True)
    assert (k.after["from"], k.after["to"], k.after["since"]) == (None, None, pos(5, 10**9 - 1).encode())
