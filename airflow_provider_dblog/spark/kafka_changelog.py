"""The Kafka output's topics as the landing job's changelog stream (docs/kafka.md, "Landing").

``land_changelog --kafka kafka://broker:9092?topic_prefix=pg1`` reads the topics the capture's
``kafka://`` output writes with Spark's Kafka source instead of the Delta changelog, and hands
``Lander.land_batch`` the same columns the Delta changelog has, so the mirrors are the same:

* **Which topics.** The capture's own output URL says it: ``<prefix>.<table>`` topics (the
  prefix defaults to the source id, as in the output) or the one ``topic``; the schemas come
  from the compacted ``<prefix or topic>.dblog_schemas`` topic (``KafkaSchemaStore``).
* **Only committed batches.** The source reads with ``kafka.isolation.level=read_committed``:
  a capture batch is one Kafka transaction, and records of an aborted (or still open) one
  are never landed.
* **Offsets in the checkpoint.** Spark's Kafka source keeps the offsets of every micro-batch
  in the streaming checkpoint (nothing is committed to a consumer group), so a run lands
  only records no earlier run landed, and a batch replayed after a crash has the same
  offsets, hence the same records, and the mirrors' transaction ids skip it.
* **Order.** Records of a key are in one partition in position order, but partitions (and
  topics) are read side by side; the lander needs no order: per key the highest position
  wins and the merge never replaces a newer row. A TRUNCATE or a dump range is copied into
  every partition, each copy after that partition's older events, so a copy read before
  another partition's older events is followed by the copy of that partition, which
  tombstones them again. The copies are landed as they come (all alike: idempotent).
* **Formats.** ``format=dblog`` only: the value is the changelog record of the JSON lines
  output (docs/changelog-format.md), parsed with Spark SQL alone (no Python UDF, executors
  need nothing); ``after`` is cut out of the record's text as is (``exact_after``).
  ``format=debezium`` is refused: see ``DEBEZIUM_REFUSED``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import time
from typing import Any, Optional

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import TableSchema
from airflow_provider_dblog.outputs.kafka import SCHEMA_TOPIC_SUFFIX, parse_url
from airflow_provider_dblog.outputs.kafka_format import topic_name
from airflow_provider_dblog.spark.schema_store import SchemaStore

# Spark's Kafka source for the installed Spark (4.2.0, Scala 2.13); spark/jars.py resolves it
# with its dependencies once.
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"

# A JSON object of Kafka *Java* client settings (security.protocol, sasl.jaas.config,
# ssl.truststore.location, ...) for the Spark job: secrets never in arguments. Not the
# capture's DBLOG_KAFKA_CONFIG, which holds librdkafka's names for some of the same things.
DEFAULT_CONFIG_ENV = "DBLOG_SPARK_KAFKA_CONFIG"
# Settings the job chooses: exactly once depends on them (Spark refuses some others itself).
_OWNED = ("isolation.level", "bootstrap.servers")

DEBEZIUM_REFUSED = (
    "the Kafka output's format=debezium cannot be landed: Debezium's envelope has no form for "
    "a dump chunk's key range (op k), so a dump could not remove rows deleted while nothing "
    "was captured, and its TOAST stand-in is a plain string a text column may hold too."
)

# The dblog record's fields (outputs/jsonl.py ``_record``), read as text. ``key``, ``before``
# and ``after`` are JSON values in the record: from_json gives a string field a nested value's
# text as Jackson writes it again (numbers re-printed: 10000000.0 becomes 1.0E7), which is
# why ``after`` is cut out of the record instead (``exact_after``).
RECORD = T.StructType(
    [T.StructField(n, T.StringType()) for n in ("source_id", "table", "op", "key", "before", "after", "position")]
    + [T.StructField(n, T.StringType()) for n in ("origin", "dump_id", "schema_id", "commit_ts", "txid")]
    + [T.StructField("epoch", T.LongType()), T.StructField("written_at", T.StringType())]
)


_AFTER, _POSITION = '"after":', ',"position":"'


def exact_after(text: Column, parsed: Column) -> Column:
    """The ``after`` object's text exactly as the record holds it: the text the Delta
    changelog's ``after`` column holds, so JSON columns land with the same text and the TOAST
    placeholder is found. The record is written field by field in a fixed order (orjson, no
    spaces), ``after`` right before ``position``; the position and every later field are
    strings, numbers or null, so the last ``,"position":"`` ends it. Where ``"after":``
    occurs more than once (a JSON column with such a key), the start is ambiguous: then
    Jackson's re-printed text (``parsed``), equal as JSON. NULL where ``after`` is null."""
    start = F.locate(_AFTER, text) + len(_AFTER)
    last_position = F.length(text) - F.locate(_POSITION[::-1], F.reverse(text)) - len(_POSITION) + 2
    cut = F.substring(text, start, last_position - start)  # substring takes Columns for both
    once = F.length(text) - F.length(F.replace(text, F.lit(_AFTER), F.lit(""))) == len(_AFTER)
    return (
        F.when(parsed.isNull(), F.lit(None)).when(once & cut.startswith("{") & cut.endswith("}"), cut).otherwise(parsed)
    )


