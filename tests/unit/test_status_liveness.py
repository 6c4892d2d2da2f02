"""`dblog status` tells whether the capture that wrote the last report still runs: by the
leader lease (a real file lock of the local store) and by the report's age against its
status interval. A stopped capture is shown as stopped since its last report."""

from __future__ import annotations

import json
import threading
import time

import pytest

from airflow_provider_dblog import cli
from airflow_provider_dblog.core.dump_requests import read_status, status_key
from airflow_provider_dblog.state.lease import make_lease


def report(state, identity, epoch, age, interval=5.0):
    updated_at = time.time() - age
    state.put_value(
        status_key("src"),
        json.dumps(
            {
                "pid": 4242,
                "updated_at": updated_at,
                "status_interval": interval,
                "position": "p",
                "events_per_s": 12.0,
                "leader": {"identity": identity, "epoch": epoch},
            }
        ),
    )
    return updated_at


def capture(state):
    return read_status(state, "src", make_lease(state, "src"))["capture"]


@pytest.fixture
def held(state):
    """The lease of source "src" held by identity "a" in this process, as a capture holds it."""
    lease = make_lease(state, "src", "a")
    epoch = lease.acquire(threading.Event())
    yield lease, epoch
    lease.release()


def test_a_capture_holding_the_lease_and_reporting_runs(state, held):
    _, epoch = held
    report(state, "a", epoch, age=1)
    c = capture(state)
    assert c["state"] == "running" and c["stopped_at"] is None


def test_a_capture_whose_lease_is_free_has_stopped_since_its_last_report(state, held):
    lease, epoch = held
    at = report(state, "a", epoch, age=1)
    lease.release()  # what the kernel does when the capture exits, however it exits
    c = capture(state)
    assert c["state"] == "stopped" and c["stopped_at"] == at
    assert "no capture holds the leader lease" in c["why"]


def test_a_report_of_a_deposed_leader_is_from_a_stopped_capture(state, held):
    _, epoch = held
    at = report(state, "old-leader", epoch - 1 if epoch > 1 else 0, age=1)
    c = capture(state)
    assert c["state"] == "stopped" and c["stopped_at"] == at and "held by a" in c["why"]


def test_a_lease_holder_without_reports_for_three_intervals_is_silent(state, held):
    _, epoch = held
    report(state, "a", epoch, age=3 * 5.0 + 11, interval=5.0)
    c = capture(state)
    assert c["state"] == "silent" and c["stopped_at"] is None and "every 5 s" in c["why"]


def test_the_command_says_stopped_since_in_text_and_json(state, held, tmp_path, capsys):
    lease, epoch = held
    report(state, "a", epoch, age=1)
    lease.release()
    args = ["status", "--state", state.path, "--source-id", "src"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "capture pid 4242 stopped since " in out and "no capture holds the leader lease" in out
    assert cli.main([*args, "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["capture"]
    assert c["state"] == "stopped" and c["stopped_at"] is not None


def test_a_real_capture_reports_running_then_stopped_after_it_ends(state):
    """The engine's own report carries its status interval and lease: running while the
    engine runs, stopped once it ended (its lease released), since its final report."""
    from airflow_provider_dblog.core.engine import Engine, EngineConfig

    from .memory_capture import SOURCE_ID, MemoryChangelog, MemoryDatabase, MemorySource
    from .test_engine import FAST, wait_until

    class LeasedSource(MemorySource):
        def take_over(self, check, previous, domain=None):  # one process, no log connection to end
            pass

    lease = make_lease(state, SOURCE_ID, "engine-a")
    engine = Engine(LeasedSource(MemoryDatabase()), MemoryChangelog(), state, EngineConfig(**FAST), lease=lease)
    stop = threading.Event()
    thread = threading.Thread(target=engine.run, args=(stop,), daemon=True)
    thread.start()
    try:

        def status():
            return read_status(state, SOURCE_ID, make_lease(state, SOURCE_ID))["capture"]

        wait_until(lambda: status() is not None, what="the first report")
        c = status()
        assert c["state"] == "running" and c["status_interval"] == FAST["status_interval"]
    finally:
        stop.set()
        thread.join(30)
    c = status()
    assert c["state"] == "stopped" and c["stopped_at"] == c["updated_at"]
