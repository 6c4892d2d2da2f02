"""The ``dblog://`` asset URIs (airflow_provider_dblog/assets/dblog.py) as Airflow uses them:
through the provider's ``asset-uris`` entry, i.e. ``Asset(...)`` normalising and refusing
URIs with the registered handler, OpenLineage converting assets with the registered converter,
hook lineage building them with the registered factory. No servers."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))  # no Airflow files in the repo

import pytest

pytest.importorskip("airflow.sdk")
pytest.importorskip("airflow.providers.openlineage")

from airflow.sdk import Asset  # noqa: E402

from airflow_provider_dblog import lineage  # noqa: E402
from airflow_provider_dblog.assets import dblog as assets  # noqa: E402
from airflow_provider_dblog.core.events import Column, TableSchema  # noqa: E402
from airflow_provider_dblog.get_provider_info import get_provider_info  # noqa: E402
from airflow_provider_dblog.outputs import make_output  # noqa: E402

DAGS = Path(__file__).resolve().parents[2] / "dags"


def runtime():
    """Where the task SDK (DAG parsing, tasks) looks the handlers up, as Asset() does."""
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    return ProvidersManagerTaskRuntime()


# -- registration ---------------------------------------------------------------------------
def test_airflow_registers_the_dblog_scheme_from_the_provider_info():
    import airflow
    import jsonschema
    from airflow.providers_manager import ProvidersManager

    (entry,) = get_provider_info()["asset-uris"]
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)  # the form Airflow validates provider info with
    assert entry["schemes"] == ["dblog"]
    rt = runtime()
    assert rt.asset_uri_handlers["dblog"] is assets.sanitize_uri
    assert rt.asset_factories["dblog"] is assets.create_asset
    assert rt.asset_to_openlineage_converters["dblog"] is assets.convert_asset_to_openlineage
    # Airflow 3.0 and 3.1 read the core ProvidersManager (deprecated for this since 3.2): the same
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = ProvidersManager()
        assert pm.asset_uri_handlers["dblog"] is assets.sanitize_uri
        assert pm.asset_to_openlineage_converters["dblog"] is assets.convert_asset_to_openlineage


# -- the handler, through Asset() ------------------------------------------------------------
@pytest.mark.parametrize(
    "written, normal",
    [
        ("dblog://changelog/opt/dblog/lake", "dblog://changelog/opt/dblog/lake"),
        ("dblog://Changelog/opt//dblog/./lake/", "dblog://changelog/opt/dblog/lake"),
        ("dblog://changelog/delta:///opt/dblog/lake", "dblog://changelog/opt/dblog/lake"),  # the capture's URL
        ("dblog://changelog/file:///opt/x/../dblog/lake", "dblog://changelog/opt/dblog/lake"),
        ("dblog://changelog/S3://lake-bucket//dblog/", "dblog://changelog/s3://lake-bucket/dblog"),
        ("dblog://commits/gs://b/dblog", "dblog://commits/gs://b/dblog"),
        (
            "dblog://changelog/abfss://cont@acct.dfs.core.windows.net/dblog",  # a container, not a user
            "dblog://changelog/abfss://cont@acct.dfs.core.windows.net/dblog",
        ),
        (
            "dblog://mirror/opt/dblog/lake/mirrors/shop/shop.orders",
            "dblog://mirror/opt/dblog/lake/mirrors/shop/shop.orders",
        ),
        # the table as the changelog spells it (quotes only where needed)
        ('dblog://mirror/s3://b/m/shop/"shop".orders', "dblog://mirror/s3://b/m/shop/shop.orders"),
        ('dblog://mirror/s3://b/m/shop/edge."dot.ted"', 'dblog://mirror/s3://b/m/shop/edge."dot.ted"'),
    ],
)
def test_asset_uris_are_normalised_to_one_spelling(written, normal):
    asset = Asset(written)
    assert asset.uri == normal
    assert asset.normalized_uri == normal  # the handler again (OpenLineage's path): unchanged
    assert Asset(name="x", uri=normal) == Asset(name="x", uri=written)  # one asset, whatever the spelling


@pytest.mark.parametrize(
    "bad, cause, fix",
    [
        ("dblog://changelog", "names no lake", "dblog://changelog/<lake>"),
        ("dblog://table/opt/x", "has the kind 'table'", "dblog://mirror/<mirrors root>"),
        ("dblog:changelog/opt/x", "names no kind", "dblog://changelog/<lake>"),
        ("dblog://changelog/opt/x?version=3", "has a query or fragment", "remove the part from '?'"),
        ("dblog://changelog/delta://dblog-lake", "relative path 'dblog-lake'", "absolute path"),
        ("dblog://changelog/kafka://k1:9092", "kafka:// location", "kafka:// assets"),
        ("dblog://changelog/s3:///dblog", "names no bucket", "s3://<bucket>/<prefix>"),
        ("dblog://mirror/opt/lake/mirrors/shop", "names no mirror table", "<schema>.<table>"),
        ("dblog://mirror/opt/lake/mirrors/_checkpoints/shop.orders", "'_checkpoints' as the source", "source id"),
        ("dblog://mirror/s3://b/shop.orders", "does not name a mirror", "<source id>/<schema>.<table>"),
    ],
)
def test_a_bad_asset_uri_stops_with_its_cause_and_the_fix(bad, cause, fix):
    with pytest.raises(ValueError) as e:
        Asset(bad)
    message = str(e.value)
    assert cause in message and "Fix:" in message and fix in message.split("Fix:", 1)[1], message


def test_credentials_in_the_location_are_refused_and_never_repeated():
    secret = "wJalr" + "XUtnFEMI"
    with pytest.raises(ValueError) as e:
        Asset(f"dblog://changelog/s3://AKIAEXAMPLE:{secret}@bucket/dblog")
    assert "carries credentials" in str(e.value) and "environment variables" in str(e.value)
    assert secret not in str(e.value)


# -- the OpenLineage converter: lineage.py's names ----------------------------------------------
def translated(asset: Asset):
    """What Airflow's OpenLineage provider makes of an asset (the registered converter)."""
    from airflow.providers.common.compat.openlineage.utils.utils import translate_airflow_asset

    ol = translate_airflow_asset(asset, None)
    assert ol is not None, f"no OpenLineage dataset for {asset.uri}"
    return ol.namespace, ol.name


