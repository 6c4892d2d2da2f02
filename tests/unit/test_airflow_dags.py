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
    assert set(again.params.keys()) == {"source", "table", "keys", "where", "chunk_size", "readers"}
    assert again.get_task("dump").task_type == "DumpOperator"
