"""OpenLineage names and facets (airflow_provider_dblog/lineage.py): the pure part, without
servers. The operators' events through Airflow's OpenLineage listener are checked against
real sources in tests/integration/test_airflow_dags.py and test_airflow_operators.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))  # no Airflow files in the repo

import pytest

from airflow_provider_dblog import lineage
from airflow_provider_dblog.core.events import Column, TableSchema
from airflow_provider_dblog.outputs import make_output

pytest.importorskip("airflow.providers.openlineage")

LAND_DAG = Path(__file__).resolve().parents[2] / "dags" / "dblog_land.py"

PG = {"type": "postgres", "id": "shop", "host": "db.internal", "port": 6432, "database": "sales", "user": "u"}
MY = {"type": "mysql", "id": "m1", "host": "maria", "user": "u"}
ORDERS = TableSchema(
    "public.orders", (Column("id", "bigint", False), Column("amount", "numeric(10,2)"), Column("note", "text")), ("id",)
)


def test_locations_follow_the_naming_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lineage.location("/data/lake/changelog") == ("file", "/data/lake/changelog")
    assert lineage.location("delta:///data/lake/changelog") == ("file", "/data/lake/changelog")
    assert lineage.location("lake/changelog") == ("file", f"{tmp_path}/lake/changelog")
    assert lineage.location("file:///data/x") == ("file", "/data/x")
    assert lineage.location("s3://bucket/lake/changelog") == ("s3://bucket", "lake/changelog")
    assert lineage.location("abfss://c@acct.dfs.core.windows.net/lake") == ("abfss://acct.dfs.core.windows.net", "lake")


def test_source_tables_are_named_by_host_port_and_database():
    assert lineage.source_dataset(PG, "public.orders") == lineage.LineageDataset(
        "postgres://db.internal:6432", "sales.public.orders"
    )
    # MySQL: DBLog's database.table is OpenLineage's name; the default port when none is set
    assert lineage.source_dataset(MY, "shop.orders") == lineage.LineageDataset("mysql://maria:3306", "shop.orders")


def test_changelog_datasets_per_output(tmp_path, monkeypatch):
    tables = ["public.orders", "public.lines"]
    per_table = make_output("kafka://k1:9092,k2:9092?topic_prefix=cdc")
    assert [(d.namespace, d.name) for d in lineage.changelog_datasets(per_table, "shop", tables)] == [
        ("kafka://k1:9092", "cdc.public.orders"),
        ("kafka://k1:9092", "cdc.public.lines"),
    ]
    one_topic = make_output("kafka://k1:9092?topic=all")
    assert [d.name for d in lineage.changelog_datasets(one_topic, "shop", tables)] == ["all"]
    delta = make_output(f"delta://{tmp_path}/lake")
    assert [(d.namespace, d.name) for d in lineage.changelog_datasets(delta, "shop", tables)] == [
        ("file", f"{tmp_path}/lake/changelogs/shop")  # the source's table
    ]
    import deltalake

    from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA

    deltalake.DeltaTable.create(f"{tmp_path}/lake/changelog", CHANGELOG_SCHEMA)  # a lake written before
    assert [(d.namespace, d.name) for d in lineage.changelog_datasets(delta, "shop", tables)] == [
        ("file", f"{tmp_path}/lake/changelog")
    ]
    s3 = make_output("s3://bucket/lake")
    # no store here: the existence check fails, and the dataset is named by the layout
    monkeypatch.setattr(deltalake.DeltaTable, "is_deltatable", staticmethod(lambda *a: 1 / 0))
    assert [(d.namespace, d.name) for d in lineage.changelog_datasets(s3, "shop", tables)] == [
        ("s3://bucket", "lake/changelogs/shop")
    ]
    jsonl = make_output(f"jsonl://{tmp_path}/j")
    assert [d.name for d in lineage.changelog_datasets(jsonl, "shop", tables)] == [f"{tmp_path}/j/changelog.jsonl"]


def test_the_changelog_carries_column_lineage_from_the_tables_it_receives(tmp_path):
    """Each changelog dataset's after/before images come from every column of the tables
    written to it, its key from their key columns; a topic per table gets its own table's."""
    from openlineage.client.serde import Serde

    lines = TableSchema("public.lines", (Column("order_id", "bigint"), Column("sku", "text")), ("order_id", "sku"))
    sources = [lineage.source_dataset(PG, "public.orders", ORDERS), lineage.source_dataset(PG, "public.lines", lines)]
    tables = ["public.orders", "public.lines"]
    (delta,) = lineage.changelog_datasets(make_output(f"delta://{tmp_path}/lake"), "shop", tables, sources)
    (out,) = (Serde.to_dict(d) for d in lineage.operator_lineage(sources, [delta]).outputs)
    cols = out["facets"]["columnLineage"]["fields"]
    ns = "postgres://db.internal:6432"
    assert [(f["name"], f["field"]) for f in cols["after"]["inputFields"]] == [
        ("sales.public.orders", "id"),
        ("sales.public.orders", "amount"),
        ("sales.public.orders", "note"),
        ("sales.public.lines", "order_id"),
        ("sales.public.lines", "sku"),
    ]
    assert {f["namespace"] for f in cols["after"]["inputFields"]} == {ns}
    assert cols["before"]["inputFields"] == cols["after"]["inputFields"]
    assert [(f["name"], f["field"]) for f in cols["key"]["inputFields"]] == [
        ("sales.public.orders", "id"),
        ("sales.public.lines", "order_id"),
        ("sales.public.lines", "sku"),
    ]
    assert cols["after"]["transformationType"] == "IDENTITY"
    per_table = make_output("kafka://k1:9092?topic_prefix=cdc")
    orders, lines_topic = lineage.changelog_datasets(per_table, "shop", tables, sources)
    assert [f[2] for f in dict(lines_topic.fields_from)["after"]] == ["order_id", "sku"]
    assert [f[2] for f in dict(orders.fields_from)["key"]] == ["id"]
    # without the schemas (the dump's completion event): no column lineage, no facet
    (bare,) = lineage.changelog_datasets(make_output(f"delta://{tmp_path}/lake"), "shop", tables)
    assert "columnLineage" not in Serde.to_dict(lineage.operator_lineage([], [bare]).outputs[0]).get("facets", {})


