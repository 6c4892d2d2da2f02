"""Example DAGs parse, serialise, and their Params forms refuse bad input before a run starts."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pytest.importorskip("airflow.sdk")

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def repair_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "dblog_repair_dump.py"))
    assert bag.import_errors == {}
    return bag.dags["dblog_repair_dump"]


def test_repair_form_accepts_a_valid_request(repair_dag):
    params = copy.deepcopy(repair_dag.params)
    params.update({"source": "shop_db", "table": "shop.orders", "keys": '["eu", 1]\n["us", 2]', "chunk_size": 500})
    assert params.validate()["table"] == "shop.orders"


@pytest.mark.parametrize(
    "field, value",
    [("chunk_size", 0), ("chunk_size", 2_000_000), ("table", "orders"), ("table", "a b.c"), ("source", "")],
)
def test_repair_form_refuses_bad_input(repair_dag, field, value):
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(repair_dag.params)
    with pytest.raises(ParamValidationError):
        params.update({field: value})
        params.validate()


def test_repair_form_requires_a_table(repair_dag):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="table"):
        copy.deepcopy(repair_dag.params).validate()


def test_repair_dag_serialises_with_its_form(repair_dag):
    from airflow.serialization.serialized_objects import DagSerialization

    again = DagSerialization.from_dict(DagSerialization.to_dict(repair_dag))
    assert set(again.params.keys()) == {"source", "table", "keys", "where", "chunk_size", "delay_ms", "readers"}
    assert again.get_task("dump").task_type == "DumpOperator"


def render(dag, task_id: str, conf: dict):
    """The task's template fields rendered as a run with this conf renders them."""
    task = copy.deepcopy(dag.get_task(task_id))
    params = copy.deepcopy(dag.params)
    params.update(conf)
    task.render_template_fields({"params": params.validate()})
    return task


@pytest.mark.parametrize(
    "text, keys",
    [
        ("2600", [2600]),  # one integer key
        ('"abc"', ["abc"]),  # one text key
        ("[2600, 1]", [[2600, 1]]),  # one composite key, in key order
        ('{"a":1,"b":2}', [{"a": 1, "b": 2}]),  # one composite key, by column
        ("2600\n2601", [2600, 2601]),
        ("", None),  # the whole table
    ],
)
def test_repair_form_text_reaches_the_operator_as_text(repair_dag, text, keys):
    """Native rendering re-typed the form's text: "2600" became an int (TypeError) and
    "[2600, 1]" two keys. Every text field must reach the operator as the text typed."""
    from airflow_provider_dblog.operators.dump import parse_keys

    task = render(repair_dag, "dump", {"source": "123", "table": "shop.order_lines", "keys": text, "where": "42"})
    assert task.keys == text and parse_keys(task.keys) == keys
    assert (task.source_conn_id, task.tables, task.where) == ("123", "shop.order_lines", "42")


def test_repair_form_counts_reach_the_operator_as_whole_numbers(repair_dag):
    from airflow_provider_dblog.operators.dump import _count

    task = render(
        repair_dag, "dump", {"table": "shop.orders", "chunk_size": 500, "delay_ms": 250, "readers": 3, "where": None}
    )
    counts = ("chunk_size", task.chunk_size), ("delay_ms", task.delay_ms), ("readers", task.readers)
    assert [_count(name, value) for name, value in counts] == [500, 250, 3]
    assert task.where == ""  # no filter (the operator and request_dump read "" as none)


def test_no_example_dag_renders_form_text_as_native_objects():
    """The class of the bug above: a DAG whose Params are text must not re-type them."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    for dag in bag.dags.values():
        texts = [k for k, p in dag.params.items() if "string" in str(p.schema.get("type"))]
        assert not (texts and dag.render_template_as_native_obj), (dag.dag_id, texts)
