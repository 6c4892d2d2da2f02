"""The Spark settings for a lake on S3 (spark/session.py ``s3a_conf``): the connector's
class path, the store's endpoint and region from the standard variables, and no credential
in the job's conf (each JVM reads its own environment)."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.spark import session


def test_an_s3_compatible_endpoint_gets_path_style_and_plain_http_and_no_keys_in_the_conf(tmp_path, monkeypatch):
    jar = tmp_path / "hadoop-aws.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv("DBLOG_SPARK_S3A_JARS", str(jar))
    environ = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:59000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
    }
    conf = session.s3a_conf(launched_by_submit=False, environ=environ)
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:59000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"] == str(jar)
    assert not any("AKIDEXAMPLE" in v or "s3cr3t" in v for v in conf.values())
    assert not any(k.startswith("spark.executorEnv.") for k in conf)


def test_aws_s3_itself_needs_no_endpoint_and_spark_submit_brings_the_class_path():
    conf = session.s3a_conf(launched_by_submit=True, environ={})
    assert "spark.hadoop.fs.s3a.endpoint" not in conf and "spark.driver.extraClassPath" not in conf
    assert session.on_s3(["/data/lake", "s3a://b/m"]) and not session.on_s3(["/data/lake", None, "gs://b/x"])


def test_a_lake_on_s3_without_the_connector_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("DBLOG_SPARK_S3A_JARS", raising=False)
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="dblog spark-jars"):
        session.s3a_conf(launched_by_submit=False, environ={})
