"""CaptureTrigger / DumpTrigger: serialisation, the private config file, child supervision.

The capture child here is a small shell script standing in for ``python`` (the trigger's
``python`` argument), so the supervision logic runs for real without database servers.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import tempfile
import textwrap
import time

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pytest.importorskip("airflow.sdk")

from airflow_provider_dblog.config import load_config, make_source  # noqa: E402
from airflow_provider_dblog.core.dump_requests import status_key  # noqa: E402
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus, TableProgress  # noqa: E402
from airflow_provider_dblog.state.local import LocalStateStore  # noqa: E402
from airflow_provider_dblog.triggers.capture import CaptureTrigger  # noqa: E402
from airflow_provider_dblog.triggers.dump import DumpTrigger, progress_line  # noqa: E402

SECRET = "pw-" + "5be0c4d2aa"


def roundtrip(trigger):
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # stored by Airflow: must be plain data
    module, name = classpath.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    return kwargs


def test_capture_trigger_round_trip_holds_no_secret(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SRC", json.dumps({"conn_type": "mysql", "host": "h", "password": SECRET}))
    kwargs = roundtrip(
        CaptureTrigger(
            "src",
            state="/s.db",
            output="delta:///l",
            source_id="x",
            session_seconds=60,
            status_interval=2,
            session=3,
            python="/usr/bin/python3",
            metrics_port=9464,
        )
    )
    assert kwargs["session"] == 3 and kwargs["session_seconds"] == 60.0 and kwargs["metrics_port"] == 9464
    assert SECRET not in json.dumps(kwargs)


def test_dump_trigger_round_trip():
    kwargs = roundtrip(DumpTrigger("abc123", state_conn_id="st", poll_interval=0.5))
    assert kwargs == {
        "dump_id": "abc123",
        "state_conn_id": "st",
        "state": None,
        "poll_interval": 0.5,
        "notify": False,
        "seen": None,
    }


# -- the capture child -----------------------------------------------------------------
def fake_python(tmp_path, body: str) -> str:
    """A stand-in for ``python``: argv is ``-m airflow_provider_dblog.cli --config PATH capture ...``."""
    script = tmp_path / "fake-python"
    script.write_text('#!/bin/sh\nCONFIG="$4"\n' + textwrap.dedent(body))
    script.chmod(0o755)
    return str(script)


def set_source(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SRC",
        json.dumps({"conn_type": "postgres", "host": "127.0.0.1", "login": "u", "password": SECRET, "schema": "d"}),
    )
    monkeypatch.setenv("SEEN", str(tmp_path / "seen"))


def run_events(trigger, limit=5.0):
    async def go():
        return [e.payload async for e in trigger.run()]

    return asyncio.run(asyncio.wait_for(go(), limit))


def test_session_end_config_without_password_and_password_in_env(monkeypatch, tmp_path):
    set_source(monkeypatch, tmp_path)
    py = fake_python(
        tmp_path,
        """
        cp "$CONFIG" "$SEEN.toml"
        stat -c %a "$CONFIG" > "$SEEN.mode"
        printf '%s' "$DBLOG_SOURCE_PASSWORD" > "$SEEN.pw"
        echo "$@" > "$SEEN.argv"
        echo "[dblog] position=1 checkpoint=1"
        echo "[dblog] position=2 checkpoint=2"
    """,
    )
    trigger = CaptureTrigger(
        "src", state=str(tmp_path / "s.db"), output="jsonl:///x", session_seconds=5, python=py, metrics_port=9464
    )
    (event,) = run_events(trigger)
    assert event == {
        "status": "session_end",
        "session": 1,
        "source_id": "src",
        "last_status": "[dblog] position=2 checkpoint=2",
    }
    text = (tmp_path / "seen.toml").read_text()
    assert SECRET not in text and "password_env" in text
    assert (tmp_path / "seen.mode").read_text().strip() == "600"
    assert (tmp_path / "seen.pw").read_text() == SECRET
    argv = (tmp_path / "seen.argv").read_text()
    assert SECRET not in argv and "--max-seconds 5.0" in argv and "--exit-with-parent" in argv
    assert "--metrics-port 9464" in argv
    # the file the child read is a config the real loader accepts, and it is gone now
    cfg = load_config(str(tmp_path / "seen.toml"))
    monkeypatch.setenv("DBLOG_SOURCE_PASSWORD", SECRET)  # as the child has it (password_env must be set)
    assert make_source(cfg["source"]).source_id == "src"
    config_path = argv.split()[3]
    assert not os.path.exists(config_path)


def test_child_failure_yields_its_error_lines(monkeypatch, tmp_path):
    set_source(monkeypatch, tmp_path)
    py = fake_python(
        tmp_path,
        """
        echo "[dblog] position=1"
        echo "some log line" >&2
        echo "dblog: error: wal_level is replica. Fix: set wal_level = logical" >&2
        exit 2
    """,
    )
    (event,) = run_events(CaptureTrigger("src", state=str(tmp_path / "s.db"), python=py))
    assert event["status"] == "error" and event["returncode"] == 2
    assert event["message"].endswith("dblog: error: wal_level is replica. Fix: set wal_level = logical")


def test_cleanup_stops_the_child(monkeypatch, tmp_path):
    set_source(monkeypatch, tmp_path)
    py = fake_python(
        tmp_path,
        """
        trap 'echo stopped > "$SEEN.term"; exit 0' TERM
        echo $$ > "$SEEN.pid"
        while true; do sleep 0.1; done
    """,
    )
    trigger = CaptureTrigger("src", state=str(tmp_path / "s.db"), python=py)

    async def go():
        task = asyncio.create_task(trigger.run().__anext__())
        for _ in range(100):
            if (tmp_path / "seen.pid").exists():
                break
            await asyncio.sleep(0.05)
        task.cancel()  # what the triggerer does when the task is killed
        with pytest.raises(asyncio.CancelledError):
            await task
        await trigger.cleanup()

    asyncio.run(asyncio.wait_for(go(), 20))
    assert (tmp_path / "seen.term").read_text().strip() == "stopped"
    pid = int((tmp_path / "seen.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_cleanup_kills_a_child_that_ignores_sigterm(monkeypatch, tmp_path):
    import airflow_provider_dblog.triggers.capture as capture

    monkeypatch.setattr(capture, "STOP_GRACE_SECONDS", 0.5)
    set_source(monkeypatch, tmp_path)
    py = fake_python(
        tmp_path,
        """
        trap '' TERM
        echo $$ > "$SEEN.pid"
        while true; do sleep 0.1; done
    """,
    )
    trigger = CaptureTrigger("src", state=str(tmp_path / "s.db"), python=py)

    async def go():
        task = asyncio.create_task(trigger.run().__anext__())
        while not (tmp_path / "seen.pid").exists():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await trigger.cleanup()

    asyncio.run(asyncio.wait_for(go(), 20))
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "seen.pid").read_text()), 0)


# -- the dump trigger -------------------------------------------------------------------
def test_dump_trigger_reports_progress_and_fires_when_done(tmp_path):
    path = str(tmp_path / "s.db")
    store = LocalStateStore(path)
    spec = DumpSpec.new("src", ["s.t"])
    store.add_dump(spec, DumpControl(chunk_size=10))
    store.put_value(status_key("src"), json.dumps({"estimates": {"s.t": 40}, "updated_at": time.time()}))
    trigger = DumpTrigger(spec.dump_id, state=path, poll_interval=0.05)
    lines: list[str] = []

    async def go():
        gen = trigger.run()
        nxt = asyncio.create_task(gen.__anext__())
        await asyncio.sleep(0.2)
        assert not nxt.done()  # pending: no event
        await asyncio.to_thread(store.set_status, spec.dump_id, DumpStatus.RUNNING)
        await asyncio.to_thread(store.save_progress, spec.dump_id, "s.t", TableProgress(("k",), 10, 1))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(store.save_progress, spec.dump_id, "s.t", TableProgress(("z",), 40, 4, True))
        await asyncio.to_thread(store.set_status, spec.dump_id, DumpStatus.DONE)
        return (await asyncio.wait_for(nxt, 5)).payload

    trigger.log.info = lambda fmt, *a: lines.append(fmt % a)  # the task log
    event = asyncio.run(go())
    store.close()
    assert event["status"] == "done" and event["dump"]["rows"] == 40 and event["dump"]["chunks"] == 4
    assert any("1 chunks, 10 rows (25.0% of ~40 estimated rows)" in ln for ln in lines), lines
    assert lines[-1].endswith("4 chunks, 40 rows (100.0% of ~40 estimated rows)")


def test_dump_trigger_on_kill_cancels_the_dump(tmp_path):
    path = str(tmp_path / "s.db")
    store = LocalStateStore(path)
    spec = DumpSpec.new("src", None)
    store.add_dump(spec)
    asyncio.run(DumpTrigger(spec.dump_id, state=path).on_kill())
    assert store.get_dump(spec.dump_id).control.cancelled
    store.close()


def test_progress_line_without_estimates():
    d = {
        "dump_id": "a",
        "status": "running",
        "paused": True,
        "chunks": 2,
        "rows": 7,
        "error": None,
        "progress": {"t": {"rows": 7, "chunks": 2, "done": False}},
    }
    assert progress_line(d) == "dump a running (paused): 2 chunks, 7 rows"


def _progress(rows: int, estimate: int, done: bool) -> dict:
    return {
        "dump_id": "a",
        "status": "done" if done else "running",
        "chunks": 9,
        "rows": rows,
        "error": None,
        "progress": {"t": {"rows": rows, "chunks": 9, "done": done, "estimated_rows": estimate}},
    }


def test_progress_line_says_when_the_rows_passed_the_estimate():
    """The estimate is the database's statistics, stale until ANALYZE: "(100.0% of ~2016
    estimated rows)" after 8,523 rows read as if the dump were done."""
    assert (
        progress_line(_progress(8523, 2016, False)) == "dump a running: 9 chunks, 8,523 rows (estimate ~2,016 was low)"
    )
    assert progress_line(_progress(8523, 2016, True)).endswith("8,523 rows (estimate ~2,016 was low)")
    assert progress_line(_progress(1000, 2016, False)).endswith("1,000 rows (49.6% of ~2,016 estimated rows)")
    assert progress_line(_progress(2016, 2016, True)).endswith("2,016 rows (100.0% of ~2,016 estimated rows)")