def changelog_columns(value: Column, record_key: Column) -> list[Column]:
    """The Delta changelog's columns (outputs/delta.py CHANGELOG_SCHEMA) from a Kafka
    record's value and key. ``key`` is the record's key: the canonical key text the
    capture writes there (``[42]``; ``[]`` for t and k), the mirrors' merge key."""
    text = value.cast("string")
    rec = F.from_json(text, RECORD, {"mode": "FAILFAST"})

    def required(name: str) -> Column:
        # Never a NULL where the changelog has none: such a record is not DBLog's (a
        # Debezium envelope, another producer's record on the topic): stop, do not skip.
        return F.when(rec[name].isNull(), F.raise_error(F.lit(f"{NOT_DBLOG} (no {name!r})"))).otherwise(rec[name])

    return [
        required("source_id").alias("source_id"),
        required("table").alias("table"),
        required("op").alias("op"),
        F.coalesce(record_key.cast("string"), required("key")).alias("key"),
        rec["before"].alias("before"),
        exact_after(text, rec["after"]).alias("after"),
        required("position").alias("position"),
        required("origin").alias("origin"),
        rec["dump_id"].alias("dump_id"),
        rec["schema_id"].alias("schema_id"),
        rec["commit_ts"].cast(T.TimestampType()).alias("commit_ts"),  # ISO-8601 with +00:00
        rec["txid"].alias("txid"),
        rec["epoch"].alias("epoch"),
        rec["written_at"].cast(T.TimestampType()).alias("written_at"),
    ]


NOT_DBLOG = (
    "a Kafka record is not a DBLog changelog record (format=dblog); land only topics of a "
    "kafka:// output with format=dblog"
)


def client_options(bootstrap: str, config_env: str = DEFAULT_CONFIG_ENV) -> dict[str, str]:
    """The Kafka source's ``kafka.*`` options: the bootstrap servers, read_committed, and the
    Java client settings of the JSON object in ``$config_env`` (if set)."""
    settings: dict[str, Any] = {}
    text = os.environ.get(config_env)
    if text:
        try:
            settings = json.loads(text)
        except ValueError:  # the message could quote a secret: not shown
            raise ConfigurationError(
                f"${config_env} does not hold valid JSON (an object of Kafka Java client settings).",
                'set it to e.g. {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", '
                '"sasl.jaas.config": "..."}.',
            ) from None
        if not isinstance(settings, dict):
            raise ConfigurationError(f"${config_env} is not a JSON object.", "set it to a JSON object of settings.")
    owned = [k for k in settings if k.removeprefix("kafka.") in _OWNED]
    if owned:
        raise ConfigurationError(
            f"${config_env} sets {', '.join(owned)}, which the landing job chooses itself.",
            "remove them (the bootstrap servers come from the kafka:// URL; only committed "
            "transactions may be landed, so isolation.level is read_committed).",
        )
    out = {(k if k.startswith("kafka.") else f"kafka.{k}"): str(v) for k, v in settings.items()}
    return {**out, "kafka.bootstrap.servers": bootstrap, "kafka.isolation.level": "read_committed"}


