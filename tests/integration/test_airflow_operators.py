"""The Airflow layer against the real MariaDB: CaptureTrigger sessions and a DumpOperator round.

The triggers run as the triggerer runs them (``asyncio.run`` over ``run()``), the operators'
``execute`` / ``execute_complete`` as the worker calls them; the capture is a real child process.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pytest.importorskip("airflow.sdk")

from airflow.sdk.exceptions import TaskDeferred  # noqa: E402

from airflow_provider_dblog.core.errors import RequestError  # noqa: E402
from airflow_provider_dblog.operators.dump import DumpOperator  # noqa: E402
from airflow_provider_dblog.outputs import make_output  # noqa: E402
from airflow_provider_dblog.state.local import LocalStateStore  # noqa: E402
from airflow_provider_dblog.triggers.capture import CaptureTrigger  # noqa: E402

from ..support.processes import running  # noqa: E402
from .databases import MySQLAdapter, env  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def mariadb(tmp_path, monkeypatch):
    env("DBLOG_MYSQL_HOST")
    db = MySQLAdapter()
    db.create()
    db.seed(random.Random(7), 6)
    source_id = f"af_{uuid.uuid4().hex[:8]}"
    conn_id = f"dblog_src_{source_id}"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps(
            {
                "conn_type": "mysql",
                "host": db.host,
                "port": db.port,
                "login": db.user,
                "password": db.password,
                "extra": {"source_id": source_id, "tables": db.tables()},
            }
        ),
    )
    monkeypatch.delenv("DBLOG_SOURCE_PASSWORD", raising=False)  # the trigger must supply it
    yield db, conn_id, source_id, str(tmp_path / "state.db"), f"delta://{tmp_path / 'lake'}"
    db.drop(source_id)


class Lines:
    """Collects the trigger's task-log lines and signals when the engine has started."""

    def __init__(self, trigger):
        self.lines: list[str] = []
        self.started = asyncio.Event()
        trigger.log.info = self.info  # the task log, as the triggerer would route it
        trigger.log.error = self.info

    def info(self, fmt, *args):
        line = fmt % args
        self.lines.append(line)
        if "capture of" in line and "started at" in line:
            self.started.set()


def changelog(output_url, source_id, table):
    out = make_output(output_url)
    out.open()
    try:
        return list(out.scan(source_id, table))
    finally:
        out.close()


def test_capture_session_streams_progress_and_ends_cleanly(mariadb):
    db, conn_id, source_id, state, lake = mariadb
    trigger = CaptureTrigger(conn_id, state=state, output=lake, session_seconds=12, status_interval=1)
    lines = Lines(trigger)

    async def go():
        nxt = asyncio.create_task(trigger.run().__anext__())
        await asyncio.wait_for(lines.started.wait(), 60)
        await asyncio.to_thread(insert_accounts, db, [1001, 1002])
        return (await asyncio.wait_for(nxt, 90)).payload

    event = asyncio.run(go())
    assert event["status"] == "session_end" and event["source_id"] == source_id, (event, lines.lines)
    assert any(ln.startswith("[dblog] position=") for ln in lines.lines), lines.lines
    events = changelog(lake, source_id, f"{db.ns}.accounts")
    assert {e.key for e in events if e.op.value == "c"} == {(1001,), (1002,)}
    # the session ended by itself: the next one resumes from the checkpoint
    assert LocalStateStore(state).get_checkpoint(source_id) is not None


def insert_accounts(db, ids):
    c = db.connect()
    try:
        for i in ids:
            db._exec(c, f"INSERT INTO {db.ns}.accounts (id, name) VALUES (%s, %s)", (i, f"n{i}"))
        c.commit()
    finally:
        c.close()


# A triggerer in miniature: runs one CaptureTrigger as the triggerer does, prints its child's pid.
TRIGGERER = """
import asyncio, sys
from airflow_provider_dblog.triggers.capture import CaptureTrigger

async def main(conn_id, state, output):
    # A quiet capture: no status line for a long time, so no write to the dead triggerer's
    # pipes ends it by a broken pipe either.
    trigger = CaptureTrigger(conn_id, state=state, output=output, session_seconds=600, status_interval=600)
    session = asyncio.ensure_future(trigger.run().__anext__())
    while trigger._proc is None:
        await asyncio.sleep(0.05)
    print("child pid", trigger._proc.pid, flush=True)
    await session

asyncio.run(main(*sys.argv[1:]))
"""


def run_session(trigger, during) -> dict:
    """One capture session of ``trigger`` as the triggerer runs it; ``during()`` once it started."""
    lines = Lines(trigger)

    async def go():
        nxt = asyncio.create_task(trigger.run().__anext__())
        await asyncio.wait_for(lines.started.wait(), 60)
        await asyncio.to_thread(during)
        return (await asyncio.wait_for(nxt, 90)).payload

    return asyncio.run(go())


