"""The Delta changelog on an S3-compatible store (``scripts/services up s3``: moto's server),
docs/deploy.md: commits are put-if-absent, a store that ignores conditional writes is
refused at open, a deposed writer is fenced, and the changelog watcher reads the store.
The two-capture SIGSTOP fencing on S3 is in test_fencing.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError, StaleEpochError
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput

from ..support.s3_env import aws_env, use_s3
from ..unit.test_outputs import ev, pos, scan_sorted
from .capture_proc import REPO

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(monkeypatch) -> str:
    return use_s3(monkeypatch)


def _store(url: str):
    from obstore.store import from_url

    return from_url(url)


def test_the_test_store_refuses_a_second_put_if_absent(lake):
    """Everything below relies on it: the server answers a create-only PUT of an existing key
    with 412, and keeps the first object."""
    import obstore
    from obstore.exceptions import AlreadyExistsError

    store = _store(lake)
    obstore.put(store, "probe", b"first", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, "probe", b"second", mode="create")
    assert bytes(obstore.get(store, "probe").bytes()) == b"first"


def test_a_changelog_on_s3_commits_reads_back_and_fences_a_deposed_writer(lake):
    old = make_output(lake)
    assert isinstance(old, DeltaChangelogOutput) and old.changelog_uri("pg1") == f"{lake}/changelogs/pg1"
    old.open()
    old.write([ev(1), ev(2)], epoch=1)
    new = make_output(lake)
    new.open()
    assert new.last_position("pg1") == pos(2)
    new.write([ev(3)], epoch=2)
    # The deposed writer's cache still says epoch 1: it reads the table before writing.
    with pytest.raises(StaleEpochError):
        old.write([ev(4)], epoch=1)
    # A retry of a batch already durable writes nothing twice.
    new.write([ev(3)], epoch=2)
    assert [e.key[0] for e in scan_sorted(new)] == [1, 2, 3]
    import deltalake

    assert deltalake.DeltaTable(new.changelog_uri("pg1")).version() == 2  # create + two writes


@pytest.fixture
def dropping_proxy():
    """A real process between us and the store that drops If-None-Match."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.drop_conditional_proxy", str(port), aws_env()["AWS_ENDPOINT_URL"]],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and "listening" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def test_a_store_that_ignores_conditional_writes_is_refused_at_open(lake, dropping_proxy, monkeypatch):
    # The same bucket through the proxy: the store now accepts a second put-if-absent.
    monkeypatch.setenv("AWS_ENDPOINT_URL", dropping_proxy)
    out = make_output(lake)
    with pytest.raises(ConfigurationError) as info:
        out.open()
    assert "ignores conditional writes" in str(info.value) and "Fix:" in str(info.value)
    # Nothing was created: the refusal comes before the changelog table.
    import deltalake

    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_env()["AWS_ENDPOINT_URL"])
    assert not deltalake.DeltaTable.is_deltatable(f"{lake}/schemas")
    assert not deltalake.DeltaTable.is_deltatable(f"{lake}/changelogs/pg1")


def test_unsafe_rename_is_refused_naming_the_setting(lake, monkeypatch):
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
    with pytest.raises(ConfigurationError) as info:
        make_output(lake).open()
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" in str(info.value)
    monkeypatch.delenv("AWS_S3_ALLOW_UNSAFE_RENAME")
    with pytest.raises(ConfigurationError) as info:
        make_output(lake, storage_options={"AWS_S3_LOCKING_PROVIDER": "dynamodb"}).open()
    assert "AWS_S3_LOCKING_PROVIDER" in str(info.value)


def test_the_changelog_watcher_fires_for_commits_on_s3_with_keys_from_a_connection(lake, monkeypatch):
    """The asset watcher's trigger reads the store with an aws connection's keys, which are
    not in its serialized arguments; with only the environment's keys removed it still works."""
    import json

    from airflow_provider_dblog.triggers.changelog import ChangelogCommitTrigger

    keys = aws_env()
    extra = {"url": lake, "endpoint_url": keys["AWS_ENDPOINT_URL"], "region_name": keys["AWS_REGION"]}
    conn = {"conn_type": "aws", "login": keys["AWS_ACCESS_KEY_ID"], "password": keys["AWS_SECRET_ACCESS_KEY"]}
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_LAKE_S3", json.dumps({**conn, "extra": extra}))
    out = make_output(lake)
    out.open()
    out.write([ev(1)], epoch=1)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key)
    trigger = ChangelogCommitTrigger(lake, poll_interval=0.1, min_interval=0, conn_id="dblog_lake_s3")
    assert keys["AWS_SECRET_ACCESS_KEY"] not in json.dumps(trigger.serialize()[1])

    async def first_event():
        gen = trigger.run()
        try:
            return await asyncio.wait_for(gen.__anext__(), 30)
        finally:
            await gen.aclose()

    event = asyncio.run(first_event())
    assert event.payload["changelog_version"] == 1


