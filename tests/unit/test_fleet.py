"""fleet.py: many sources from one declaration, each with settings of its own; mistakes in the
declaration stop the DAG file with the source at fault."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pytest.importorskip("airflow.sdk")

from airflow_provider_dblog.core.errors import ConfigurationError  # noqa: E402
from airflow_provider_dblog.fleet import FleetSource, fleet_dags  # noqa: E402

DAGS = Path(__file__).resolve().parents[2] / "dags"
FLEET = dict(state_conn_id="st", changelog="delta:///lake")


def test_each_source_gets_its_capture_and_backfill_with_its_own_settings():
    dags = fleet_dags(
        [
            FleetSource("shop_db"),
            FleetSource(
                "billing_db",
                name="billing",
                changelog="delta:///other",
                session_seconds=600,
                backfill="@daily",
                backfill_tables=["public.invoices"],
                delay_ms=20,
                adaptive=True,
                metrics_port=9465,
            ),
            FleetSource("crm_db", backfill=None),
        ],
        **FLEET,
    )
    assert set(dags) == {
        "dblog_capture__shop_db",
        "dblog_backfill__shop_db",
        "dblog_capture__billing",
        "dblog_backfill__billing",
        "dblog_capture__crm_db",
        "dblog_repair_dump",
    }
    shop = dags["dblog_capture__shop_db"].get_task("capture")
    billing = dags["dblog_capture__billing"].get_task("capture")
    assert (shop.source_conn_id, shop.changelog, shop.session_seconds) == ("shop_db", "delta:///lake", 3600.0)
    assert (billing.source_conn_id, billing.changelog, billing.session_seconds) == ("billing_db", "delta:///other", 600)
    assert shop.state_conn_id == billing.state_conn_id == "st"
    assert (shop.metrics_port, billing.metrics_port) == (None, 9465)
    backfill = dags["dblog_backfill__billing"]
    dump = backfill.get_task("dump_all")
    assert (dump.source_conn_id, dump.tables, dump.delay_ms, dump.adaptive) == (
        "billing_db",
        ["public.invoices"],
        20,
        True,
    )
    assert backfill.schedule == "@daily"
    assert set(dags["dblog_capture__billing"].tags) == {"dblog", "billing"}
    # one repair form for the fleet: its source is one of the declared ones
    source = dags["dblog_repair_dump"].params.get_param("source")
    assert source.schema["enum"] == ["shop_db", "billing_db", "crm_db"]


def test_the_fleets_dags_serialise():
    from airflow.serialization.serialized_objects import DagSerialization

    for dag in fleet_dags([FleetSource("a"), FleetSource("b")], **FLEET).values():
        again = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        assert [t.task_id for t in again.tasks] == [t.task_id for t in dag.tasks]


@pytest.mark.parametrize(
    "sources, match",
    [
        ([FleetSource("a"), FleetSource("b", name="a")], "'a' and 'b' would both be named 'a'"),
        ([FleetSource("shop db")], "'shop db' cannot end a DAG id"),
        ([FleetSource("a", chunk_size=0)], "chunk_size 0"),
        ([FleetSource("a", max_sessions=0)], "max_sessions 0 ends the capture"),
        ([], "no source"),
    ],
)
def test_a_mistake_in_the_declaration_names_the_source(sources, match):
    with pytest.raises(ConfigurationError, match=match):
        fleet_dags(sources, **FLEET)


def test_a_capture_may_end_after_a_number_of_sessions(monkeypatch):
    """``max_sessions`` (the example DAG: DBLOG_CAPTURE_MAX_SESSIONS) ends the capture task,
    successfully, after that many sessions: how the system test runs dblog_capture once."""
    dags = fleet_dags([FleetSource("a"), FleetSource("b", max_sessions=2)], **FLEET)
    assert dags["dblog_capture__a"].get_task("capture").max_sessions is None  # for ever, by default
    assert dags["dblog_capture__b"].get_task("capture").max_sessions == 2
    import importlib.util
    import uuid
    from pathlib import Path

    monkeypatch.setenv("DBLOG_CAPTURE_MAX_SESSIONS", "1")
    path = Path(__file__).resolve().parents[2] / "dags" / "dblog_capture.py"
    spec = importlib.util.spec_from_file_location(f"dblog_capture_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.dblog_capture.get_task("capture").max_sessions == 1


def test_single_takes_one_source():
    with pytest.raises(ConfigurationError, match="single=True with 2 sources"):
        fleet_dags([FleetSource("a"), FleetSource("b")], single=True, **FLEET)


def test_the_example_fleet_dag_file_publishes_each_declared_source(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DBLOG_FLEET", "shop_db, billing_db")
    bag = DagBag(dag_folder=str(DAGS / "dblog_fleet.py"))
    assert bag.import_errors == {}
    assert set(bag.dags) == {
        "dblog_capture__shop_db",
        "dblog_backfill__shop_db",
        "dblog_capture__billing_db",
        "dblog_backfill__billing_db",
        "dblog_repair_dump",
    }
    monkeypatch.delenv("DBLOG_FLEET")
    assert DagBag(dag_folder=str(DAGS / "dblog_fleet.py")).dags == {}