# -- the dump's lifecycle events (notifiers) -----------------------------------------------
def _dump(status, progress, paused=False, **kw):
    return {"dump_id": "d1", "source_id": "src", "status": status, "paused": paused, "progress": progress, **kw}


def test_lifecycle_events_in_order_once_each():
    from airflow_provider_dblog.triggers.dump import lifecycle, seen_state

    t1, t2 = {"rows": 5, "chunks": 1, "done": True}, {"rows": 0, "chunks": 0, "done": False}
    running = _dump("running", {"s.a": t1, "s.b": t2})
    assert [(e["event"], e.get("table")) for e in lifecycle(None, running)] == [
        ("started", None),
        ("table_done", "s.a"),
    ]
    assert lifecycle(seen_state(running), running) == []  # nothing new: nothing again
    paused = _dump("running", {"s.a": t1, "s.b": t2}, paused=True)
    assert [e["event"] for e in lifecycle(seen_state(running), paused)] == ["paused"]
    done = _dump("done", {"s.a": t1, "s.b": {"rows": 7, "chunks": 2, "done": True}}, rows=12, chunks=3)
    events = lifecycle(seen_state(paused), done)
    assert [e["event"] for e in events] == ["table_done", "completed"]  # no "resumed" once finished
    assert events[-1] == {"dump_id": "d1", "source_id": "src", "event": "completed", "rows": 12, "chunks": 3}
    failed = _dump("failed", {"s.a": t1}, rows=5, chunks=1, error="boom")
    assert lifecycle(seen_state(running), failed)[-1]["error"] == "boom"
    assert [e["event"] for e in lifecycle(None, _dump("cancelled", {}, rows=0, chunks=0))] == ["started", "cancelled"]