def test_a_missing_bucket_is_refused_naming_the_fix(monkeypatch):
    use_s3(monkeypatch)
    out = make_output(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/lake")
    with pytest.raises(ConfigurationError) as info:
        out.open()
    assert "the bucket must exist" in str(info.value)


def test_maintenance_compacts_the_changelog_on_s3_with_put_if_absent_beside_a_writing_capture(lake):
    """spark/maintenance.py compacts the changelog while a capture writes it: the compaction
    commits through delta-rs (put-if-absent), never through Spark, whose S3 log store is
    atomic within one driver only and could overwrite the capture's commit of the same
    version. Every event written before and during the run is there afterwards, and no
    commit of the changelog came from Spark."""
    import json
    import threading

    import deltalake

    from tests.support.spark_jars import spark_jars

    out = make_output(lake)
    out.open()
    for n in range(1, 13):  # small commits, as a capture's flushes make
        out.write([ev(n)], epoch=1)
    done, failed, written = threading.Event(), [], []

    def capture():  # the capture goes on writing meanwhile, retrying a commit it lost
        n = 13
        while not done.is_set() and n < 400:
            try:
                out.write([ev(n)], epoch=1)
                n += 1
            except Exception as exc:  # a lost race with the compaction's commit: written again
                failed.append(repr(exc))
        written.append(n - 1)

    writer = threading.Thread(target=capture, daemon=True)
    writer.start()
    env = {
        **os.environ,
        "DBLOG_SPARK_JARS": spark_jars(),
        "DBLOG_SPARK_S3A_JARS": subprocess.run(
            [str(REPO / "scripts" / "spark-jars"), "--s3a"], capture_output=True, text=True, check=True, timeout=1800
        ).stdout.strip(),
    }
    try:
        run = subprocess.run(
            [sys.executable, "-m", "airflow_provider_dblog.spark.maintenance", "--lake", lake, "--master", "local[1]"],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    finally:
        done.set()
        writer.join(60)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert f"{lake}/changelogs/pg1" in report["compacted"]
    assert [e.key[0] for e in scan_sorted(make_output(lake))] == list(range(1, written[0] + 1))
    history = deltalake.DeltaTable(f"{lake}/changelogs/pg1").history()
    assert any(h.get("operation") == "OPTIMIZE" for h in history), [h.get("operation") for h in history]
    spark_commits = [h for h in history if "Spark" in str(h.get("engineInfo", ""))]
    assert not spark_commits, f"Spark committed to the changelog: {spark_commits[:1]}"


def test_the_changelog_asset_of_a_lake_of_the_layout_before_on_s3_names_its_one_table(lake):
    """An Airflow asset ``dblog://changelog/<lake>`` is the OpenLineage dataset the capture
    reports: on S3 too, for a lake of the layout before (one ``changelog`` table for every
    source) as for one of today (a table per source, under ``changelogs``)."""
    import deltalake
    from airflow.sdk import Asset

    from airflow_provider_dblog import lineage
    from airflow_provider_dblog.assets import dblog as assets
    from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA

    def named(url: str) -> tuple[tuple[str, str], tuple[str, str]]:
        (written,) = lineage.changelog_datasets(make_output(url), "shop", ["shop.orders"])
        ds = assets.convert_asset_to_openlineage(Asset(assets.changelog_uri(url)), None)
        return (written.namespace, written.name), (ds.namespace, ds.name)

    (ns, written), (asset_ns, asset_name) = named(lake)
    assert written == f"{asset_name}/shop" and ns == asset_ns and asset_name.endswith("/changelogs")

    before = f"{lake}-before"
    deltalake.DeltaTable.create(f"{before}/changelog", CHANGELOG_SCHEMA)  # a lake written before
    written_before, asset_before = named(before)
    assert written_before == asset_before and asset_before[1].endswith("-before/changelog"), asset_before