def test_existing_mirrors_are_the_delta_tables_under_the_root(tmp_path):
    for d in ("shop/public.orders/_delta_log", "shop/public.empty", "other/x.y/_delta_log", "_checkpoints/shop"):
        (tmp_path / d).mkdir(parents=True)
    names = [d.name for d in lineage.existing_mirrors(str(tmp_path))]
    assert names == [f"{tmp_path}/other/x.y", f"{tmp_path}/shop/public.orders"]
    assert [d.name for d in lineage.existing_mirrors(str(tmp_path), "shop")] == [f"{tmp_path}/shop/public.orders"]
    assert lineage.existing_mirrors("s3://bucket/mirrors") == []


def test_facets_carry_schema_statistics_and_assertions():
    from openlineage.client.serde import Serde

    ol = lineage.operator_lineage(
        [
            lineage.source_dataset(PG, "public.orders", ORDERS),
            lineage.LineageDataset("file", "/lake/changelog", assertions=(("public.orders", 0), ("public.lines", 3))),
        ],
        [lineage.LineageDataset("file", "/lake/changelog", row_count=42)],
    )
    src, changelog = (Serde.to_dict(d) for d in ol.inputs)
    assert src["namespace"] == "postgres://db.internal:6432" and src["name"] == "sales.public.orders"
    fields = src["facets"]["schema"]["fields"]
    assert [(f["name"], f["type"]) for f in fields] == [("id", "bigint"), ("amount", "numeric(10,2)"), ("note", "text")]
    assert fields[0]["description"] == "primary key" and "description" not in fields[1]
    checks = changelog["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(c["name"], c["success"], c["actual"]) for c in checks] == [
        ("dblog verify public.orders", True, "0 mismatched keys"),
        ("dblog verify public.lines", False, "3 mismatched keys"),
    ]
    (out,) = (Serde.to_dict(d) for d in ol.outputs)
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 42
    assert "schema" not in out.get("facets", {})


