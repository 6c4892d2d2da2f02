import pytest

from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, TableProgress, parse_key
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import Column, TableSchema

T = TableSchema("s.t", (Column("a", "int"), Column("b", "text")), ("a", "b"))
ONE = TableSchema("s.o", (Column("id", "int"),), ("id",))


@pytest.mark.parametrize("text,key", [('[1, "x"]', (1, "x")), ('{"b": "x", "a": 1}', (1, "x"))])
def test_parse_key_forms(text, key):
    assert parse_key(text, T) == key


def test_parse_scalar_for_single_column():
    assert parse_key("42", ONE) == (42,)
    with pytest.raises(RequestError, match=r'"42" for column id \(int\)'):
        parse_key('"42"', ONE)  # a string is no integer: no silent cast


@pytest.mark.parametrize(
    "text,needle",
    [
        ("{bad", "not valid JSON"),
        ("[1]", "has 1 value(s) but the key has 2"),
        ('{"a": 1}', "missing ['b']"),
        ('{"a": 1, "b": 2, "c": 3}', "unknown ['c']"),
        ("[1, null]", "must be a scalar"),
        ("[1, [2]]", "must be a scalar"),
    ],
)
def test_malformed_keys_are_refused_with_the_reason(text, needle):
    with pytest.raises(RequestError) as e:
        parse_key(text, T)
    assert needle in str(e.value) and "Fix:" in str(e.value) and "s.t" in str(e.value)


def test_key_list_needs_one_table():
    with pytest.raises(RequestError, match="exactly one table"):
        DumpSpec.new("src", ["a", "b"], [(1,)])
    with pytest.raises(RequestError, match="empty"):
        DumpSpec.new("src", ["a"], [])


def test_spec_and_progress_round_trip():
    s = DumpSpec.new("src", ["s.t"], [(1, "x"), (2, "y")])
    assert DumpSpec.from_json(s.to_json()) == s
    p = TableProgress((1, "x"), 10, 2, False, 3)
    assert TableProgress.from_json(p.to_json()) == p
    bounded = TableProgress((1, "x"), 10, 2, False, 0, (9, "z"))
    assert TableProgress.from_json(bounded.to_json()) == bounded


def test_progress_stored_before_dump_bounds_existed_still_loads():
    old = '{"last_key":[5],"rows":10,"chunks":2,"done":false,"keys_done":0}'
    assert TableProgress.from_json(old) == TableProgress((5,), 10, 2, False, 0, None)


@pytest.mark.parametrize("kw", [{"chunk_size": 0}, {"chunk_size": 10**9}, {"delay_ms": -1}])
def test_control_bounds(kw):
    with pytest.raises(RequestError):
        DumpControl(**kw)


def test_status_percent_uses_keys_for_key_lists_and_estimates_for_tables():
    from airflow_provider_dblog.core.dumps import Dump, DumpStatus

    keyed = DumpSpec.new("src", ["s.t"], [(1, "a"), (2, "b"), (3, "c"), (4, "d")])
    d = Dump(keyed, DumpControl(), DumpStatus.RUNNING, {"s.t": TableProgress(None, 1, 1, False, 2)})
    assert d.to_dict({"s.t": 10_000})["progress"]["s.t"]["percent"] == 25.0
    table = DumpSpec.new("src", ["s.t"])
    d = Dump(table, DumpControl(), DumpStatus.RUNNING, {"s.t": TableProgress((5,), 500, 1)})
    assert d.to_dict({"s.t": 1000})["progress"]["s.t"]["percent"] == 50.0
    done = Dump(table, DumpControl(), DumpStatus.DONE, {"s.t": TableProgress((5,), 1500, 2, True)})
    assert done.to_dict({"s.t": 1000})["progress"]["s.t"]["percent"] == 100.0
