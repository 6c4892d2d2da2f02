"""Commands that read, request or control a capture's dumps open only a state store that a
capture made: a mistyped --state is refused naming the path, and nothing is created there
(it used to make an empty store that `dblog status` then reported nothing from)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflow_provider_dblog import cli
from airflow_provider_dblog.state.lease import make_lease
from airflow_provider_dblog.state.local import LocalStateStore

SOURCE = ["--source-id", "src", "--source-type", "postgres", "--host", "127.0.0.1", "--port", "1"]


@pytest.fixture(autouse=True)
def no_config(monkeypatch):
    monkeypatch.delenv("DBLOG_CONFIG", raising=False)
    monkeypatch.delenv("DBLOG_STATE", raising=False)


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["status", "--json"],
        ["pause", "d1"],
        ["resume", "d1"],
        ["cancel", "d1"],
        ["throttle", "d1", "--delay-ms", "5"],
        ["dump", "--all"],
        ["dump", "--table", "s.t", "--key", "1"],
        ["verify", "--repair"],  # refused before it connects to the source (port 1)
    ],
)
def test_a_store_no_capture_made_is_refused_and_not_created(command, tmp_path, capsys):
    path = tmp_path / "mistyped" / "state.db"
    assert cli.main([*command, *SOURCE, "--state", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"no capture state at {path}" in err and "Fix:" in err and "dblog capture" in err, err
    assert list(tmp_path.iterdir()) == []  # neither the file nor its directory


def test_status_of_a_source_that_never_ran_in_an_existing_store_says_so(tmp_path, capsys):
    path = tmp_path / "state.db"
    LocalStateStore(str(path)).close()  # another source's capture made it
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["status", *SOURCE, "--state", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no capture of source src has stored anything in this state store yet" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no lock file either


def test_asking_who_holds_the_lease_creates_no_lock_file(state):
    lease = make_lease(state, "src", "a")
    assert lease.acquire(threading.Event()) == 1
    lease.release()
    lock = Path(lease.lock_path)
    lock.unlink()  # a leader value in the store, and no lock file
    assert make_lease(state, "src").leader() is None
    assert not lock.exists()
