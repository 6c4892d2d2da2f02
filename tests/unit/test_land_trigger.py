"""LandTrigger / ContinuousLandOperator: the continuous landing's supervision (a stand-in
script for the job's ``python``, so the supervision runs for real without Spark)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import tempfile
import textwrap

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest  # noqa: E402

pytest.importorskip("airflow.sdk")

from airflow.sdk.exceptions import TaskDeferred  # noqa: E402

from airflow_provider_dblog.operators.land import ContinuousLandOperator, DBLogLandError  # noqa: E402
from airflow_provider_dblog.triggers.land import LandTrigger  # noqa: E402


def fake_python(tmp_path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(0o755)
    return str(script)


def run_events(trigger, limit=10.0):
    async def go():
        return [e.payload async for e in trigger.run()]

    return asyncio.run(asyncio.wait_for(go(), limit))


def test_round_trip():
    t = LandTrigger("/lake", source="s1", trigger_seconds=5, session_seconds=600, session=2, python="/py")
    classpath, kwargs = t.serialize()
    json.dumps(kwargs)
    module, name = classpath.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)
    argv = t.argv()
    assert argv[:3] == ["/py", "-m", "airflow_provider_dblog.spark.land_changelog"]
    joined = " ".join(argv)
    assert "--continuous --trigger-seconds 5.0" in joined and "--max-seconds 600.0" in joined
    assert "--source s1" in joined and "--lake /lake" in joined
    # the landing's own parser takes them all; --exit-with-parent: no orphan after a triggerer's death
    from airflow_provider_dblog.spark.land_changelog import build_parser

    assert build_parser().parse_args(argv[3:]).exit_with_parent


def test_a_session_ends_with_its_last_line_and_a_failure_with_its_error(tmp_path):
    ok = fake_python(tmp_path, 'echo "{\\"events\\": 3}"\n')
    assert run_events(LandTrigger("/lake", python=ok)) == [
        {"status": "session_end", "session": 1, "last": '{"events": 3}'}
    ]
    bad = tmp_path / "bad"
    bad.mkdir()
    failing = fake_python(bad, 'echo "error: the changelog is gone" >&2\nexit 3\n')
    (event,) = run_events(LandTrigger("/lake", python=failing, session=4))
    assert event["status"] == "error" and event["returncode"] == 3 and event["session"] == 4
    assert "the changelog is gone" in event["message"]


def test_cleanup_stops_the_child(tmp_path):
    py = fake_python(tmp_path, f'trap "echo stopped > {tmp_path}/seen; exit 0" TERM\nwhile true; do sleep 0.1; done\n')

    async def go():
        t = LandTrigger("/lake", python=py)
        gen = t.run()
        task = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.5)
        await t.cleanup()
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    assert (tmp_path / "seen").read_text().strip() == "stopped"


def test_operator_defers_session_after_session_and_fails_on_an_error():
    op = ContinuousLandOperator(task_id="land", lake="/lake", trigger_seconds=5, max_sessions=2)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    assert deferred.value.trigger.session == 1
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete({}, {"status": "session_end", "session": 1})
    assert deferred.value.trigger.session == 2
    assert op.execute_complete({}, {"status": "session_end", "session": 2}) == {"sessions": 2}
    with pytest.raises(DBLogLandError, match="boom"):
        op.execute_complete({}, {"status": "error", "session": 1, "returncode": 1, "message": "boom"})