def test_a_sigkilled_triggerer_takes_its_capture_child_with_it(mariadb, tmp_path):
    """The triggerer dies by SIGKILL (the OOM killer, a node drain): its capture child stops by
    itself instead of holding the lease and the binlog connection for the rest of its session,
    and the session Airflow starts elsewhere resumes from the checkpoint, nothing lost or
    written twice (parent_pipe.py)."""
    db, conn_id, source_id, state, lake = mariadb
    script = tmp_path / "triggerer.py"
    script.write_text(TRIGGERER)
    out = tmp_path / "triggerer.out"  # a file: a pipe nobody drained would stall the triggerer's loop
    with open(out, "w") as f:
        triggerer = subprocess.Popen([sys.executable, str(script), conn_id, state, lake], stdout=f, stderr=f)
    end = time.monotonic() + 60
    # the child's pid, then the engine's start (rows written before it are the dump's business)
    while not re.search(r"capture of .* started at", out.read_text()) and triggerer.poll() is None:
        assert time.monotonic() < end, out.read_text()
        time.sleep(0.1)
    pid = re.findall(r"^child pid (\d+)$", out.read_text(), re.M)
    assert pid and triggerer.poll() is None, out.read_text()
    child = int(pid[0])
    try:
        insert_accounts(db, [2001, 2002])
        table = f"{db.ns}.accounts"
        end = time.monotonic() + 60
        while {(2001,), (2002,)} - {e.key for e in changelog(lake, source_id, table)} and time.monotonic() < end:
            time.sleep(0.5)
        triggerer.kill()
        triggerer.wait()
        insert_accounts(db, [2003])  # while no capture runs
        end = time.monotonic() + 60
        while running(child) and time.monotonic() < end:
            time.sleep(0.2)
        assert not running(child), "the capture child outlived its triggerer"
    finally:
        if running(child):
            os.kill(child, 9)
    event = run_session(
        CaptureTrigger(conn_id, state=state, output=lake, session_seconds=12, status_interval=1),
        lambda: insert_accounts(db, [2004]),
    )
    assert event["status"] == "session_end", event
    creates = sorted(e.key for e in changelog(lake, source_id, table) if e.op.value == "c" and e.key[0] > 2000)
    assert creates == [(2001,), (2002,), (2003,), (2004,)]


class TI:
    """The part of Airflow's task instance the operator touches."""

    def __init__(self):
        self.xcom: dict = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def test_dump_operator_round_against_a_running_capture(mariadb):
    db, conn_id, source_id, state, lake = mariadb
    capture = CaptureTrigger(conn_id, state=state, output=lake, session_seconds=120, status_interval=1)
    lines = Lines(capture)
    ti = TI()
    notified: list[dict] = []

    def request(**kw):
        op = DumpOperator(task_id="dump", source_conn_id=conn_id, state=state, poll_interval=0.2, **kw)
        try:
            op.execute({"ti": ti})
        except TaskDeferred as deferred:
            return op, deferred
        raise AssertionError("DumpOperator did not defer")

    async def go():
        cap = asyncio.create_task(capture.run().__anext__())
        try:
            await asyncio.wait_for(lines.started.wait(), 60)
            # invalid requests fail in the worker and record nothing
            with pytest.raises(RequestError, match="nope"):
                await asyncio.to_thread(request, tables=f"{db.ns}.nope")
            with pytest.raises(RequestError, match="column"):
                await asyncio.to_thread(request, tables=f"{db.ns}.orders", keys='["eu"]')
            op, deferred = await asyncio.to_thread(
                request,
                tables=f"{db.ns}.accounts",
                keys="1\n3\n999999",
                chunk_size=2,
                changelog=lake,
                notifiers=[lambda context: notified.append(context["dblog_dump_event"])],
            )
            while True:  # as the worker resumes it: each intermediate lifecycle event defers anew
                assert deferred.method_name == "execute_complete"
                event = await asyncio.wait_for(deferred.trigger.run().__anext__(), 90)
                try:
                    result = op.execute_complete({"ti": ti}, event.payload, **deferred.kwargs)
                    break
                except TaskDeferred as again:
                    deferred = again
            assert not cap.done(), "the capture ended during the dump"
            return result, op
        finally:
            cap.cancel()
            await asyncio.gather(cap, return_exceptions=True)
            proc = capture._proc
            await capture.cleanup()  # what the triggerer does when the task is killed
            assert proc is not None and proc.returncode is not None

    result, op = asyncio.run(go())
    assert result["status"] == "done" and result["rows"] == 2 and result["dump_id"] == ti.xcom["dump_id"]
    # OpenLineage (what Airflow's listener reports on success): the table in, the rows it wrote out
    ol = op.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in ol.inputs] == [(f"mysql://{db.host}:{db.port}", f"{db.ns}.accounts")]
    (out,) = ol.outputs
    assert (out.namespace, out.name) == ("file", f"{lake[len('delta://') :]}/changelogs/{source_id}")
    assert out.outputFacets["outputStatistics"].rowCount == 2
    assert result["duration_s"] >= 0
    # the notifiers got the dump's lifecycle, once each, in order
    accounts = f"{db.ns}.accounts"
    assert [(e["event"], e.get("table"), e.get("rows")) for e in notified] == [
        ("started", None, None),
        ("table_done", accounts, 2),
        ("completed", None, 2),
    ]
    assert {e["dump_id"] for e in notified} == {result["dump_id"]}
    dumped = [e for e in changelog(lake, source_id, f"{db.ns}.accounts") if e.op.value == "r"]
    assert sorted(e.key for e in dumped) == [(1,), (3,)]
    assert {e.dump_id for e in dumped} == {result["dump_id"]}
    store = LocalStateStore(state)
    assert [d.dump_id for d in store.list_dumps(source_id)] == [result["dump_id"]]  # invalid ones not recorded