def test_the_changelog_asset_is_the_dataset_the_capture_writes_and_the_landing_reads(tmp_path, monkeypatch):
    """The lake's changelog asset names the directory of its tables, one per source: the table
    a capture writes and the landing of that source reads is a dataset right below it. In a
    lake written before (one table for all), the asset, the capture and the landing name that
    table."""
    import deltalake

    from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA

    local, remote = f"delta://{tmp_path}/lake", "s3://lake-bucket/dblog"
    real_check = deltalake.DeltaTable.is_deltatable
    # no object store here: the remote lake is named by its layout
    monkeypatch.setattr(
        deltalake.DeltaTable,
        "is_deltatable",
        staticmethod(lambda uri, *a: 1 / 0 if uri.startswith("s3://") else real_check(uri, *a)),
    )

    def assets_of(url):
        return (Asset(assets.changelog_uri(url)), Asset(assets.commits_uri(url)), assets.create_asset(lake=url))

    for url in (local, remote):
        (written,) = lineage.changelog_datasets(make_output(url), "shop", ["shop.orders"])  # capture, dumps
        (read,), _ = lineage.landing_datasets(url, source_id="shop")  # SparkSubmitLandOperator / ContinuousLandOperator
        assert (written.namespace, written.name) == (read.namespace, read.name)
        for asset in assets_of(url):  # the watcher's asset (commits) is the same tables
            namespace, name = translated(asset)
            assert (namespace, f"{name}/shop") == (written.namespace, written.name), asset.uri
    assert translated(Asset(f"dblog://changelog{tmp_path}/lake")) == ("file", f"{tmp_path}/lake/changelogs")

    deltalake.DeltaTable.create(f"{tmp_path}/lake/changelog", CHANGELOG_SCHEMA)  # a lake written before
    (written,) = lineage.changelog_datasets(make_output(local), "shop", ["shop.orders"])
    (read,), _ = lineage.landing_datasets(local)
    for asset in assets_of(local):
        assert translated(asset) == (written.namespace, written.name) == (read.namespace, read.name)
    assert written.name == f"{tmp_path}/lake/changelog"