def land_task(monkeypatch, tmp_path, **environ: str):
    """dblog_land's task, the DAG file executed afresh under ``environ`` (read at parse time)."""
    for name in ("DBLOG_SPARK_JARS", "DBLOG_SPARK_PACKAGES", "DBLOG_LAND_SOURCE", "DBLOG_LAND_PARALLEL_TABLES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(tmp_path / "no-jars"))  # --packages: nothing to resolve
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"dblog_land_{uuid.uuid4().hex}", LAND_DAG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.get_task("land_changelog")


def extracted(task, state):
    """What Airflow's OpenLineage listener would send for ``task`` (its ExtractorManager: the
    operator's own methods, else hook lineage, else inlets/outlets), as JSON dicts."""
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from openlineage.client.serde import Serde

    ol = ExtractorManager().extract_metadata(SimpleNamespace(run_id="manual__1"), task, state, SimpleNamespace())
    return [Serde.to_dict(d) for d in ol.inputs], [Serde.to_dict(d) for d in ol.outputs], ol.run_facets


@pytest.mark.parametrize("mode", ["event", "schedule"])
def test_land_dag_reports_the_changelog_feeding_the_mirrors(monkeypatch, tmp_path, mode):
    """dblog_land's spark-submit task (event and schedule modes) reads the changelog the capture
    writes and writes the source's mirrors, under the names the other operators give them."""
    from airflow.utils.state import TaskInstanceState

    lake = tmp_path / "lake"
    for d in ("shop/public.orders/_delta_log", "shop/empty", "other/x.y/_delta_log", "_checkpoints/shop"):
        (lake / "mirrors" / d).mkdir(parents=True)
    secrets = {"password": "sp4rk-pa55word", "aws": "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "local[2]", "password": secrets["password"]}),
    )
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secrets["aws"])
    task = land_task(monkeypatch, tmp_path, DBLOG_LAND_MODE=mode, DBLOG_LAKE=str(lake), DBLOG_LAND_SOURCE="shop")
    assert task.application_args == ["--lake", str(lake), "--source", "shop"]  # what the job lands

    inputs, outputs, run_facets = extracted(task, TaskInstanceState.RUNNING)
    changelog = {"namespace": "file", "name": f"{lake}/changelogs/shop", "facets": {}, "inputFacets": {}}
    assert inputs == [changelog]
    # the capture's output dataset (CaptureOperator, DumpOperator) is this input: the graph connects
    (captured,) = lineage.changelog_datasets(make_output(f"delta://{lake}"), "shop", ["public.orders"])
    assert (captured.namespace, captured.name) == (changelog["namespace"], changelog["name"])
    orders = {"namespace": "file", "name": f"{lake}/mirrors/shop/public.orders", "facets": {}, "outputFacets": {}}
    assert outputs == [orders]  # the source's Delta tables only: not other/, empty/, _checkpoints
    (verified,) = lineage.mirror_datasets(f"{lake}/mirrors", [("shop", ORDERS)])  # VerifyOperator's name
    assert (verified.namespace, verified.name) == (orders["namespace"], orders["name"])
    (history,) = lineage.mirror_datasets(f"{lake}/mirrors", [("shop", ORDERS)], history=True)
    assert (history.namespace, history.name) == ("file", f"{lake}/mirrors/_history/shop/public.orders")
    assert "unknownSourceAttribute" not in run_facets  # the operator's own lineage, not a fallback

    # at completion the mirrors are listed again: the one this run created is there now
    (lake / "mirrors" / "shop" / "public.lines" / "_delta_log").mkdir(parents=True)
    inputs, outputs, _ = extracted(task, TaskInstanceState.SUCCESS)
    assert inputs == [changelog]
    assert [o["name"] for o in outputs] == [f"{lake}/mirrors/shop/public.lines", orders["name"]]
    text = json.dumps([inputs, outputs])
    assert not any(secret in text for secret in secrets.values())


