"""ZooKeeper credentials without a server: where they may come from, where they may not
(URL, config, connection extras), and that the password appears in no message or log."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))  # no Airflow files in the repo

import pytest  # noqa: E402

from airflow_provider_dblog.config import check_config, make_state, read_state_auth  # noqa: E402
from airflow_provider_dblog.core.errors import ConfigurationError  # noqa: E402
from airflow_provider_dblog.state.zookeeper import parse_zk_url  # noqa: E402
from airflow_provider_dblog.state.zookeeper_acl import KAZOO_LOG, DigestAuth  # noqa: E402

SECRET = "zk-" + "5e1c0a9b77"


@pytest.fixture(autouse=True)
def no_default_credentials(monkeypatch):
    monkeypatch.delenv("DBLOG_STATE_USER", raising=False)
    monkeypatch.delenv("DBLOG_STATE_PASSWORD", raising=False)


@pytest.mark.parametrize(
    "url", [f"zk://dblog:{SECRET}@zk1:2181/dblog", f"zk://dblog:{SECRET}@zk1:2181,zk2:2181/dblog", "zk://dblog@zk1/x"]
)
def test_credentials_in_the_url_are_refused_with_the_fix(url):
    with pytest.raises(ConfigurationError) as info:
        parse_zk_url(url)
    assert "carries credentials" in info.value.cause and "auth_password_env" in info.value.fix
    assert SECRET not in str(info.value)


def test_unknown_url_options_are_refused_without_their_value():
    assert parse_zk_url("zk://zk1:2181/d?session_timeout=4") == ("zk1:2181", "/d", {"session_timeout": "4"})
    with pytest.raises(ConfigurationError, match="unknown option 'password'") as info:
        parse_zk_url(f"zk://zk1:2181/d?password={SECRET}")
    assert SECRET not in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        parse_zk_url(f"zq://zk1:2181/d?password={SECRET}")
    assert SECRET not in str(info.value)


def test_no_user_no_auth():
    assert read_state_auth({"url": "zk://h/d"}) is None


def test_password_from_the_default_or_a_named_variable(monkeypatch):
    monkeypatch.setenv("DBLOG_STATE_PASSWORD", SECRET)
    assert read_state_auth({"auth_user": "dblog"}) == DigestAuth("dblog", SECRET)
    monkeypatch.setenv("DBLOG_STATE_USER", "fromenv")
    assert read_state_auth({}) == DigestAuth("fromenv", SECRET)
    monkeypatch.setenv("ZK_PW", SECRET + "2")
    assert read_state_auth({"auth_user": "u", "auth_password_env": "ZK_PW"}) == DigestAuth("u", SECRET + "2")


def test_password_from_a_file_without_its_line_end(tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_STATE_PASSWORD", "not this one")
    f = tmp_path / "pw"
    f.write_text(f" {SECRET}\n")
    assert read_state_auth({"auth_user": "u", "auth_password_file": str(f)}).password == f" {SECRET}"


@pytest.mark.parametrize(
    "state, env, says",
    [
        ({"auth_user": "u", "auth_password": SECRET}, {}, "auth_password_env"),
        ({"auth_user": "u"}, {}, "DBLOG_STATE_PASSWORD"),
        ({"auth_user": "u", "auth_password_env": "ZK_PW"}, {}, "ZK_PW"),
        ({"auth_user": "u", "auth_password_env": "ZK_PW"}, {"ZK_PW": ""}, "ZK_PW"),
        ({"auth_password_env": "ZK_PW"}, {"ZK_PW": SECRET}, "set [state] auth_user"),
        ({"auth_user": f"u:{SECRET}"}, {"DBLOG_STATE_PASSWORD": SECRET}, "contains ':'"),
        ({"auth_user": "u", "auth_password_file": "/nonexistent/pw"}, {}, "cannot read"),
    ],
)
def test_bad_credentials_config_names_the_fix_and_never_the_password(monkeypatch, state, env, says):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigurationError) as info:
        read_state_auth(state)
    text = str(info.value)
    assert says in text and "Fix:" in text and SECRET not in text


def test_an_empty_password_file_is_refused(tmp_path):
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(ConfigurationError, match="is empty"):
        read_state_auth({"auth_user": "u", "auth_password_file": str(tmp_path / "pw")})


def test_auth_keys_are_known_to_the_strict_config_but_refused_for_a_local_store(tmp_path, monkeypatch):
    check_config({"state": {"url": "zk://h/d", "auth_user": "u", "auth_password_env": "E", "auth_password_file": "f"}})
    with pytest.raises(ConfigurationError, match="authentication applies to ZooKeeper only"):
        make_state({"path": str(tmp_path / "s.db"), "auth_user": "u"})
    monkeypatch.setenv("DBLOG_STATE_USER", "u")  # the variables apply to ZooKeeper only
    make_state({"path": str(tmp_path / "s.db")}).close()


def test_make_state_checks_credentials_before_connecting():
    with pytest.raises(ConfigurationError, match="DBLOG_STATE_PASSWORD"):
        make_state({"url": "zk://127.0.0.1:1/dblog", "auth_user": "u"})  # port 1: never reached


def test_digest_acl_and_repr():
    auth = DigestAuth("dblog", SECRET)
    assert SECRET not in repr(auth)
    (acl,) = auth.acl
    hashed = base64.b64encode(hashlib.sha1(f"dblog:{SECRET}".encode()).digest()).decode()
    assert (acl.id.scheme, acl.id.id, acl.perms) == ("digest", f"dblog:{hashed}", 31)  # 31: cdrwa
    assert auth.auth_data == [("digest", f"dblog:{SECRET}")]


def test_kazoo_debug_log_of_the_auth_packet_is_redacted(caplog):
    from kazoo.protocol.serialization import Auth

    with caplog.at_level(logging.DEBUG, KAZOO_LOG.name):
        KAZOO_LOG.debug("Sending request(xid=%s): %s", -4, Auth(0, "digest", f"dblog:{SECRET}"))
    assert "Auth(auth_type=0, scheme='digest', auth='<redacted>')" in caplog.text and SECRET not in caplog.text


# -- the dblog_state Airflow connection ------------------------------------------------------
def _hook(monkeypatch, **fields):
    pytest.importorskip("airflow.sdk")
    from airflow_provider_dblog.hooks.dblog import DBLogHook

    monkeypatch.setenv("AIRFLOW_CONN_ST", json.dumps({"conn_type": "dblog_state", **fields}))
    return DBLogHook(state_conn_id="st")


def test_state_connection_passes_the_auth_extras_on(monkeypatch):
    extra = {"auth_user": "dblog", "auth_password_env": "ZK_PW", "auth_password_file": ""}
    hook = _hook(monkeypatch, host="zk1:2181", schema="dblog", extra=extra)
    assert hook.state_config() == {
        "zookeeper": "zk1:2181",
        "chroot": "/dblog",
        "auth_user": "dblog",
        "auth_password_env": "ZK_PW",
    }
    hook = _hook(monkeypatch, extra={"url": "zk://zk1/d", "extra__dblog_state__auth_user": "dblog"})
    assert hook.state_config() == {"url": "zk://zk1/d", "auth_user": "dblog"}


def test_state_connection_refuses_a_password_in_its_extras(monkeypatch):
    hook = _hook(monkeypatch, host="zk1:2181", extra={"auth_user": "dblog", "auth_password": SECRET})
    with pytest.raises(ConfigurationError) as info:
        hook.state_config()
    assert "auth_password_env" in info.value.fix and SECRET not in str(info.value)
