"""Range repair (issue 11, part 6): a dump chunk's range event (op k) removes the keys of its
range that the chunk does not hold and whose last event is older than its LW position."""

from __future__ import annotations

from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position
from airflow_provider_dblog.core.key_types import orders_like_python
from airflow_provider_dblog.core.verify import replay


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
