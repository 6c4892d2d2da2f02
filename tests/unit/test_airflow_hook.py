"""DBLogHook: source, state store and changelog built from real Airflow connections (AIRFLOW_CONN_*)."""

from __future__ import annotations

import json
import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))  # no Airflow files in the repo

import pytest

pytest.importorskip("airflow.sdk")

from airflow_provider_dblog.core.errors import ConfigurationError  # noqa: E402
from airflow_provider_dblog.get_provider_info import get_provider_info  # noqa: E402
from airflow_provider_dblog.hooks.dblog import DBLogHook, default_source_id  # noqa: E402

SECRET = "pw-" + "9f3c1a77e2"


def set_conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_mysql_connection_extras_become_the_source_config(monkeypatch):
    set_conn(
        monkeypatch,
        "shop_db",
        conn_type="mysql",
        host="db1",
        port=3307,
        login="dblog",
        password=SECRET,
        schema="shop",
        extra={
            "source_id": "shop",
            "server_id": "4711",
            "watermark_schema": "wm",
            "tables": "shop.orders, shop.items",
            "key_columns": '{"shop.items": ["sku"]}',
        },
    )
    src = DBLogHook("shop_db").source_config()
    assert src == {
        "type": "mysql",
        "id": "shop",
        "password_env": "DBLOG_SOURCE_PASSWORD",
        "host": "db1",
        "port": 3307,
        "user": "dblog",
        "database": "shop",
        "server_id": 4711,
        "watermark_schema": "wm",
        "tables": ["shop.orders", "shop.items"],
        "key_columns": {"shop.items": ["sku"]},
    }
    assert SECRET not in json.dumps(src)


def test_postgres_connection_and_default_source_id(monkeypatch):
    set_conn(
        monkeypatch,
        "PG-Main",
        conn_type="postgres",
        host="pg",
        login="u",
        password=SECRET,
        schema="app",
        extra={"slot_name": "s1", "publication": "p1", "plugin": "wal2json", "tables": ["public.a"]},
    )
    hook = DBLogHook("PG-Main")
    src = hook.source_config()
    assert src["type"] == "postgres" and src["database"] == "app" and src["id"] == "pg_main"
    assert (src["slot_name"], src["publication"], src["plugin"], src["tables"]) == (
        "s1",
        "p1",
        "wal2json",
        ["public.a"],
    )
    assert "port" not in src  # make_source applies the default
    assert DBLogHook("PG-Main", source_id="other").source_config()["id"] == "other"
    assert default_source_id("A.b-C") == "a_b_c"


def test_password_reaches_the_source_in_memory_only(monkeypatch):
    monkeypatch.delenv("DBLOG_SOURCE_PASSWORD", raising=False)
    set_conn(monkeypatch, "my", conn_type="mysql", host="127.0.0.1", login="u", password=SECRET, schema="d")
    set_conn(monkeypatch, "pg", conn_type="postgres", host="127.0.0.1", login="u", password=SECRET, schema="d")
    my = DBLogHook("my").get_source()  # builds, does not connect
    pg = DBLogHook("pg").get_source()
    assert my._settings.password == SECRET
    assert pg._dsn["password"] == SECRET
    assert SECRET not in repr(my._settings)
    assert all(SECRET not in v for v in os.environ.values() if not v.startswith("{"))  # only the connection itself


def test_a_non_source_connection_is_refused(monkeypatch):
    set_conn(monkeypatch, "web", conn_type="http", host="x")
    with pytest.raises(ConfigurationError, match="Postgres or MySQL"):
        DBLogHook("web").source_config()


def test_a_generic_connection_names_the_provider_that_is_missing(monkeypatch):
    """`airflow connections add --conn-type mysql` without the MySQL provider stores 'generic'
    (Airflow only warns): the error must name the package, not just ask for a MySQL type."""
    from airflow_provider_dblog.hooks import dblog

    monkeypatch.setattr(dblog, "_provider_installed", lambda dist: dist != "apache-airflow-providers-mysql")
    set_conn(monkeypatch, "shop_db", conn_type="generic", host="db1", login="u", password=SECRET)
    with pytest.raises(ConfigurationError) as err:
        DBLogHook("shop_db").source_config()
    text = str(err.value)
    assert "apache-airflow-providers-mysql is not installed" in text
    assert "pip install 'airflow-provider-dblog[mysql]'" in text and "libmariadb-dev" in text
    assert "airflow connections delete shop_db" in text and "airflow connections import" in text
    assert SECRET not in text


