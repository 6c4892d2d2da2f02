"""config.py: the TOML writer (render_config, write_private_config) beside its reader
(load_config): what is written is read back as the same dict; and the reader is strict: an
unknown section or key is an error naming it and the closest valid one."""

from __future__ import annotations

import math
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.config import (
    load_config,
    make_output,
    make_source,
    make_state,
    read_toml,
    render_config,
    write_private_config,
)
from airflow_provider_dblog.core.errors import ConfigurationError


def read_back(cfg, tmp_path):
    """The writer's output read back as TOML (unchecked: these tests cover every TOML value,
    not only the keys DBLog knows)."""
    p = tmp_path / "c.toml"
    p.write_text(render_config(cfg), encoding="utf-8")
    return read_toml(str(p))


def test_every_value_type_round_trips(tmp_path):
    cfg = {
        "source": {
            "type": "mysql",
            "id": "s",
            "port": 3306,
            "server_id": -4242,
            "big": 2**62,
            "ratio": 0.25,
            "tiny": 1e-07,
            "huge": 1e300,
            "flag": True,
            "off": False,
            "tables": ["a.b", 'q"x', "back\\slash", "tab\there", "line\nbreak", "ünïcödé ✓", "del\x7f", "nul\x00"],
            "empty": [],
            "nested_list": [[1, 2], ["x"], []],
            "mixed": [1, "two", 3.5, True, {"k": "v"}],
            "key_columns": {"a.b": ["k1", "k2"], 'weird key = "x"': ["c"]},
            "deep": {"one": {"two": {"three": [1, {"four": "x"}]}}, "empty": {}},
            "password_env": "P",
        },
        "state": {"zookeeper": "z:1", "chroot": "/c", "session_timeout": 7.5},
        "output": {"url": "delta:///x"},
        "section with space": {"k": "v"},
    }
    assert read_back(cfg, tmp_path) == cfg


def test_none_is_left_out_and_special_floats_survive(tmp_path):
    back = read_back({"s": {"a": None, "inf": math.inf, "ninf": -math.inf, "nan": math.nan}}, tmp_path)
    assert back["s"]["inf"] == math.inf and back["s"]["ninf"] == -math.inf and math.isnan(back["s"]["nan"])
    assert "a" not in back["s"]


scalars = st.one_of(st.text(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(), st.dictionaries(st.text(), values, max_size=5), max_size=3))
def test_any_config_round_trips(cfg):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        assert read_back(cfg, Path(d)) == cfg


def test_private_file_is_the_owners_only_and_holds_no_password(tmp_path):
    cfg = {"source": {"id": "x", "tables": ["a.b"]}, "output": {"url": "delta:///l"}}
    path = write_private_config(cfg)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert load_config(path) == cfg
    finally:
        os.unlink(path)
    with pytest.raises(ValueError):
        write_private_config({"source": {"password": "x"}})


def write(tmp_path, text):
    p = tmp_path / "dblog.toml"
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_a_misspelt_key_is_refused_naming_it_and_the_closest_valid_one(tmp_path):
    path = write(tmp_path, '[source]\ntype = "postgres"\nid = "shop"\ntabels = ["public.orders"]\n')
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    text = str(info.value)
    assert "unknown key 'tabels' in [source]" in text and path in text and "did you mean 'tables'?" in text


@pytest.mark.parametrize(
    "text,needles",
    [
        ('[sources]\nid = "x"\n', ["unknown section [sources]", "did you mean 'source'?"]),
        ("[capture]\nheartbeat = 5\n", ["unknown section [capture]", "valid: source, state, output."]),
        ('[state]\npth = "/tmp/s.db"\n', ["unknown key 'pth' in [state]", "did you mean 'path'?"]),
        ('[output]\nuri = "delta:///x"\n', ["unknown key 'uri' in [output]", "did you mean 'url'?"]),
        ('source = "x"\n', ["source in config file", "is a value, not a section"]),
    ],
)
def test_unknown_sections_and_keys_are_refused(tmp_path, text, needles):
    with pytest.raises(ConfigurationError) as info:
        load_config(write(tmp_path, text))
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_the_builders_refuse_unknown_keys_too():
    """Dicts that do not come from a file (the Airflow hook, programs) are checked as well."""
    with pytest.raises(ConfigurationError, match="did you mean 'tables'"):
        make_source({"type": "postgres", "id": "s", "tabels": ["a.b"]})
    with pytest.raises(ConfigurationError, match="did you mean 'session_timeout'"):
        make_state({"path": "x.db", "session_timeot": 5})
    with pytest.raises(ConfigurationError, match="unknown key 'ur' in \\[output\\]"):
        make_output({"ur": "delta:///x"})


