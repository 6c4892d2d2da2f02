"""Landing from Kafka (spark/kafka_changelog.py), the part without Spark running: which topics
the job reads for a capture's output URL, with which client settings, and what it refuses.
tests/e2e/test_landing_kafka.py lands a real capture's topics."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from airflow_provider_dblog.core.errors import ConfigurationError  # noqa: E402
from airflow_provider_dblog.outputs.kafka import KafkaOutput, parse_url  # noqa: E402
from airflow_provider_dblog.spark import kafka_changelog as kc  # noqa: E402
from airflow_provider_dblog.spark.land_changelog import build_parser, main  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def java_matches(pattern: str, topic: str) -> bool:
    """Spark matches subscribePattern with Java's Pattern.matcher(topic).matches(); Python's
    fullmatch agrees on the constructs used (escapes, a negative lookahead)."""
    return re.fullmatch(pattern, topic) is not None


def test_topics_are_the_ones_the_output_writes():
    url = "kafka://b1:9092,b2:9092?topic_prefix=shop"
    src = kc.KafkaChangelog.from_url(url, None, config_env="DBLOG_TEST_NO_SUCH_VAR")
    out = KafkaOutput(*parse_url(url[len("kafka://") :]))
    kind, pattern = src.subscription
    assert kind == "subscribePattern"
    assert src.schema_topic == out.schema_topic("pg1") == "shop.dblog_schemas"
    assert java_matches(pattern, out.topic_for("pg1", "public.orders"))
    assert java_matches(pattern, out.topic_for("pg1", "app.weird name$"))  # sanitised like the output
    assert not java_matches(pattern, "shop.dblog_schemas")
    assert not java_matches(pattern, "shop.x.dblog_schemas")
    assert not java_matches(pattern, "shopping.public.orders")
    assert not java_matches(pattern, "shop")
    assert src.options["kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert src.options["kafka.isolation.level"] == "read_committed"


def test_default_prefix_is_the_source_id_and_one_topic_is_subscribed_by_name():
    src = kc.KafkaChangelog.from_url("kafka://b:9092", "pg.eu-1", config_env="DBLOG_TEST_NO_SUCH_VAR")
    assert src.schema_topic == "pg.eu-1.dblog_schemas"
    assert java_matches(src.subscription[1], "pg.eu-1.public.t")
    assert not java_matches(src.subscription[1], "pgXeu-1.public.t")  # the dot is a dot
    one = kc.KafkaChangelog.from_url("kafka://b:9092?topic=all changes", "pg1", config_env="DBLOG_TEST_NO_SUCH_VAR")
    assert one.subscription == ("subscribe", "all_changes")
    assert one.schema_topic == "all_changes.dblog_schemas"


def test_without_a_prefix_or_source_the_topics_are_unknown():
    with pytest.raises(ConfigurationError, match="pass --source"):
        kc.KafkaChangelog.from_url("kafka://b:9092", None)


def test_debezium_format_is_refused_with_the_reason():
    with pytest.raises(ConfigurationError, match=r"format=debezium cannot be landed.*op k"):
        kc.KafkaChangelog.from_url("kafka://b:9092?format=debezium&connector=postgresql", "pg1")


def test_client_settings_come_from_the_environment_and_may_not_weaken_read_committed(monkeypatch):
    monkeypatch.setenv("DBLOG_SPARK_KAFKA_CONFIG", json.dumps({"security.protocol": "SASL_SSL", "kafka.x": 1}))
    opts = kc.client_options("b:9092")
    assert opts == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.x": "1",
        "kafka.bootstrap.servers": "b:9092",
        "kafka.isolation.level": "read_committed",
    }
    monkeypatch.setenv("DBLOG_SPARK_KAFKA_CONFIG", json.dumps({"isolation.level": "read_uncommitted"}))
    with pytest.raises(ConfigurationError, match="isolation.level"):
        kc.client_options("b:9092")
    monkeypatch.setenv("DBLOG_SPARK_KAFKA_CONFIG", '{"sasl.jaas.config": "secret-value"')
    with pytest.raises(ConfigurationError) as err:
        kc.client_options("b:9092")
    assert "secret-value" not in str(err.value)


def test_cli_reports_a_bad_kafka_url_before_starting_spark(capsys):
    assert main(["--lake", "/tmp/nowhere", "--kafka", "kafka://b:9092?format=debezium", "--source", "pg1"]) == 2
    assert "format=debezium cannot be landed" in capsys.readouterr().err
    args = build_parser().parse_args(["--lake", "/l", "--kafka", "kafka://b:9092"])
    assert args.kafka_config_env == kc.DEFAULT_CONFIG_ENV


def test_spark_jars_resolves_the_kafka_source_of_the_installed_spark():
    import os

    import pyspark

    jars = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    scala = next(re.match(r"scala-library-(\d+\.\d+)\.", j)[1] for j in jars if j.startswith("scala-library-"))
    assert kc.KAFKA_PACKAGE == f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}"
    out = subprocess.run(
        [str(REPO / "scripts" / "spark-jars"), "--kafka-package"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == kc.KAFKA_PACKAGE