def test_a_mirror_asset_is_the_dataset_the_landing_and_verify_name(tmp_path):
    orders = TableSchema("shop.orders", (Column("id", "bigint", False),), ("id",))
    for lake, mirrors in ((f"{tmp_path}/lake", None), ("s3://b/dblog", "s3://b/mirrors")):
        root = lineage.mirrors_root(lake, mirrors)
        (mirror,) = lineage.mirror_datasets(root, [("shop", orders)])
        asset = assets.create_asset(lake=lake, mirrors=mirrors, source="shop", table="shop.orders")
        assert asset.uri == f"dblog://mirror/{root.lstrip('/')}/shop/shop.orders"
        assert translated(asset) == (mirror.namespace, mirror.name)
    # the mirrors the landing finds under a local root carry the same names
    (tmp_path / "lake" / "mirrors" / "shop" / "shop.orders" / "_delta_log").mkdir(parents=True)
    (found,) = lineage.existing_mirrors(f"{tmp_path}/lake/mirrors")
    assert translated(Asset(assets.mirror_uri("shop", "shop.orders", lake=f"{tmp_path}/lake"))) == (
        found.namespace,
        found.name,
    )


def test_a_task_with_a_changelog_inlet_reads_the_capture_output_in_lineage(tmp_path):
    """A task of the user's (no lineage methods of its own) declaring the changelog asset as its
    inlet: the OpenLineage listener reports the lake's changelog, the dataset whose tables the
    captures report as their outputs. Without the registered converter the inlet would be dropped."""
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from airflow.utils.state import TaskInstanceState

    lake = f"delta://{tmp_path}/lake"
    with DAG("downstream", schedule=None):
        task = EmptyOperator(task_id="read_changelog", inlets=[assets.changelog_asset(lake)])
    ol = ExtractorManager().extract_metadata(
        SimpleNamespace(run_id="manual__1"), task, TaskInstanceState.SUCCESS, SimpleNamespace()
    )
    (written,) = lineage.changelog_datasets(make_output(lake), "shop", ["shop.orders"])
    (read,) = ol.inputs  # the lake's changelog: the directory of its tables, one per source
    assert (read.namespace, f"{read.name}/shop") == (written.namespace, written.name)


# -- identity: one asset per dataset --------------------------------------------------------------
def test_a_dblog_asset_is_named_by_its_uri_in_one_spelling(tmp_path):
    """Airflow keeps one active asset per name and one per URI: each dataset's asset is named by
    its URI as the handler spells it, so one changelog is one asset however its URL is written,
    and two changelogs are two assets with two names."""
    one = [
        assets.changelog_asset(f"delta://{tmp_path}/lake"),
        assets.changelog_asset(f"{tmp_path}//lake/"),
        assets.create_asset(lake=f"file://{tmp_path}/lake"),
        assets.dblog_asset(f"dblog://Changelog/{tmp_path}/./lake/"),
    ]
    uri = f"dblog://changelog{tmp_path}/lake"
    assert {(a.name, a.uri) for a in one} == {(uri, uri)}
    other = assets.changelog_asset(f"delta://{tmp_path}/other-lake")
    assert other.name == other.uri != uri
    # what a user writes by hand, Asset(uri=...) in that spelling, is the same asset
    assert Asset(uri=uri) == one[0]
    commits = assets.commits_asset(f"{tmp_path}/lake", watchers=[])
    mirror = assets.create_asset(lake=f"{tmp_path}/lake", source="shop", table='"shop".orders')
    for a in (commits, mirror):
        assert a.name == a.uri and a.uri.startswith("dblog://"), a