def test_a_generic_connection_with_the_providers_installed_is_just_not_a_source(monkeypatch):
    from airflow_provider_dblog.hooks import dblog

    monkeypatch.setattr(dblog, "_provider_installed", lambda dist: True)
    set_conn(monkeypatch, "thing", conn_type="generic", host="x")
    with pytest.raises(ConfigurationError, match="Postgres or MySQL") as err:
        DBLogHook("thing").source_config()
    assert "not installed" not in str(err.value)


@pytest.mark.parametrize(
    "fields, expected",
    [
        (dict(host="/var/lib/dblog/state.db"), {"path": "/var/lib/dblog/state.db"}),
        (dict(host="zk1:2181,zk2:2181", schema="dblog"), {"zookeeper": "zk1:2181,zk2:2181", "chroot": "/dblog"}),
        (dict(host="zk1", port=2181, schema="/x"), {"zookeeper": "zk1:2181", "chroot": "/x"}),
        (
            dict(host="zk1:2181", extra={"session_timeout": "7"}),
            {"zookeeper": "zk1:2181", "chroot": "", "session_timeout": 7.0},
        ),
        (dict(host="state", extra={"store": "local"}), {"path": "state"}),
        (dict(extra={"extra__dblog_state__store": "local", "path": "/p"}), {"path": "/p"}),
        (dict(extra={"url": "zk://a:1/c"}), {"url": "zk://a:1/c"}),
    ],
)
def test_state_connection(monkeypatch, fields, expected):
    set_conn(monkeypatch, "st", conn_type="dblog_state", **fields)
    assert DBLogHook(state_conn_id="st").state_config() == expected


def test_state_connection_builds_a_working_local_store(monkeypatch, tmp_path):
    set_conn(monkeypatch, "st", conn_type="dblog_state", host=str(tmp_path / "s.db"))
    store = DBLogHook(state_conn_id="st").get_state()
    try:
        store.put_value("k", "v")
        assert store.get_value("k") == "v"
    finally:
        store.close()
    assert DBLogHook(state="zk://h:1/r").state_config() == {"url": "zk://h:1/r"}


def test_empty_state_connection_names_the_fix(monkeypatch):
    set_conn(monkeypatch, "st", conn_type="dblog_state")
    with pytest.raises(ConfigurationError, match="ZooKeeper hosts"):
        DBLogHook(state_conn_id="st").state_config()


def test_changelog_from_argument_or_connection(monkeypatch):
    set_conn(monkeypatch, "lake", conn_type="fs", extra={"path": "/data/changelog"})
    set_conn(monkeypatch, "lake2", conn_type="generic", extra={"url": "s3://b/changelog"})
    assert DBLogHook(output="jsonl:///x").output_config() == {"url": "jsonl:///x"}
    assert DBLogHook(output_conn_id="lake").output_config() == {"url": "delta:///data/changelog"}
    assert DBLogHook(output_conn_id="lake2").output_config() == {"url": "s3://b/changelog"}


def test_a_kafka_connection_keeps_its_secrets_out_of_the_config_and_in_the_childs_environment(monkeypatch):
    """Issue 14 part 4: an Airflow ``kafka`` connection as the output: the capture child's
    config names the brokers and options only; the SASL password travels in its environment."""
    set_conn(
        monkeypatch,
        "bus",
        conn_type="kafka",
        extra={
            "bootstrap.servers": "k1:9092,k2:9092",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "dblog",
            "sasl.password": SECRET,
            "group.id": "someone-elses-consumer",
            "format": "debezium",
        },
    )
    hook = DBLogHook(output_conn_id="bus")
    cfg = hook.output_config()
    assert cfg["url"].startswith("kafka://k1:9092,k2:9092?") and "format=debezium" in cfg["url"]
    assert SECRET not in json.dumps(cfg)
    ((name, value),) = hook.output_env().items()
    settings = json.loads(value)
    assert settings["sasl.password"] == SECRET and "group.id" not in settings
    assert name in cfg["url"]  # the URL names the variable the child reads
    assert DBLogHook(output_conn_id="bus", output="delta:///x").output_env() == {}


