"""core/dump_requests.py: recording dump requests, controlling dumps, the status report.

A fake source stands in for the database (only its catalog is used); the state store is the
real local one.
"""

from __future__ import annotations

import json
import time

import pytest

from airflow_provider_dblog.core.dump_requests import (
    control_dump,
    dump_status,
    parse_tables,
    read_status,
    request_dump,
    status_key,
)
from airflow_provider_dblog.core.dumps import DumpControl, DumpStatus, TableProgress
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import Column, Position, TableSchema

SCHEMAS = {
    "s.one": TableSchema("s.one", (Column("id", "int"), Column("v", "text")), ("id",)),
    "s.two": TableSchema("s.two", (Column("a", "int"), Column("b", "text")), ("a", "b")),
}


class FakeSource:
    source_id = "src"

    def __init__(self):
        self.opened = self.closed = 0

    def open(self):
        self.opened += 1

    def close(self):
        self.closed += 1

    def tables(self):
        return list(SCHEMAS)

    def table_schema(self, table):
        if table not in SCHEMAS:
            raise RequestError(f"unknown table {table}.", "name a captured table.")
        return SCHEMAS[table]


class HeldBy:
    """A lease whose holder is fixed (only ``leader()`` is asked)."""

    def __init__(self, leader):
        self._leader = leader

    def leader(self):
        return self._leader


def test_status_key_is_the_engines_key():
    assert status_key("shop") == "status/shop"


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, None),
        ("", None),
        ("all", None),
        (" ALL ", None),
        ("*", None),
        ([], None),
        ("s.one", ["s.one"]),
        (" s.one ", ["s.one"]),
        (["s.one", "s.two"], ["s.one", "s.two"]),
        (("s.two",), ["s.two"]),
    ],
)
def test_parse_tables(value, expected):
    assert parse_tables(value) == expected


def test_request_every_table(state):
    src = FakeSource()
    spec = request_dump(src, state, "all", chunk_size=7, delay_ms=3)
    assert spec.tables is None and spec.keys is None and spec.source_id == "src"
    dump = state.get_dump(spec.dump_id)
    assert dump.control == DumpControl(chunk_size=7, delay_ms=3)
    assert dump.status is DumpStatus.PENDING
    assert src.opened == src.closed == 1


def test_request_keys_as_json_text_and_as_values(state):
    text = request_dump(FakeSource(), state, ["s.two"], ['[1, "x"]', '{"b": "y", "a": 2}'], keys_as_json=True)
    assert text.keys == ((1, "x"), (2, "y"))
    values = request_dump(FakeSource(), state, "s.two", [[1, "x"], {"b": "y", "a": 2}])
    assert values.keys == text.keys and values.tables == ("s.two",)
    one = request_dump(FakeSource(), state, "s.one", [7, 5])  # decoded values: an int key is an int
    assert one.keys == ((7,), (5,))
    assert [d.dump_id for d in state.list_dumps("src")] == [text.dump_id, values.dump_id, one.dump_id]


@pytest.mark.parametrize(
    "tables,keys,kwargs,needle",
    [
        (["s.nope"], None, {}, "unknown table s.nope"),
        (["s.one", "s.two"], [1], {}, "exactly one table"),
        (None, [1], {}, "exactly one table"),
        (["s.one"], [], {}, "key list is empty"),
        (["s.two"], ["[1]"], {"keys_as_json": True}, r"has 1 value\(s\)"),
        (["s.one"], ["{oops"], {"keys_as_json": True}, "not valid JSON"),
        (["s.one"], None, {"chunk_size": 0}, "chunk size 0"),
        (["s.one"], None, {"delay_ms": -1}, "negative"),
        (["s.one"], ["abc"], {}, r'"abc" for column id \(int\) of table s.one'),  # a decoded string
        (["s.one"], ['"7"'], {"keys_as_json": True}, r'"7" for column id \(int\)'),  # a quoted number
        (["s.two"], ['{"a": 1, "c": "x"}'], {"keys_as_json": True}, r"unknown \['c'\]"),
    ],
)
def test_invalid_requests_record_nothing(state, tables, keys, kwargs, needle):
    src = FakeSource()
    with pytest.raises(RequestError, match=needle):
        request_dump(src, state, tables, keys, **kwargs)
    assert state.list_dumps() == []
    assert src.opened == src.closed  # never left open


