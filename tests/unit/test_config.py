"""config.py: the TOML writer (render_config, write_private_config) beside its reader
(load_config): what is written is read back as the same dict."""

from __future__ import annotations

import math
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.config import load_config, render_config, write_private_config


def read_back(cfg, tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(render_config(cfg), encoding="utf-8")
    return load_config(str(p))


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