@dataclasses.dataclass(frozen=True)
class KafkaChangelog:
    """Where the capture's Kafka output put a source's changelog, and how to read it."""

    options: dict[str, str]  # kafka.* client options (bootstrap, read_committed, settings)
    subscription: tuple[str, str]  # ("subscribe", topic) or ("subscribePattern", regex)
    schema_topic: str
    max_records_per_batch: Optional[int] = None

    @classmethod
    def from_url(
        cls,
        url: str,
        source_id: Optional[str],
        config_env: str = DEFAULT_CONFIG_ENV,
        max_records_per_batch: Optional[int] = None,
    ) -> "KafkaChangelog":
        """From the capture's ``[output] url`` (``kafka://host:port?topic_prefix=...``):
        the same topic names the output writes (outputs/kafka.py)."""
        if not url.startswith("kafka://"):
            raise ConfigurationError(
                f"--kafka {url!r} is not a kafka:// URL.", "give the capture's output URL, kafka://host:port?..."
            )
        bootstrap, opts = parse_url(url[len("kafka://") :])
        if opts.get("format", "dblog") != "dblog":
            raise ConfigurationError(
                DEBEZIUM_REFUSED,
                "write the changelog with format=dblog (the default) to land it, or land the Delta "
                "changelog (delta:// output).",
            )
        if opts.get("topic"):
            topic = topic_name(opts["topic"])
            subscription, schemas = ("subscribe", topic), topic + SCHEMA_TOPIC_SUFFIX
        else:
            prefix = opts.get("topic_prefix") or source_id
            if not prefix:
                raise ConfigurationError(
                    "landing from Kafka needs to know the topics: the URL has neither topic_prefix nor topic, "
                    "and no --source names the output's default prefix (the source id).",
                    "pass --source, or the URL's topic_prefix / topic as in the capture's output URL.",
                )
            # <prefix>.<table>, no schema topic (as KafkaOutput.topics_of). A Java regex that
            # must match the whole topic name.
            schemas = topic_name(prefix) + SCHEMA_TOPIC_SUFFIX
            not_schemas = f"(?!.*{re.escape(SCHEMA_TOPIC_SUFFIX)}$)"
            subscription = ("subscribePattern", f"{not_schemas}{re.escape(topic_name(prefix))}\\..+")
        return cls(client_options(bootstrap, config_env), subscription, schemas, max_records_per_batch)

    def stream(self, spark: SparkSession) -> DataFrame:
        """The changelog as a streaming DataFrame (the Delta changelog's columns)."""
        reader = (
            spark.readStream.format("kafka")
            .options(**self.options)
            .option(*self.subscription)
            .option("startingOffsets", "earliest")  # the first run; later ones resume from the checkpoint
            # Records deleted by retention before they were landed: stop (the mirrors would
            # miss them); land again from a new dump instead.
            .option("failOnDataLoss", "true")
        )
        if self.max_records_per_batch:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_records_per_batch))
        records = reader.load()
        return records.select(*changelog_columns(F.col("value"), F.col("key")))

    def schema_store(self, spark: SparkSession) -> "KafkaSchemaStore":
        return KafkaSchemaStore(spark, self)


class KafkaSchemaStore(SchemaStore):
    """The schema topic as the lander's schema store (``SchemaStore``'s interface).

    The capture writes a schema in the same transaction as, and before, the first record that
    names it; but Kafka writes a transaction's commit markers partition by partition, so a
    data record may be readable a moment before the schema topic's copy: an unknown id is
    looked up again for up to ``wait`` seconds before it is an error."""

    wait = 30.0

    def __init__(self, spark: SparkSession, changelog: KafkaChangelog):
        super().__init__(spark, f"kafka topic {changelog.schema_topic}")
        self.changelog = changelog

    def _load(self) -> None:
        rows = (
            self.spark.read.format("kafka")
            .options(**self.changelog.options)
            .option("subscribe", self.changelog.schema_topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("failOnDataLoss", "false")  # compaction removes superseded offsets: not a loss
            .load()
            .select(F.col("value").cast("string").alias("value"))
            .collect()
        )
        by_id = {}
        for r in rows:
            rec = json.loads(r.value)
            at = _dt.datetime.fromisoformat(rec["registered_at"])
            by_id[rec["schema_id"]] = (TableSchema.from_json(rec["schema_json"]), at)
        self.by_id = by_id

    def versions(self, table: str, ids: list[Optional[str]]) -> list[TableSchema]:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return super().versions(table, ids)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
                self.by_id = {}  # read the topic again