def test_control_actions(state):
    spec = request_dump(FakeSource(), state, "s.one", chunk_size=10, delay_ms=5)
    assert control_dump(state, spec.dump_id, "pause") == DumpControl(True, False, 10, 5)
    assert control_dump(state, spec.dump_id, "throttle", chunk_size=20) == DumpControl(True, False, 20, 5)
    assert control_dump(state, spec.dump_id, "throttle", delay_ms=0) == DumpControl(True, False, 20, 0)
    assert control_dump(state, spec.dump_id, "resume") == DumpControl(False, False, 20, 0)
    assert control_dump(state, spec.dump_id, "cancel") == DumpControl(False, True, 20, 0)
    assert state.get_dump(spec.dump_id).control == DumpControl(False, True, 20, 0)
    with pytest.raises(RequestError, match="chunk size"):
        control_dump(state, spec.dump_id, "throttle", chunk_size=0)
    with pytest.raises(ValueError):
        control_dump(state, spec.dump_id, "explode")
    with pytest.raises(RequestError):
        control_dump(state, "no-such-dump", "pause")


def test_status_without_a_capture(state):
    spec = request_dump(FakeSource(), state, "s.one")
    st = read_status(state, "src")
    assert st["capture"] is None and st["checkpoint"] is None and st["leader"] is None
    assert st["warnings"] == [] and [d["dump_id"] for d in st["dumps"]] == [spec.dump_id]
    assert read_status(state, None)["dumps"][0]["dump_id"] == spec.dump_id  # no source: every dump


def test_status_merges_the_capture_report(state):
    spec = request_dump(FakeSource(), state, "s.one")
    state.save_progress(spec.dump_id, "s.one", TableProgress((10,), 10, 1))
    state.set_checkpoint("src", Position("0000000001", 3))
    state.put_value(
        status_key("src"),
        json.dumps(
            {
                "updated_at": time.time() - 2,
                "pid": 1,
                "position": "x",
                "events_per_s": 5,
                "lag_bytes": 7,
                "lag_seconds": 0.5,
                "warnings": ["w"],
                "estimates": {"s.one": 40},
                "dumps": {spec.dump_id: {"rows_per_s": 3.0, "eta_seconds": 10}},
            }
        ),
    )
    leader = {"identity": "a", "epoch": 3}
    st = read_status(state, "src", HeldBy(leader))
    assert st["leader"] == leader and st["lag_bytes"] == 7 and st["warnings"] == ["w"]
    assert st["checkpoint"] == Position("0000000001", 3).encode()
    assert st["capture"]["age_s"] >= 2
    (d,) = st["dumps"]
    assert d["eta_seconds"] == 10 and d["progress"]["s.one"]["percent"] == 25.0
    one = dump_status(state, spec.dump_id)
    assert one["progress"]["s.one"]["estimated_rows"] == 40 and "eta_seconds" not in one
    assert one["checked_at"] >= one["updated_at"]
    state.put_value(status_key("src"), "")  # an emptied report reads as none
    assert read_status(state, "src")["capture"] is None


def test_a_dumps_rows_are_its_stored_progress_whatever_the_report_says(state):
    """Issue 39 part 5: a dump done after the capture's last report showed that report's
    rows (0) beside its own progress (2,000). The stored record is the one source of a
    dump's rows, status and progress; the report adds only a running dump's rates."""
    done = request_dump(FakeSource(), state, "s.one")
    state.save_progress(done.dump_id, "s.one", TableProgress((2000,), 2000, 2, done=True))
    state.set_status(done.dump_id, DumpStatus.DONE)
    running = request_dump(FakeSource(), state, "s.two")
    state.save_progress(running.dump_id, "s.two", TableProgress((1, "a"), 10, 1))
    live = {"rows": 0, "rows_per_s": 50.0, "eta_seconds": 3, "paused": True, "waiting": {"why": "turn"}}
    state.put_value(
        status_key("src"),
        json.dumps(
            {
                "updated_at": time.time(),
                "pid": 1,
                "leader": {"identity": "a", "epoch": 1},
                "dumps": {done.dump_id: live, running.dump_id: live},
            }
        ),
    )
    dumps = {d["dump_id"]: d for d in read_status(state, "src", HeldBy({"identity": "a", "epoch": 1}))["dumps"]}
    d = dumps[done.dump_id]
    assert d["status"] == "done" and d["rows"] == 2000 == d["progress"]["s.one"]["rows"]
    assert "rows_per_s" not in d and "eta_seconds" not in d and "waiting" not in d
    r = dumps[running.dump_id]
    assert r["rows"] == 10 and r["paused"] is False  # the stored progress and control
    assert r["rows_per_s"] == 50.0 and r["eta_seconds"] == 3 and r["waiting"] == {"why": "turn"}
    # the capture that wrote the report stopped: no live rates for any dump
    r = {d["dump_id"]: d for d in read_status(state, "src", HeldBy(None))["dumps"]}[running.dump_id]
    assert r["rows"] == 10 and "rows_per_s" not in r and "eta_seconds" not in r
