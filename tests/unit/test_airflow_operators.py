"""CaptureOperator / DumpOperator: DAG serialisation round trip, deferral and completion logic."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pytest.importorskip("airflow.sdk")

from airflow.sdk import DAG  # noqa: E402
from airflow.sdk.exceptions import TaskDeferred  # noqa: E402

from airflow_provider_dblog.operators.capture import CaptureOperator, DBLogCaptureError  # noqa: E402
from airflow_provider_dblog.operators.dump import DBLogDumpError, DumpOperator, parse_keys  # noqa: E402
from airflow_provider_dblog.triggers.capture import CaptureTrigger  # noqa: E402


def make_dag():
    with DAG("t", schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
        CaptureOperator(
            task_id="capture",
            source_conn_id="src",
            state_conn_id="st",
            changelog="delta:///lake",
            session_seconds=120,
            max_sessions=3,
        )
        DumpOperator(
            task_id="dump",
            source_conn_id="src",
            state="/s.db",
            tables="{{ params.table }}",
            keys="1\n2",
            where="{{ params['where'] or '' }}",
            chunk_size=50,
            wait=False,
        )
    return dag


def test_dag_serialisation_round_trip():
    from airflow.serialization.serialized_objects import DagSerialization

    dag = make_dag()
    data = DagSerialization.to_dict(dag)
    json.dumps(data)
    again = DagSerialization.from_dict(data)
    cap, dump = again.get_task("capture"), again.get_task("dump")
    assert cap.task_type == "CaptureOperator" and dump.task_type == "DumpOperator"
    assert (cap.source_conn_id, cap.state_conn_id, cap.changelog) == ("src", "st", "delta:///lake")
    assert (dump.tables, dump.keys, dump.chunk_size) == ("{{ params.table }}", "1\n2", 50)
    assert set(DumpOperator.template_fields) >= {"tables", "keys", "where", "chunk_size"}
    assert dump.where == "{{ params['where'] or '' }}"


def test_capture_execute_defers_to_session_one(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SRC", json.dumps({"conn_type": "mysql", "host": "h", "password": "x-secret"}))
    op = make_dag().get_task("capture")
    op.state_conn_id, op.state = None, "/tmp/s.db"
    with pytest.raises(TaskDeferred) as exc:
        op.execute({})
    trigger = exc.value.trigger
    assert isinstance(trigger, CaptureTrigger) and trigger.session == 1 and trigger.session_seconds == 120
    assert exc.value.method_name == "execute_complete"
    assert "x-secret" not in json.dumps(trigger.serialize()[1])


def test_capture_defers_again_after_each_session_until_max_sessions():
    op = make_dag().get_task("capture")
    with pytest.raises(TaskDeferred) as exc:
        op.execute_complete({}, {"status": "session_end", "session": 1, "source_id": "src"})
    assert exc.value.trigger.session == 2
    assert op.execute_complete({}, {"status": "session_end", "session": 3, "source_id": "src"}) == {
        "sessions": 3,
        "source_id": "src",
    }
    op.max_sessions = None
    with pytest.raises(TaskDeferred):
        op.execute_complete({}, {"status": "session_end", "session": 1000})


def test_capture_crash_fails_with_the_child_error():
    op = make_dag().get_task("capture")
    with pytest.raises(DBLogCaptureError, match="binlog_format is STATEMENT"):
        op.execute_complete(
            {},
            {
                "status": "error",
                "session": 1,
                "returncode": 2,
                "message": "dblog: error: binlog_format is STATEMENT. Fix: ...",
            },
        )


def _dump_event(status, error=None):
    return {
        "status": status,
        "dump": {
            "dump_id": "d1",
            "status": status,
            "rows": 30,
            "chunks": 3,
            "error": error,
            "created_at": 100.0,
            "updated_at": 112.5,
            "paused": False,
            "progress": {"a.t": {"rows": 30, "chunks": 3, "done": True}},
        },
    }


def test_dump_complete_returns_the_result_for_xcom():
    op = make_dag().get_task("dump")
    assert op.execute_complete({}, _dump_event("done"), started=110.0) == {
        "dump_id": "d1",
        "status": "done",
        "tables": {"a.t": 30},
        "rows": 30,
        "chunks": 3,
        "duration_s": 2.5,
    }


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_dump_failure_fails_the_task(status):
    with pytest.raises(DBLogDumpError, match=f"d1 {status}"):
        make_dag().get_task("dump").execute_complete({}, _dump_event(status, "boom"))


def test_parse_keys_one_per_line():
    assert parse_keys(' 42\n\n"x"\n["eu", 7]\n{"id": 3}\nplain text \n') == [
        42,
        "x",
        ["eu", 7],
        {"id": 3},
        "plain text",
    ]
    assert parse_keys([1, 2]) == [1, 2]
    assert parse_keys("") is None and parse_keys(None) is None


@pytest.mark.parametrize(
    "text, keys",
    [("2600", [2600]), ('"abc"', ["abc"]), ("[2600, 1]", [[2600, 1]]), ('{"a":1,"b":2}', [{"a": 1, "b": 2}])],
)
def test_parse_keys_reads_one_key_text_as_one_key(text, keys):
    assert parse_keys(text) == keys


@pytest.mark.parametrize("value", [2600, {"a": 1}, 2.5])
def test_parse_keys_refuses_a_value_that_is_neither_text_nor_a_list(value):
    with pytest.raises(TypeError, match="one key per line"):
        parse_keys(value)


@pytest.mark.parametrize("value", ["10.5", "", True, 2.0, "-1", "²"])
def test_dump_counts_are_whole_numbers_never_cast(value):
    from airflow_provider_dblog.operators.dump import _count

    with pytest.raises(ValueError, match="chunk_size is"):
        _count("chunk_size", value)
    assert _count("chunk_size", "1000") == _count("chunk_size", 1000) == 1000


def test_a_table_of_another_source_fails_naming_the_connection_and_the_table():
    """The repair form's source is free text while its table list shows every source's
    tables: a mismatched pair must fail before anything is recorded, naming both."""
    from types import SimpleNamespace

    from airflow_provider_dblog.core.errors import RequestError

    class OtherSource:  # a stand-in: the catalog of source `shop`, which lacks pg1's table
        source_id = "shop"

        def open(self):
            pass

        def close(self):
            pass

        def table_schema(self, table):
            raise RequestError(f"table {table} is not captured by source shop.", "use one of its tables: shop.orders.")

    recorded = []
    state = SimpleNamespace(close=lambda: None, add_dump=lambda *a: recorded.append(a))
    op = DumpOperator(task_id="d", source_conn_id="shop_db", state="/s.db", tables="public.accounts", keys="7")
    op.hook = lambda: SimpleNamespace(get_source=OtherSource, get_state=lambda: state)
    with pytest.raises(RequestError) as err:
        op.execute({})
    assert "source connection 'shop_db' (source shop): table public.accounts is not captured" in err.value.cause
    assert "shop.orders" in err.value.fix and "captures public.accounts" in err.value.fix
    assert recorded == []