def test_land_lineage_names_no_credential_of_the_lake_url(monkeypatch):
    """A lake URL that carried keys (it should not) names its bucket only; object-store
    mirrors are not listed (existing_mirrors). A store that cannot be looked at (none here)
    names the source's table by the layout, and no table without a source."""
    import deltalake
    from airflow.utils.state import TaskInstanceState

    from airflow_provider_dblog.operators.land import SparkSubmitLandOperator

    monkeypatch.setattr(deltalake.DeltaTable, "is_deltatable", staticmethod(lambda *a: 1 / 0))
    lake = "s3://AKIAEXAMPLE:s3cr3tKey@bucket/lake"
    task = SparkSubmitLandOperator(task_id="land", lake=lake, source="shop", application="job.py")
    inputs, outputs, _ = extracted(task, TaskInstanceState.RUNNING)
    assert [(i["namespace"], i["name"]) for i in inputs] == [("s3://bucket", "lake/changelogs/shop")] and outputs == []
    assert "s3cr3tKey" not in json.dumps(inputs) and "AKIAEXAMPLE" not in json.dumps(inputs)
    every_source = SparkSubmitLandOperator(task_id="land_all", lake=lake, application="job.py")
    assert extracted(every_source, TaskInstanceState.RUNNING)[:2] == ([], [])


def test_the_operators_work_without_openlineage():
    """The provider works without Airflow's OpenLineage provider: with its client, its
    extractors and its utils unimportable, the operators import and build and dblog_land parses
    (its listener is the only caller of the lineage methods), and no OpenLineage facet is
    imported. Airflow's provider manager still reads the installed provider's info, and
    common-compat's ``openlineage`` shims stay: the Spark provider imports them, and they fall
    back to no-ops without the provider."""
    code = (
        "import sys\n"
        "sys.modules['openlineage'] = sys.modules['airflow.providers.openlineage.extractors'] = None\n"
        "sys.modules['airflow.providers.openlineage.utils'] = None\n"
        "from airflow_provider_dblog.operators.capture import CaptureOperator\n"
        "from airflow_provider_dblog.operators.dump import DumpOperator\n"
        "from airflow_provider_dblog.operators.verify import VerifyOperator\n"
        "from airflow_provider_dblog.operators.land import ContinuousLandOperator, SparkSubmitLandOperator\n"
        "import airflow_provider_dblog.lineage\n"
        "CaptureOperator(task_id='c', source_conn_id='s', state='/tmp/x.db', changelog='delta:///tmp/l')\n"
        "DumpOperator(task_id='d', source_conn_id='s', state='/tmp/x.db', changelog='delta:///tmp/l')\n"
        "VerifyOperator(task_id='v', source_conn_id='s', state='/tmp/x.db', changelog='delta:///tmp/l')\n"
        "ContinuousLandOperator(task_id='l', lake='/tmp/l')\n"
        "SparkSubmitLandOperator(task_id='s', lake='/tmp/l', application='job.py')\n"
        "import runpy\n"
        f"assert runpy.run_path({str(LAND_DAG)!r})['dag'].get_task('land_changelog').lake == '/tmp/l'\n"
        "assert 'airflow.providers.common.compat.openlineage.facet' not in sys.modules\n"
        "print('ok')\n"
    )
    environ = {
        **os.environ,
        "DBLOG_LAKE": "/tmp/l",
        "DBLOG_LAND_MODE": "schedule",
        "DBLOG_SPARK_JARS_DIR": "/nonexistent",
    }
    environ.pop("DBLOG_SPARK_JARS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environ)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_verify_operator_history_needs_the_mirrors():
    from airflow_provider_dblog.operators.verify import VerifyOperator

    with pytest.raises(ValueError, match="history=True compares history mirrors, which need mirrors="):
        VerifyOperator(task_id="v", source_conn_id="s", state="/tmp/x.db", history=True)
    assert VerifyOperator(
        task_id="v", source_conn_id="s", state="/tmp/x.db", mirrors="/l/mirrors", history=True
    ).history