def test_a_misspelt_dblog_extra_is_refused_and_airflows_own_extras_are_left_alone(monkeypatch, tmp_path):
    """Strict configuration: an extra that looks like a DBLog option but is none (``tabels``)
    is an error naming the closest one; Airflow's own Postgres/MySQL extras (``sslmode``, which
    DBLog uses too) and extras far from any DBLog option pass. The capture trigger's config
    file (render_config of engine_config) then loads under the strict reader."""
    from airflow_provider_dblog.config import load_config, write_private_config

    set_conn(
        monkeypatch,
        "typo",
        conn_type="postgres",
        host="pg",
        login="u",
        schema="app",
        extra={"tabels": ["public.a"], "sslmode": "require"},
    )
    with pytest.raises(ConfigurationError) as info:
        DBLogHook("typo").source_config()
    assert "'tabels'" in str(info.value) and "did you mean 'tables'?" in str(info.value)
    set_conn(monkeypatch, "st", conn_type="dblog_state", host="/s.db", extra={"sesion_timeout": 5})
    with pytest.raises(ConfigurationError, match="'sesion_timeout'.*did you mean 'session_timeout'"):
        DBLogHook(state_conn_id="st").state_config()

    set_conn(
        monkeypatch,
        "ok",
        conn_type="postgres",
        host="pg",
        login="u",
        password=SECRET,
        schema="app",
        extra={"tables": "public.a", "sslmode": "require", "application_name": "etl", "team_owner": "data"},
    )
    set_conn(monkeypatch, "st", conn_type="dblog_state", host="zk1:2181", schema="dblog", extra={"session_timeout": 5})
    hook = DBLogHook("ok", "st", output="delta:///lake")
    path = write_private_config(hook.engine_config())  # what triggers/capture.py hands its child
    try:
        loaded = load_config(path)
    finally:
        os.unlink(path)
    assert loaded["source"]["tables"] == ["public.a"] and loaded["source"]["sslmode"] == "require"
    assert "application_name" not in loaded["source"] and "team_owner" not in loaded["source"]
    assert loaded["state"] == {"session_timeout": 5.0, "zookeeper": "zk1:2181", "chroot": "/dblog"}


def test_ui_metadata_for_the_state_connection_type():
    behaviour = DBLogHook.get_ui_field_behaviour()
    assert "password" in behaviour["hidden_fields"] and behaviour["relabeling"]["schema"] == "ZooKeeper chroot"
    (ct,) = get_provider_info()["connection-types"]
    assert ct["connection-type"] == DBLogHook.conn_type == "dblog_state"
    assert ct["hook-class-name"] == "airflow_provider_dblog.hooks.dblog.DBLogHook"
    assert set(ct["conn-fields"]) == {"store", "session_timeout"}
    assert isinstance(DBLogHook.get_connection_form_widgets(), dict)


def test_provider_info_lists_importable_modules():
    import importlib

    info = get_provider_info()
    for kind in ("hooks", "operators", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


def test_tls_extras_of_postgres_and_mysql_connections_become_the_source_tls_settings(monkeypatch):
    """Airflow's own TLS extras (Postgres: libpq names; MySQL: the ``ssl`` object and
    ``ssl_mode``) reach the [source] table, and through it every connection of the capture."""
    set_conn(
        monkeypatch,
        "pg_tls",
        conn_type="postgres",
        host="db",
        login="u",
        password=SECRET,
        extra={"sslmode": "verify-full", "sslrootcert": "/ca.pem", "sslpassword_env": "KEY_PW"},
    )
    src = DBLogHook(source_conn_id="pg_tls").source_config()
    assert (src["sslmode"], src["sslrootcert"], src["sslpassword_env"]) == ("verify-full", "/ca.pem", "KEY_PW")
    set_conn(
        monkeypatch,
        "my_tls",
        conn_type="mysql",
        host="db",
        login="u",
        password=SECRET,
        extra={"ssl": {"ca": "/ca.pem", "cert": "/c.pem", "key": "/c.key"}, "ssl_mode": "VERIFY_CA"},
    )
    src = DBLogHook(source_conn_id="my_tls").source_config()
    assert {k: src[k] for k in ("sslmode", "sslrootcert", "sslcert", "sslkey")} == {
        "sslmode": "verify-ca",
        "sslrootcert": "/ca.pem",
        "sslcert": "/c.pem",
        "sslkey": "/c.key",
    }
    set_conn(monkeypatch, "my_ssl_only", conn_type="mysql", host="db", login="u", extra={"ssl": '{"ca": "/ca.pem"}'})
    assert DBLogHook(source_conn_id="my_ssl_only").source_config()["sslmode"] == "verify-full"
    set_conn(monkeypatch, "my_bad", conn_type="mysql", host="db", login="u", extra={"ssl_mode": "SOMETIMES"})
    with pytest.raises(ConfigurationError) as err:
        DBLogHook(source_conn_id="my_bad").source_config()
    assert "VERIFY_IDENTITY" in str(err.value)