def test_every_documented_key_loads(tmp_path):
    text = """
[source]
type = "postgres"
id = "shop"
host = "db"
port = 5432
user = "dblog"
database = "shop"
databases = ["shop"]
password_env = "P"
password_file = "/run/secrets/p"
tables = ["public.orders"]
key_columns = { "public.events" = ["event_id"] }
plugin = "pgoutput"
slot_name = "s"
publication = "p"
server_id = 4242
watermark_schema = "dblog"

[state]
path = "s.db"
url = "zk://z:2181/dblog"
zookeeper = "z:2181"
chroot = "/dblog"
session_timeout = 10

[output]
url = "delta:///lake"
"""
    assert set(load_config(write(tmp_path, text))) == {"source", "state", "output"}


def test_the_capture_triggers_generated_config_loads(tmp_path):
    """What the Airflow hook builds and the capture trigger writes (config.render_config)."""
    cfg = {
        "source": {
            "type": "mysql",
            "id": "shop",
            "password_env": "DBLOG_SOURCE_PASSWORD",
            "host": "db1",
            "port": 3307,
            "user": "dblog",
            "database": "shop",
            "server_id": 4711,
            "watermark_schema": "wm",
            "slot_name": None,
            "tables": ["shop.orders", "shop.items"],
            "key_columns": {"shop.items": ["sku"]},
        },
        "state": {"session_timeout": 7.5, "zookeeper": "z1:2181,z2:2181", "chroot": "/dblog"},
        "output": {"url": "s3://lake/changelog"},
    }
    path = write_private_config(cfg)
    try:
        loaded = load_config(path)
    finally:
        os.unlink(path)
    assert loaded["source"]["tables"] == ["shop.orders", "shop.items"] and "slot_name" not in loaded["source"]


SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    "text,needles",
    [
        ('[source]\nport = "58432x"\n', ["[source] port must be an integer from 1 to 65535, not '58432x' (a string)"]),
        ("[source]\nport = 5432.9\n", ["port must be an integer", "5432.9 (a number)"]),
        ("[source]\nport = 0\n", ["port must be an integer from 1 to 65535, not 0"]),
        ("[source]\nport = true\n", ["port must be an integer", "True (a boolean)"]),
        ("[source]\ntables = [42]\n", ['tables must be a non-empty list of "schema.table" names, not [42]']),
        (
            '[source]\ntables = "db.t"\n',
            ["tables must be a non-empty list", "'db.t' (a string)", 'tables = ["public.orders"]'],
        ),
        ("[source]\ntables = []\n", ["tables must be a non-empty list", "leave tables out to capture every table"]),
        ('[source]\nkey_columns = ["a"]\n', ["key_columns must be a table of", "['a'] (a list)"]),
        ('[source]\nkey_columns = { "a.b" = "c" }\n', ["key_columns must be a table of"]),
        ("[source]\npassword_env = 42\n", ["password_env must be the name of an environment variable, not 42"]),
        ('[source]\nserver_id = "4242"\n', ["server_id must be an integer from 1 to 4294967295"]),
        ('[source]\nuse_gtid = "yes"\n', ["use_gtid must be true or false", "a TOML boolean"]),
        ('[source]\ntype = "oracle"\n', ["type must be one of 'postgres'"]),
        ('[source]\nplugin = "decoderbufs"\n', ["plugin must be one of 'pgoutput', 'wal2json'"]),
        ('[source]\nsslmode = "on"\n', ["sslmode must be one of 'disable'"]),
        ("[state]\npath = 5\n", ["[state] path must be a non-empty string (a file path), not 5"]),
        ("[state]\nsession_timeout = -5\n", ["session_timeout must be a number of seconds above 0, not -5"]),
        ("[state]\nsession_timeout = nan\n", ["session_timeout must be a number of seconds above 0"]),
        ('[state]\nchroot = "dblog"\n', ['chroot must be a ZooKeeper path starting with "/"']),
        ("[output]\nurl = 42\n", ["[output] url must be a non-empty string", "42 (an integer)"]),
    ],
)
def test_values_of_the_wrong_type_or_range_are_refused_naming_key_type_and_value(tmp_path, text, needles):
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    for needle in needles + [path, "Fix: write e.g."]:
        assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "section,key,value",
    [
        ("source", "host", f"dblog:{SECRET}@127.0.0.1"),
        ("source", "host", "dblog@127.0.0.1"),
        ("state", "url", f"zk://u:{SECRET}@z:2181/dblog"),
        ("state", "zookeeper", f"u:{SECRET}@z:2181"),
        ("output", "url", f"kafka://u:{SECRET}@broker:9092"),
        ("output", "url", f"delta://u:{SECRET}@host/lake"),
    ],
)
def test_a_host_or_url_with_credentials_is_refused_without_repeating_them(tmp_path, section, key, value):
    path = write(tmp_path, f'[{section}]\n{key} = "{value}"\n')
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    assert f"[{section}] {key} carries credentials" in str(info.value)
    assert SECRET not in str(info.value) and value not in str(info.value)