def test_verify_operator_reports_drift_and_requests_a_dump_of_exactly_those_keys(mariadb):
    """VerifyOperator against a changelog that holds nothing yet: every source row is drift
    ('missing'). Without repair the task fails naming the tables and the fix; with repair it
    requests one key-list dump per table of exactly those keys, and its XCom summarises it."""
    from airflow_provider_dblog.operators.verify import DBLogDriftError, VerifyOperator

    db, conn_id, source_id, state, lake = mariadb
    accounts = f"{db.ns}.accounts"

    def op(**kw):
        return VerifyOperator(task_id="verify", source_conn_id=conn_id, state=state, changelog=lake, **kw)

    with pytest.raises(DBLogDriftError, match="repair=True") as err:
        op(tables=[accounts], repair=False).execute({})
    assert accounts in str(err.value)
    verify = op(repair=True)
    summary = verify.execute({})
    # OpenLineage: the source tables (with schemas) and the changelog, one failed equals_source
    # assertion per table carrying its mismatches
    ol = verify.get_openlineage_facets_on_complete(None)
    *tables_in, changelog_in = ol.inputs
    assert sorted(d.name for d in tables_in) == sorted(db.tables()) and not ol.outputs
    assert all(d.namespace == f"mysql://{db.host}:{db.port}" and d.facets["schema"].fields for d in tables_in)
    assert (changelog_in.namespace, changelog_in.name) == ("file", f"{lake[len('delta://') :]}/changelogs/{source_id}")
    checks = changelog_in.inputFacets["dataQualityAssertions"].assertions
    assert {c.name: (c.success, c.actual) for c in checks} == {
        f"dblog verify {t}": (False, f"{s['mismatches']} mismatched keys") for t, s in summary.items()
    }
    # the capture's start: every captured table (with its schema) feeds the changelog
    from airflow_provider_dblog.operators.capture import CaptureOperator

    capture = CaptureOperator(task_id="capture", source_conn_id=conn_id, state=state, changelog=lake)
    ol = capture.get_openlineage_facets_on_start()
    assert sorted(d.name for d in ol.inputs) == sorted(db.tables())
    (accounts_in,) = [d for d in ol.inputs if d.name == accounts]
    assert "id" in {f.name for f in accounts_in.facets["schema"].fields}
    assert [(d.namespace, d.name) for d in ol.outputs] == [
        ("file", f"{lake[len('delta://') :]}/changelogs/{source_id}")
    ]
    assert set(summary) == set(db.tables())
    store = LocalStateStore(state)
    dumps = {d.spec.tables[0]: d for d in store.list_dumps(source_id)}
    assert set(dumps) == set(db.tables())
    for table, dump in dumps.items():
        assert summary[table]["repair_dump_id"] == dump.dump_id
        assert summary[table]["mismatches"] == summary[table]["source_rows"] == len(dump.spec.keys) > 0
        assert summary[table]["replay_rows"] == 0
        assert summary[table]["source_rows_read"] == summary[table]["source_rows"]  # all of it is drift
    # by ranges where the key allows it (integer keys): an empty replay is one range, read whole
    assert summary[accounts]["range_digests"] == 1
    assert summary[f"{db.ns}.notes"]["range_digests"] is None  # a char(36) key: compared whole
    assert (
        op(tables=[accounts], repair=False, fail_on_mismatch=False, ranges=False).execute({})[accounts]["range_digests"]
        is None
    )