def test_dump_trigger_with_notify_fires_at_each_lifecycle_event(tmp_path):
    """notify=True: the trigger fires "progress" when the dump starts, and again (deferred
    anew with ``seen``) only for what happened since; without notify it waits for the end."""
    path = str(tmp_path / "s.db")
    store = LocalStateStore(path)
    spec = DumpSpec.new("src", ["s.t", "s.u"])
    store.add_dump(spec, DumpControl(chunk_size=10))

    async def next_event(trigger):
        return (await asyncio.wait_for(trigger.run().__anext__(), 5)).payload

    store.set_status(spec.dump_id, DumpStatus.RUNNING)
    first = asyncio.run(next_event(DumpTrigger(spec.dump_id, state=path, poll_interval=0.05, notify=True)))
    assert first["status"] == "progress" and [e["event"] for e in first["events"]] == ["started"]
    store.save_progress(spec.dump_id, "s.t", TableProgress(("z",), 4, 1, True))
    again = DumpTrigger(spec.dump_id, state=path, poll_interval=0.05, notify=True, seen=first["seen"])
    assert roundtrip(again)["seen"] == first["seen"]  # travels through the triggerer's database
    second = asyncio.run(next_event(again))
    assert [(e["event"], e.get("table")) for e in second["events"]] == [("table_done", "s.t")]
    store.save_progress(spec.dump_id, "s.u", TableProgress(("z",), 6, 1, True))
    store.set_status(spec.dump_id, DumpStatus.DONE)
    last = asyncio.run(next_event(DumpTrigger(spec.dump_id, state=path, notify=True, seen=second["seen"])))
    assert last["status"] == "done" and [e["event"] for e in last["events"]] == ["table_done", "completed"]
    store.close()