def test_the_builders_check_types_too():
    """The Airflow hook's and programs' dicts get the same checks as a file."""
    with pytest.raises(ConfigurationError, match="port must be an integer"):
        make_source({"type": "postgres", "id": "s", "port": "5432x"}, password="p")
    with pytest.raises(ConfigurationError, match="session_timeout must be a number of seconds above 0"):
        make_state({"url": "zk://z:2181/d", "session_timeout": -5})
    with pytest.raises(ConfigurationError, match="url must be a non-empty string"):
        make_output({"url": 42})


@pytest.mark.parametrize(
    "url", ["zk:/127.0.0.1:2181/dblog", "zookeeper:127.0.0.1", "zk:127.0.0.1:2181", "etcd://e:2379/x"]
)
def test_a_mistyped_state_url_is_refused_not_taken_for_a_file(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="unknown state store URL"):
        make_state({"url": url})
    assert list(tmp_path.iterdir()) == []  # no SQLite file created under that name


def test_a_state_url_session_timeout_is_range_checked():
    with pytest.raises(ConfigurationError, match="session_timeout must be a number of seconds above 0, not '-5'"):
        make_state({"url": "zk://z:2181/d?session_timeout=-5"})


def test_an_unset_password_env_variable_is_named(monkeypatch):
    from airflow_provider_dblog.config import read_password

    monkeypatch.delenv("SHOP_DB_PASSWORD", raising=False)
    with pytest.raises(ConfigurationError) as info:
        read_password({"password_env": "SHOP_DB_PASSWORD"})
    assert "environment variable SHOP_DB_PASSWORD, which is not set" in info.value.cause
    assert "export SHOP_DB_PASSWORD" in info.value.fix
    monkeypatch.setenv("SHOP_DB_PASSWORD", "")  # set and empty: no password (trust, peer)
    assert read_password({"password_env": "SHOP_DB_PASSWORD"}) == ""


@pytest.mark.parametrize("bad", ["a/b", "_x", "..", "shop db", "p%20"])
def test_a_source_id_that_cannot_name_a_directory_of_the_lake_is_refused(bad):
    """The id names the source's changelog table and mirrors (changelogs/<id>, mirrors/<id>)."""
    from airflow_provider_dblog.config import make_source

    with pytest.raises(ConfigurationError) as info:
        make_source({"type": "postgres", "id": bad, "database": "d", "user": "u"})
    assert repr(bad) in info.value.cause and "'/'" in info.value.fix
