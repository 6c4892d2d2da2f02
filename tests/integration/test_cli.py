"""The `dblog` command as users run it: requests, status, control, clear errors, no secrets."""

from __future__ import annotations

import json
import os
import secrets
import uuid

import pytest

from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, write_config
from .databases import ADAPTERS, env

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mysql"])
def setup(request, tmp_path):
    db = ADAPTERS[request.param]()
    db.create()
    source_id = f"cli_{request.param}_{uuid.uuid4().hex[:6]}"
    config = write_config(
        tmp_path / "dblog.toml", db.source_config(source_id), tmp_path / "state.db", f"delta://{tmp_path / 'lake'}"
    )
    # The store a capture makes: the commands that request, control or report dumps refuse
    # a state path no capture used (tests/unit/test_cli_state_exists.py).
    LocalStateStore(str(tmp_path / "state.db")).close()
    yield db, config, source_id
    db.drop(source_id)


def test_dump_requests_are_validated_before_they_are_recorded(setup):
    db, config, _ = setup
    p = dblog(config, "dump", "--table", f"{db.ns}.nope", check=False)
    assert p.returncode == 2 and "nope" in p.stderr and "Fix:" in p.stderr, p.stderr
    p = dblog(config, "dump", "--table", f"{db.ns}.orders", "--key", '["eu"]', check=False)
    assert p.returncode == 2 and "2 column(s)" in p.stderr and "Fix:" in p.stderr, p.stderr
    p = dblog(config, "dump", "--table", f"{db.ns}.accounts", "--key", "{oops", check=False)
    assert p.returncode == 2 and "not valid JSON" in p.stderr, p.stderr
    status = json.loads(dblog(config, "status", "--json").stdout)
    assert status["dumps"] == []  # nothing was recorded


def test_request_status_and_control_round_trip(setup):
    db, config, source_id = setup
    dump_id = dblog(
        config,
        "dump",
        "--table",
        f"{db.ns}.orders",
        "--key",
        '["eu", 1]',
        "--key",
        '{"region": "us", "order_no": 2}',
        "--chunk-size",
        "10",
    ).stdout.strip()
    dblog(config, "pause", dump_id)
    dblog(config, "throttle", dump_id, "--chunk-size", "3", "--delay-ms", "20")
    st = json.loads(dblog(config, "status", "--json").stdout)
    (d,) = st["dumps"]
    assert (d["dump_id"], d["paused"], d["chunk_size"], d["delay_ms"], d["keys"]) == (dump_id, True, 3, 20, 2)
    dblog(config, "resume", dump_id)
    dblog(config, "cancel", dump_id)
    (d,) = json.loads(dblog(config, "status", "--json").stdout)["dumps"]
    assert d["paused"] is False
    p = dblog(config, "pause", "no-such-dump", check=False)
    assert p.returncode == 2 and "no dump with id" in p.stderr


def test_password_in_the_config_file_is_refused(setup, tmp_path):
    db, _, source_id = setup
    cfg = dict(db.source_config(source_id), password="hunter2")
    config = write_config(tmp_path / "bad.toml", cfg, tmp_path / "state.db", f"delta://{tmp_path / 'l'}")
    p = dblog(config, "dump", "--all", check=False)
    assert p.returncode == 2 and "password_env" in p.stderr and "hunter2" not in p.stderr + p.stdout


def test_secrets_never_reach_argv_or_output(setup, tmp_path):
    """A capture with a unique password: not in its argv, not in its output, even on failure."""
    db, _, source_id = setup
    password = "s3cr3t-" + secrets.token_hex(8)
    user = "u_" + uuid.uuid4().hex[:8]
    if db.kind == "postgres":
        import psycopg2

        admin = psycopg2.connect(
            host=db.host,
            port=db.port,
            user=env("DBLOG_PG_SUPERUSER"),
            password=env("DBLOG_PG_SUPERUSER_PASSWORD"),
            dbname=db.db,
        )
        admin.autocommit = True
        admin.cursor().execute(f"CREATE ROLE {user} LOGIN REPLICATION PASSWORD %s", (password,))
    else:
        import pymysql

        admin = pymysql.connect(
            host=db.host,
            port=db.port,
            user=env("DBLOG_MYSQL_ROOT_USER"),
            password=env("DBLOG_MYSQL_ROOT_PASSWORD"),
            autocommit=True,
        )
        admin.cursor().execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
    try:
        cfg = dict(db.source_config(source_id), user=user, password_env="TEST_SECRET")
        config = write_config(tmp_path / "s.toml", cfg, tmp_path / "s.db", f"delta://{tmp_path / 'l'}")
        os.environ["TEST_SECRET"] = password + "-wrong"
        try:  # a failing login: the error names the cause but not the password
            p = dblog(config, "-v", "capture", "--max-seconds", "5", check=False)
        finally:
            os.environ.pop("TEST_SECRET")
        assert p.returncode != 0
        assert password not in p.stdout + p.stderr
        os.environ["TEST_SECRET"] = password
        try:
            cap = Capture(config, tmp_path / "cap.log")
            cap.start()
            assert password not in " ".join(cap.proc.args)
            with open(f"/proc/{cap.proc.pid}/cmdline", "rb") as f:
                assert password.encode() not in f.read()
            import time

            time.sleep(4)
            cap.close()
            assert password not in (tmp_path / "cap.log").read_text()
        finally:
            os.environ.pop("TEST_SECRET")
    finally:
        if db.kind == "postgres":
            admin.cursor().execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename=%s", (user,))
            admin.cursor().execute(f"DROP OWNED BY {user}")
            admin.cursor().execute(f"DROP ROLE {user}")
        else:
            admin.cursor().execute(f"DROP USER IF EXISTS '{user}'@'%'")
        admin.close()


def test_a_changelog_storage_refusing_writes_stops_the_capture_with_cause_and_fix(setup, tmp_path):
    """The output's directory refusing writes while capturing (chattr +i: it holds for root
    too, unlike a read-only mode) ends the capture with `dblog: error:`, exit code 2, the
    path and the fix; not with the writer's traceback."""
    import random
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    db, config, _ = setup
    db.seed(random.Random(7), 20)
    dblog(config, "dump", "--all")
    dblog(config, "capture", "--max-seconds", "5")  # its first commit creates the source's table
    (changelog,) = (tmp_path / "lake" / "changelogs").iterdir()
    dblog(config, "dump", "--all")  # the next capture's writes
    locked = [changelog, changelog / "_delta_log"]
    for path in locked:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        p = dblog(config, "capture", "--max-seconds", "120", check=False)
    finally:
        for path in locked:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    assert p.returncode == 2, p.stderr
    assert f"dblog: error: the changelog's storage at {tmp_path / 'lake'} is not writable" in p.stderr, p.stderr
    assert "Fix: make" in p.stderr and "Traceback" not in p.stderr