def test_the_outlets_are_the_changelogs_asset_and_the_name_only_one_of_earlier_builds(tmp_path):
    lake = f"delta://{tmp_path}/lake"
    uri = f"dblog://changelog{tmp_path}/lake"
    assert [(a.name, a.uri) for a in assets.changelog_outlets(lake)] == [
        (uri, uri),
        ("dblog_changelog", "dblog_changelog"),  # Asset("dblog_changelog"), as earlier builds emitted
    ]
    assert [a.name for a in assets.changelog_outlets(lake, "orders_changelog")] == [uri, "orders_changelog"]
    for none in (None, "", " "):
        assert [a.name for a in assets.changelog_outlets(lake, none)] == [uri]
    # a changelog with no dblog:// URI keeps the name-only asset, once
    assert [(a.name, a.uri) for a in assets.changelog_outlets("kafka://k1:9092")] == [
        ("dblog_changelog", "dblog_changelog")
    ]


# -- the example DAGs' assets ------------------------------------------------------------------
def test_the_example_dags_emit_and_schedule_on_one_changelog_asset(monkeypatch, tmp_path):
    """The capture and dump DAGs emit, and dblog_land and dblog_after_dump are scheduled on, one
    asset: dblog://changelog/<lake> of DBLOG_CHANGELOG, named by its URI; the capture and dump
    DAGs also emit the name-only DBLOG_CHANGELOG_ASSET (earlier builds' asset)."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DBLOG_CHANGELOG", f"delta://{tmp_path}/lake")
    monkeypatch.setenv("DBLOG_CHANGELOG_ASSET", "orders_changelog")
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(tmp_path / "no-jars"))
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    uri = f"dblog://changelog{tmp_path}/lake"
    want = (uri, uri)
    for dag_id in ("dblog_capture", "dblog_repair_dump", "dblog_backfill"):
        outlets = [(a.name, a.uri) for a in bag.dags[dag_id].tasks[0].outlets]
        assert outlets == [want, ("orders_changelog", "orders_changelog")], dag_id
    land = {a.name: a.uri for a in bag.dags["dblog_land"].timetable.asset_condition.objects}
    commits = f"dblog://commits{tmp_path}/lake"
    assert land == {uri: uri, commits: commits}
    (after,) = bag.dags["dblog_after_dump"].timetable.asset_condition.objects
    assert (after.name, after.uri) == want


def test_a_fleet_source_emits_the_asset_of_the_changelog_it_writes(tmp_path):
    """Sources of one fleet writing to two lakes: each source's DAGs emit its own changelog's
    asset (two names for two URIs), the repair form, which may dump either, both."""
    from airflow_provider_dblog.fleet import FleetSource, fleet_dags

    lake_a, lake_b = f"delta://{tmp_path}/a", "s3://bucket/b"
    dags = fleet_dags(
        [FleetSource("shop_db"), FleetSource("billing_db", changelog=lake_b)],
        state_conn_id="dblog_state_default",
        changelog=lake_a,
    )

    def outlets(dag_id: str) -> list:
        return [a.name for a in dags[dag_id].tasks[0].outlets]

    uri_a, uri_b = f"dblog://changelog{tmp_path}/a", "dblog://changelog/s3://bucket/b"
    for kind in ("capture", "backfill"):
        assert outlets(f"dblog_{kind}__shop_db") == [uri_a, "dblog_changelog"]
        assert outlets(f"dblog_{kind}__billing_db") == [uri_b, "dblog_changelog"]
    assert outlets("dblog_repair_dump") == [uri_a, uri_b, "dblog_changelog"]
    none = fleet_dags([FleetSource("shop_db")], state_conn_id="s", changelog=lake_a, changelog_asset=None)
    assert [a.name for a in none["dblog_backfill__shop_db"].tasks[0].outlets] == [uri_a]


def test_changelogs_that_are_no_delta_lake_keep_a_name_only_asset():
    assert assets.lake_of("delta:///data/lake") == "delta:///data/lake"
    assert assets.lake_of("s3://b/dblog") == "s3://b/dblog"
    assert assets.lake_of("/data/lake") == "/data/lake"
    for url in ("kafka://k1:9092?topic_prefix=cdc", "jsonl:///data/j", "python:pkg.mod:fn", ""):
        assert assets.lake_of(url) is None
        asset = assets.changelog_asset(url)
        assert (asset.name, asset.uri) == ("dblog_changelog", "dblog_changelog")
