"""``dblog doctor`` catches each misconfiguration planted here, names its fix, exits 1, and
passes once the fix is applied; and it changes nothing on the source (no slot, publication,
watermark table or database)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_provider_dblog.deploy import doctor
from tests.integration.capture_proc import child_env, write_config
from tests.integration.databases import env, mysql_root, pg_admin

pytestmark = pytest.mark.integration

VENV_BIN = os.path.dirname(sys.executable)


def run_doctor(config: Path, *args: str, environ: dict | None = None) -> subprocess.CompletedProcess:
    e = child_env()
    e.update(environ or {})
    cmd = [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", str(config), "doctor", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=e)


def lines(out: str, check: str) -> list[str]:
    """The finding lines (with their fix line) of ``check``."""
    found, keep = [], False
    for line in out.splitlines():
        if line.startswith("["):
            keep = f"] {check}" in line
        if keep:
            found.append(line)
    return found


def test_postgres_role_without_replication_and_a_keyless_table(tmp_path, monkeypatch):
    host, port, database = env("DBLOG_PG_HOST"), int(env("DBLOG_PG_PORT")), env("DBLOG_PG_DATABASE")
    admin = pg_admin()
    cur = admin.cursor()
    tag = uuid.uuid4().hex[:8]
    schema, wm, role, password = f"doc_{tag}", f"dblogdoc_{tag}", f"doc_{tag}", uuid.uuid4().hex
    cur.execute(f"CREATE SCHEMA {schema}")
    cur.execute(f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, v text)")
    cur.execute(f"CREATE TABLE {schema}.log (v text)")  # no key: a capture cannot dump or key it
    cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (password,))  # no REPLICATION
    cur.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}; GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
    source = {
        "type": "postgres",
        "id": f"doc{tag}",
        "host": host,
        "port": port,
        "user": role,
        "database": database,
        "password_env": "DBLOG_DOCTOR_PASSWORD",
        "tables": [f"{schema}.orders"],
        "watermark_schema": wm,
    }
    config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", f"jsonl://{tmp_path}/out")
    environ = {"DBLOG_DOCTOR_PASSWORD": password}
    try:
        out = run_doctor(config, "--skip", "spark", "--skip", "jars", environ=environ)
        found = lines(out.stdout, "source")
        assert out.returncode == 1, out.stdout + out.stderr
        assert found and found[0].startswith("[fail]") and "REPLICATION" in "\n".join(found), out.stdout
        assert "fix:" in "\n".join(found)

        cur.execute(f"ALTER ROLE {role} REPLICATION")
        out = run_doctor(config, "--skip", "spark", "--skip", "jars", environ=environ)
        assert lines(out.stdout, "source")[0].startswith("[ok"), out.stdout + out.stderr
        assert (
            "[warn] state store: no capture state at" in out.stdout and "first capture creates it" in out.stdout
        )  # a fresh deployment: nothing yet
        assert out.returncode == 0, out.stdout + out.stderr

        # read-only dumps: the capture creates no publication, so a missing one is the operator's
        read_only = write_config(
            tmp_path / "ro.toml",
            {**source, "watermarks": "log", "publication": f"pub_{tag}"},
            tmp_path / "r.db",
            "jsonl://x",
        )
        out = run_doctor(read_only, "--skip", "spark", "--skip", "jars", environ=environ)
        found = "\n".join(lines(out.stdout, "source"))
        assert out.returncode == 1 and found.startswith("[fail]") and "CREATE PUBLICATION" in found, out.stdout
        cur.execute(f"CREATE PUBLICATION pub_{tag} FOR TABLE {schema}.orders WITH (publish_via_partition_root = true)")
        out = run_doctor(read_only, "--skip", "spark", "--skip", "jars", environ=environ)
        assert lines(out.stdout, "source")[0].startswith("[ok"), out.stdout + out.stderr
        cur.execute(f"DROP PUBLICATION pub_{tag}")

        keyless = write_config(
            tmp_path / "keyless.toml", {**source, "tables": [f"{schema}.log"]}, tmp_path / "s.db", "jsonl://x"
        )
        out = run_doctor(keyless, "--skip", "spark", "--skip", "jars", environ=environ)
        found = "\n".join(lines(out.stdout, "source"))
        assert out.returncode == 1 and found.startswith("[fail]") and f"{schema}.log" in found, out.stdout

        # nothing was created: no slot, no publication, no watermark schema
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE %s", (f"%{tag}%",))
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM pg_publication WHERE pubname LIKE %s", (f"%{tag}%",))
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (wm,))
        assert cur.fetchone()[0] == 0
    finally:
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        cur.execute(f"DROP SCHEMA IF EXISTS {wm} CASCADE")
        cur.execute(f"REVOKE ALL ON DATABASE {database} FROM {role}")
        cur.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


def test_mysql_user_without_replication_privileges(tmp_path):
    root = mysql_root()
    tag = uuid.uuid4().hex[:8]
    db, wm, user, password = f"doc_{tag}", f"dblogdoc_{tag}", f"doc_{tag}", uuid.uuid4().hex
    cur = root.cursor()
    cur.execute(f"CREATE DATABASE {db}")
    cur.execute(f"CREATE TABLE {db}.orders (id int PRIMARY KEY, v varchar(20))")
    cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    cur.execute(f"GRANT SELECT ON {db}.* TO '{user}'@'%'")  # no REPLICATION SLAVE / CLIENT
    source = {
        "type": "mysql",
        "id": f"doc{tag}",
        "host": env("DBLOG_MYSQL_HOST"),
        "port": int(env("DBLOG_MYSQL_PORT")),
        "user": user,
        "password_env": "DBLOG_DOCTOR_PASSWORD",
        "tables": [f"{db}.orders"],
        "watermark_schema": wm,
    }
    config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", f"jsonl://{tmp_path}/out")
    environ = {"DBLOG_DOCTOR_PASSWORD": password}
    try:
        out = run_doctor(config, "--skip", "spark", "--skip", "jars", environ=environ)
        found = "\n".join(lines(out.stdout, "source"))
        assert out.returncode == 1 and found.startswith("[fail]"), out.stdout + out.stderr
        assert "REPLICATION" in found and "fix: " in found and "GRANT" in found, found

        cur.execute(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'%'")
        out = run_doctor(config, "--skip", "spark", "--skip", "jars", environ=environ)
        assert lines(out.stdout, "source")[0].startswith("[ok"), out.stdout + out.stderr
        cur.execute("SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", [wm])
        assert cur.fetchone()[0] == 0  # the watermark database was not created
    finally:
        cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"DROP DATABASE IF EXISTS {wm}")
        root.close()


def test_zookeeper_state_open_to_anyone_is_reported(tmp_path):
    from airflow_provider_dblog.config import make_state

    url = f"zk://{env('DBLOG_ZK_HOSTS')}/doctor_{uuid.uuid4().hex[:8]}"
    [fresh] = doctor.check_state(lambda: make_state({"url": url}, create=False))
    assert fresh.status == doctor.WARN and "the first capture creates it" in fresh.detail, fresh
    store = make_state({"url": url})  # created without credentials: ACL world:anyone
    store.client.ensure_path(store.path("sources"))  # as a capture's first registration does
    store.close()
    found = list(doctor.check_state(lambda: make_state({"url": url}, create=False)))
    assert [f.status for f in found] == [doctor.WARN], found
    assert "world:anyone" in found[0].detail and "auth_user" in found[0].fix


def test_environment_problems_are_each_named(tmp_path, monkeypatch):
    # spark-submit not on PATH, and the driver's python3 cannot import the package
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    found = {f.check: f for f in doctor.check_spark()}
    assert found["spark-submit"].status == doctor.FAIL and VENV_BIN in found["spark-submit"].fix
    assert found["driver python"].status == doctor.FAIL and sys.executable in found["driver python"].fix
    # with the venv's bin first, both pass
    monkeypatch.setenv("PATH", f"{VENV_BIN}:/usr/bin:/bin")
    found = {f.check: f for f in doctor.check_spark()}
    assert (found["spark-submit"].status, found["driver python"].status) == (doctor.OK, doctor.OK), found

    # a jar listing whose jars are gone, then no jars at all
    from airflow_provider_dblog.spark.session import DELTA_PACKAGE

    _, artifact, version = DELTA_PACKAGE.split(":")
    (tmp_path / f"{artifact}-{version}").mkdir()
    (tmp_path / f"{artifact}-{version}" / "jars.txt").write_text(f"{tmp_path}/gone.jar\n")
    monkeypatch.delenv("DBLOG_SPARK_JARS", raising=False)
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(tmp_path))
    [jars] = doctor.check_jars(None)
    assert jars.status == doctor.FAIL and "gone.jar" in jars.detail and "dblog spark-jars" in jars.fix
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(tmp_path / "empty"))
    [jars] = doctor.check_jars(None)
    assert jars.status == doctor.WARN and "dblog spark-jars" in jars.fix
    # a lake on S3 without the S3A connector resolved
    monkeypatch.delenv("DBLOG_SPARK_S3A_JARS", raising=False)
    found = list(doctor.check_jars("s3://bucket/lake"))
    assert found[-1].check == "s3a jars" and found[-1].status == doctor.FAIL

    # Java missing
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    [java] = doctor.check_java()
    assert java.status == doctor.FAIL and "JAVA_HOME" in java.detail


def test_airflow_connections_are_checked_as_the_operators_read_them(tmp_path):
    import json

    secret = f"s3cret-{uuid.uuid4().hex}"  # the failing connection's: never shown
    chroot = f"/doctor_conn_{uuid.uuid4().hex[:8]}"  # no capture has made it
    environ = {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW_CONN_SHOP_PG": json.dumps(
            {
                "conn_type": "postgres",
                "host": env("DBLOG_PG_HOST"),
                "port": int(env("DBLOG_PG_PORT")),
                "login": env("DBLOG_PG_USER"),
                "password": env("DBLOG_PG_PASSWORD"),
                "schema": env("DBLOG_PG_DATABASE"),
            }
        ),
        "AIRFLOW_CONN_WEB": json.dumps({"conn_type": "http", "host": "example.com", "password": secret}),
        "AIRFLOW_CONN_STATE": json.dumps({"conn_type": "dblog_state", "host": env("DBLOG_ZK_HOSTS"), "schema": chroot}),
    }
    config = tmp_path / "empty.toml"
    config.write_text("")
    out = run_doctor(
        config,
        "--skip",
        "java",
        "--skip",
        "spark",
        "--skip",
        "jars",
        *(a for c in ("shop_pg", "web", "nope") for a in ("--conn-id", c)),
        "--state-conn-id",
        "state",
        environ=environ,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert lines(out.stdout, "connection shop_pg")[0].startswith("[ok")
    assert lines(out.stdout, "source ")[0].startswith("[ok"), out.stdout  # its source preflight ran
    web = "\n".join(lines(out.stdout, "connection web"))
    assert web.startswith("[fail]") and "'http', not a DBLog source" in web and "fix:" in web
    assert "\n".join(lines(out.stdout, "connection nope")).startswith("[fail]")
    # the state connection's store: not made by a capture yet, and not made by the doctor either
    assert "[warn] state store: no capture state at" in out.stdout, out.stdout
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=env("DBLOG_ZK_HOSTS"))
    zk.start(timeout=15)
    try:
        assert zk.exists(chroot) is None
    finally:
        zk.stop()
    assert secret not in out.stdout + out.stderr
