"""OpenLineage names and facets (airflow_provider_dblog/lineage.py): the pure part, without
servers. The operators' events through Airflow's OpenLineage listener are checked against
real sources in tests/integration/test_airflow_dags.py and test_airflow_operators.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_provider_dblog import lineage
from airflow_provider_dblog.core.events import Column, TableSchema
from airflow_provider_dblog.outputs import make_output

pytest.importorskip("airflow.providers.openlineage")

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


def test_changelog_datasets_per_output(tmp_path):
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
        ("file", f"{tmp_path}/lake/changelog")
    ]
    s3 = make_output("s3://bucket/lake")
    assert [(d.namespace, d.name) for d in lineage.changelog_datasets(s3, "shop", tables)] == [
        ("s3://bucket", "lake/changelog")
    ]
    jsonl = make_output(f"jsonl://{tmp_path}/j")
    assert [d.name for d in lineage.changelog_datasets(jsonl, "shop", tables)] == [f"{tmp_path}/j/changelog.jsonl"]


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


def test_the_operators_work_without_openlineage():
    """The provider works without Airflow's OpenLineage provider: with its client and its
    extractors unimportable, the operators import and build (its listener is the only caller of
    the lineage methods). Airflow's provider manager still reads the installed provider's info."""
    code = (
        "import sys\n"
        "sys.modules['openlineage'] = sys.modules['airflow.providers.openlineage.extractors'] = None\n"
        "sys.modules['airflow.providers.common.compat.openlineage'] = None\n"
        "from airflow_provider_dblog.operators.capture import CaptureOperator\n"
        "from airflow_provider_dblog.operators.dump import DumpOperator\n"
        "from airflow_provider_dblog.operators.verify import VerifyOperator\n"
        "from airflow_provider_dblog.operators.land import ContinuousLandOperator\n"
        "import airflow_provider_dblog.lineage\n"
        "CaptureOperator(task_id='c', source_conn_id='s', state='/tmp/x.db', changelog='delta:///tmp/l')\n"
        "DumpOperator(task_id='d', source_conn_id='s', state='/tmp/x.db', changelog='delta:///tmp/l')\n"
        "VerifyOperator(task_id='v', source_conn_id='s', state='/tmp/x.db', changelog='delta:///tmp/l')\n"
        "ContinuousLandOperator(task_id='l', lake='/tmp/l')\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
