"""The Kafka output: the change stream as Kafka records, exactly once (docs/kafka.md).

``kafka://host:port[,host:port]?topic_prefix=P&topic=T&format=dblog|debezium&...``

* Topics: ``<prefix>.<table>`` per captured table (prefix: the source id unless given), or
  every table in one ``topic``; schemas go to the compacted ``<prefix or topic>.dblog_schemas``.
* Records: key = the row's primary key, partition = Kafka's murmur2 of the canonical key text,
  so every event of a key lands in one partition in position order; TRUNCATE (``t``) and
  dump-range (``k``) events go to every partition of the table's topic.
* Exactly once: each ``write`` is one Kafka transaction per source, with
  ``transactional.id = <transactional_id_prefix><source id>``. Before its first write for a
  source, the output calls ``init_transactions`` (which fences any earlier producer of that
  source, a deposed leader included, and settles its open transaction) and then reads the
  tails of the source's topics with ``read_committed``: the highest position and epoch found
  there are the source's ``last_position`` and the epoch a later write must not go below.
  A write that fails drops its producer, so the next one starts over the same way and skips
  what did commit.

Client settings beyond the bootstrap servers (security, SASL, TLS files) come as a JSON
object of librdkafka properties from the environment variable named by ``config_env``
(default ``DBLOG_KAFKA_CONFIG``; Airflow's ``kafka`` connection fills it, hooks/kafka.py),
never from the URL: no secret in argv or logs.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.parse
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from ..core.errors import ConfigurationError, StaleEpochError
from ..core.events import ChangeEvent, Key, Position, Row, TableSchema
from ..core.protocols import WholeRowConsumers
from ._common import Bookkeeping, now_micros
from ._urls import _ACCEPTED
from .connect_schema import DECIMAL_MODES, table_connect_schema
from .kafka_columns import Records, dblog_records, debezium_records
from .kafka_format import (
    BROADCAST_OPS,
    CONNECTORS,
    FORMATS,
    H_EPOCH,
    H_OP,
    H_POSITION,
    H_SOURCE,
    H_TABLE,
    Formatter,
    event_from_message,
    header_map,
    murmur2_partitions,
    schema_record,
    topic_name,
)

log = logging.getLogger(__name__)

DEFAULT_CONFIG_ENV = "DBLOG_KAFKA_CONFIG"
URL_PARAMS = (
    "topic_prefix",
    "topic",
    "format",
    "connector",
    "database",
    "config_env",
    "transactional_id_prefix",
    "create_topics",
    "schemas",
    "decimal_handling_mode",
    "partitions",
    "replication_factor",
    "tombstones",
)
SCHEMA_TOPIC_SUFFIX = ".dblog_schemas"
TIMEOUT = 30.0  # seconds for one metadata, init or commit call
# librdkafka settings that are ours to choose: exactly once depends on them.
_OWNED = ("transactional.id", "isolation.level", "enable.idempotence", "group.id", "enable.auto.commit", "partitioner")


def _kafka():
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ConfigurationError(
            f"the Kafka output needs the 'confluent-kafka' package, which cannot be imported ({exc}).",
            "pip install 'confluent-kafka>=2.6,<3'.",
        ) from exc
    return confluent_kafka


def parse_url(rest: str) -> tuple[str, dict[str, str]]:
    """``host:port,...?k=v&...`` (the part after ``kafka://``) -> bootstrap servers, options."""
    hosts, _, query = rest.partition("?")
    hosts = hosts.rstrip("/")
    if "/" in hosts:
        raise ConfigurationError(
            f"the kafka:// output URL has a path ({hosts!r}); a topic is an option, not a path.",
            "write kafka://host:port?topic=NAME for one topic, or ?topic_prefix=P for one per table; " + _ACCEPTED,
        )
    if not hosts:
        raise ConfigurationError(
            "the kafka:// output URL names no bootstrap server.",
            "write it as kafka://host:port[,host:port]?topic_prefix=...; " + _ACCEPTED,
        )
    options: dict[str, str] = {}
    for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if k not in URL_PARAMS:
            raise ConfigurationError(
                f"unknown option {k!r} in the kafka:// output URL.",
                f"use only {', '.join(URL_PARAMS)}; client settings (security, SASL) go into "
                f"the JSON object in ${DEFAULT_CONFIG_ENV} (or the variable config_env names).",
            )
        options[k] = v
    if options.get("format", "dblog") not in FORMATS:
        raise ConfigurationError(f"unknown Kafka value format {options['format']!r}.", "use format=dblog or debezium.")
    _check_flags(options)
    if options.get("decimal_handling_mode", "precise") not in DECIMAL_MODES:
        raise ConfigurationError(
            f"unknown decimal_handling_mode {options['decimal_handling_mode']!r} in the kafka:// URL.",
            "use precise (Connect's Decimal, the default), string (the exact text) or double (may round).",
        )
    for name in ("partitions", "replication_factor"):
        text = options.get(name)
        if text is not None and not (text.isdigit() and int(text) >= 1):
            raise ConfigurationError(
                f"{name}={text!r} in the kafka:// URL is not a whole number of at least 1.",
                f"write e.g. {name}=3, or leave it out for the broker's default.",
            )
    if options.get("connector") not in (None, *CONNECTORS):
        raise ConfigurationError(
            f"unknown connector {options['connector']!r} in the kafka:// URL.", "use postgresql or mysql."
        )
    return hosts, options


# The URL's true/false options: (what true means, whether it needs format=debezium and why).
_FLAGS = {
    "schemas": ("Kafka Connect's JSON with schemas", "the Debezium envelope with Kafka Connect schemas"),
    "tombstones": (
        "a null-value record after each delete",
        "the changelog format keeps deletes as records a replay needs",
    ),
    "create_topics": ("the output creates missing topics (the default)", None),
}


def _check_flags(options: dict[str, str]) -> None:
    for name, (meaning, debezium_only) in _FLAGS.items():
        value = options.get(name)
        if value not in (None, "true", "false"):
            raise ConfigurationError(
                f"{name}={value!r} in the kafka:// URL is neither true nor false.",
                f"write {name}=true ({meaning}) or {name}=false, or leave it out.",
            )
        if debezium_only and value == "true" and options.get("format") != "debezium":
            raise ConfigurationError(
                f"{name}=true in the kafka:// URL needs format=debezium ({debezium_only}).",
                f"add format=debezium, or leave {name} out.",
            )


def client_config(bootstrap: str, config_env: str, settings: Optional[dict] = None) -> dict[str, Any]:
    """librdkafka settings: ``settings``, else the JSON object in ``$config_env`` (if set),
    plus the bootstrap servers of the URL (those win: the URL says where the changelog goes)."""
    conf: dict[str, Any] = dict(settings or {})
    text = None if settings is not None else os.environ.get(config_env)
    if text:
        try:
            conf = json.loads(text)
        except ValueError:  # the message could quote a secret: not shown
            raise ConfigurationError(
                f"${config_env} does not hold valid JSON (an object of Kafka client settings).",
                'set it to e.g. {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", ...}.',
            ) from None
        if not isinstance(conf, dict):
            raise ConfigurationError(f"${config_env} is not a JSON object.", "set it to a JSON object of settings.")
    owned = [k for k in conf if k in _OWNED]
    if owned:
        raise ConfigurationError(
            f"${config_env} sets {', '.join(owned)}, which the Kafka output chooses itself.",
            "remove them (exactly once depends on their values; transactional_id_prefix is a URL option).",
        )
    return {**conf, "bootstrap.servers": bootstrap}


class KafkaOutput(WholeRowConsumers):
    """``Output``/``ReadableOutput`` over Kafka topics (see the module docstring); declares
    ``WholeRowConsumers`` (core/protocols.py): in Debezium's envelope its rows go to sinks."""

    def __init__(
        self, bootstrap: str, options: Optional[dict[str, str]] = None, client_settings: Optional[dict] = None
    ):
        """``client_settings``: librdkafka settings given in memory (hooks/kafka.py) instead
        of through the environment."""
        options = dict(options or {})
        self._settings = dict(client_settings) if client_settings is not None else None
        self.bootstrap = bootstrap
        self.topic_prefix = options.get("topic_prefix") or None
        self.single_topic = topic_name(options["topic"]) if options.get("topic") else None
        self.formatter = Formatter(
            options.get("format", "dblog"),
            options.get("connector"),
            options.get("database"),
            schemas=options.get("schemas") == "true",
            decimal_mode=options.get("decimal_handling_mode", "precise"),
            tombstones=options.get("tombstones") == "true",
        )
        self.config_env = options.get("config_env") or DEFAULT_CONFIG_ENV
        self.txn_prefix = options.get("transactional_id_prefix", "dblog.")
        # False: topics are an administrator's to create (no CREATE ACL): a missing one stops
        # the capture with the topics to create and their settings.
        self.create_topics = options.get("create_topics", "true") == "true"
        # Of the topics the output creates (-1: the broker's default); Debezium's
        # topic.creation.default.partitions / .replication.factor.
        self.partitions = int(options.get("partitions", "-1"))
        self.replication_factor = int(options.get("replication_factor", "-1"))
        self._conf: dict[str, Any] = {}
        self._admin: Any = None
        self._producers: dict[str, Any] = {}
        self._book = Bookkeeping()
        self._scanned: set[str] = set()
        self._partitions: dict[str, int] = {}
        self._schemas: dict[str, TableSchema] = {}
        self._unwritten: list[TableSchema] = []

    def __repr__(self) -> str:  # the client settings may hold secrets: never shown
        return f"KafkaOutput({self.bootstrap!r}, format={self.formatter.fmt!r})"

    def needs_whole_rows(self) -> bool:
        """Debezium's envelope goes to sinks that write ``after`` as the row (core/protocols.py
        WholeRowConsumers): every unchanged-TOAST placeholder gets a repair dump."""
        return self.formatter.fmt == "debezium"

    # -- names ---------------------------------------------------------------------------
    def prefix(self, source_id: str) -> str:
        return self.topic_prefix or source_id

    def topic_for(self, source_id: str, table: str) -> str:
        return self.single_topic or topic_name(f"{self.prefix(source_id)}.{table}")

    def schema_topic(self, source_id: str) -> str:
        return (self.single_topic or topic_name(self.prefix(source_id))) + SCHEMA_TOPIC_SUFFIX

    def topics_of(self, source_id: str) -> list[str]:
        """The existing topics that may hold this source's records."""
        names = self._admin.list_topics(timeout=TIMEOUT).topics
        if self.single_topic:
            return [self.single_topic] if self.single_topic in names else []
        start = topic_name(self.prefix(source_id)) + "."
        return sorted(t for t in names if t.startswith(start) and not t.endswith(SCHEMA_TOPIC_SUFFIX))

    # -- lifecycle -----------------------------------------------------------------------
    def _client_config(self) -> dict[str, Any]:
        if self._settings is None:
            return client_config(self.bootstrap, self.config_env)
        return client_config(self.bootstrap, self.config_env, self._settings)

    def open(self) -> None:
        ck = _kafka()
        self._conf = self._client_config()
        self._admin = ck.admin.AdminClient(dict(self._conf))
        try:
            self._admin.list_topics(timeout=TIMEOUT)
        except ck.KafkaException as exc:
            raise ConfigurationError(
                f"cannot reach the Kafka cluster at {self.bootstrap}: {exc.args[0].str()}",
                "check the bootstrap servers in the output URL and the client settings "
                f"(${self.config_env}), and that the brokers run.",
            ) from None
        self._book = Bookkeeping()
        self._scanned = set()

    def close(self) -> None:
        for producer in self._producers.values():
            producer.flush(5)
        self._producers = {}
        self._admin = None

    def last_position(self, source_id: str) -> Optional[Position]:
        self._source(source_id)
        return self._book.positions.get(source_id)

    def _source(self, source_id: str) -> Any:
        """This source's transactional producer, initialised (fencing every earlier one of
        the source), and its bookkeeping read from the topics' committed tails."""
        producer = self._producers.get(source_id)
        if producer is None:
            ck = _kafka()
            conf = {
                "linger.ms": 5,
                "compression.type": "lz4",
                **self._conf,
                "partitioner": "murmur2_random",  # Kafka's Java client's, for keyed records
                "transactional.id": self.txn_prefix + source_id,
                "transaction.timeout.ms": 60000,
            }
            producer = ck.Producer(conf)
            producer.init_transactions(TIMEOUT)
            self._producers[source_id] = producer
            self._scanned.discard(source_id)
        if source_id not in self._scanned:
            from .kafka_tail import read_tails

            found = read_tails(self._conf, self.topics_of(source_id), source_id, TIMEOUT)
            if found is not None:
                self._book.merge_position(source_id, found[0])
                if found[1] is not None:
                    self._book.merge_epoch(source_id, found[1])
            self._scanned.add(source_id)
        return producer

    # -- writing -------------------------------------------------------------------------
    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        for schema in schemas:
            self.register_schema(schema)

    def register_schema(self, schema: TableSchema) -> None:
        """Kept, and written to the schema topic in the next write's transaction (so before
        the first record that names it, and atomically with it)."""
        sid = schema.schema_id()
        if sid not in self._schemas:
            self._schemas[sid] = schema
            self._unwritten.append(schema)

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        if not events:
            return
        sources = self._book.source_ids(events)
        for sid in sources:
            self._source(sid)
        self._book.check_epoch(sources, epoch)
        fresh = self._book.fresh(events)
        if not fresh:
            return
        if len(sources) == 1:  # a capture's batch: kept whole (an EventBatch keeps its blocks)
            self._commit(sources[0], fresh, epoch)
            return
        by_source: dict[str, list[ChangeEvent]] = {}
        for e in fresh:
            by_source.setdefault(e.source_id, []).append(e)
        for sid, batch in by_source.items():
            self._commit(sid, batch, epoch)

    def _commit(self, source_id: str, events: Sequence[ChangeEvent], epoch: Optional[int]) -> None:
        ck = _kafka()
        written_at = now_micros()
        fmt = self.formatter
        topic_of = lambda table: self.topic_for(source_id, table)  # noqa: E731
        if fmt.fmt == "dblog":  # built column-wise (outputs/kafka_columns.py)
            records = dblog_records(events, epoch, topic_of)
        elif not fmt.schemas:
            records = debezium_records(events, epoch, topic_of, fmt, self._schemas)
        else:  # schemas=true: Debezium's types, record by record
            messages = []
            for e in events:
                topic = topic_of(e.table)
                msg = fmt.message(e, epoch, written_at, self._schemas.get(e.schema_id or ""), topic)
                if msg is not None:
                    messages.append((topic, msg))
            records = Records.of_messages(messages)
        schemas = list(self._unwritten)
        self._ensure_topics(list(set(records.topics)), self.schema_topic(source_id) if schemas else None)
        nxt = self._book.advanced(events, epoch)
        producer = self._source(source_id)
        try:
            producer.begin_transaction()
            for s in schemas:
                self._produce(
                    producer, self.schema_topic(source_id), s.schema_id().encode(), schema_record(s, written_at)
                )
            self._produce_records(producer, records)
            producer.commit_transaction(TIMEOUT)
        except ck.KafkaException as exc:
            self._drop(source_id)
            err = exc.args[0]
            if err.code() in (
                ck.KafkaError._FENCED,
                ck.KafkaError.PRODUCER_FENCED,
                ck.KafkaError.INVALID_PRODUCER_EPOCH,
            ):
                raise StaleEpochError(
                    f"Kafka fenced the transactional producer of source {source_id!r}: another "
                    "capture process initialised the same transactional id, so it has taken over.",
                    "stop this capture process; only the current lease holder may write.",
                ) from None
            raise
        except BaseException:
            self._drop(source_id)
            raise
        self._book.adopt(nxt)
        del self._unwritten[: len(schemas)]

    def _produce_records(self, producer: Any, r: Records) -> None:
        """A batch's records (outputs/kafka_columns.py). Without partition keys,
        librdkafka's murmur2_random partitioner (ours to set: _OWNED) hashes the record key,
        the canonical key text, as Kafka's Java client does, in C."""
        produce, parts = producer.produce, self._partitions
        rows = zip(r.topics, r.keys, r.values, r.headers, r.broadcast)
        chosen = (
            None if r.partition_keys is None else murmur2_partitions(r.partition_keys, [parts[t] for t in r.topics])
        )
        for i, (topic, key, value, headers, broadcast) in enumerate(rows):
            if broadcast:  # a table-level event: every partition
                for p in range(parts[topic]):
                    self._produce(producer, topic, key, value, headers, p)
            elif chosen is None:
                try:
                    produce(topic, value=value, key=key, headers=headers)
                except BufferError:  # the client's queue is full: let it send, then again
                    self._produce(producer, topic, key, value, headers)
            else:
                p = chosen[i]
                try:
                    produce(topic, value=value, key=key, headers=headers, partition=p)
                except BufferError:
                    self._produce(producer, topic, key, value, headers, p)
                if r.tombstones is not None and r.tombstones[i]:  # no headers: never read as ours
                    self._produce(producer, topic, key, None, None, p)

    def _drop(self, source_id: str) -> None:
        """Forget a producer whose transaction failed: the next write initialises a new one
        (settling the old transaction either way) and re-reads the tails, so it resends
        exactly what did not commit."""
        producer = self._producers.pop(source_id, None)
        self._scanned.discard(source_id)
        if producer is not None:
            try:
                producer.abort_transaction(5)
            except Exception as exc:  # noqa: BLE001 - fenced or broken: init_transactions settles it
                log.info("aborting the failed Kafka transaction of %s: %s", source_id, exc)

    @staticmethod
    def _produce(producer, topic, key, value, headers=None, partition=-1) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers, partition=partition)
                return
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.05)

    def _ensure_topics(self, topics: Iterable[str], schema_topic: Optional[str]) -> None:
        """Create missing topics (broker defaults for partitions and replication; the schema
        topic compacted) and learn their partition counts."""
        ck = _kafka()
        wanted = {t for t in topics if t not in self._partitions}
        if schema_topic is not None and schema_topic not in self._partitions:
            wanted.add(schema_topic)
        if not wanted:
            return
        existing = self._admin.list_topics(timeout=TIMEOUT).topics
        missing = sorted(t for t in wanted if t not in existing)
        if missing and not self.create_topics:
            raise self._topics_to_create(
                missing, schema_topic, "the output does not create topics (create_topics=false)"
            )
        new = [
            ck.admin.NewTopic(
                t,
                num_partitions=self.partitions,
                replication_factor=self.replication_factor,
                config=self._topic_config(t, schema_topic),
            )
            for t in missing
        ]
        if new:
            refused = []
            for topic, future in self._admin.create_topics(new, request_timeout=TIMEOUT).items():
                try:
                    future.result()
                except ck.KafkaException as exc:
                    if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                        refused.append((topic, exc.args[0].str()))
            if refused:
                why = "Kafka refused to create them: " + "; ".join(f"{t}: {e}" for t, e in refused)
                raise self._topics_to_create(sorted(t for t, _ in refused), schema_topic, why)
        deadline = time.monotonic() + TIMEOUT
        while wanted:
            meta = self._admin.list_topics(timeout=TIMEOUT).topics
            for t in list(wanted):
                if t in meta and meta[t].error is None and meta[t].partitions:
                    self._partitions[t] = len(meta[t].partitions)
                    wanted.discard(t)
            if wanted and time.monotonic() > deadline:
                raise ConfigurationError(f"Kafka topics {sorted(wanted)} did not appear.", "check the brokers' logs.")
            if wanted:
                time.sleep(0.1)

    @staticmethod
    def _topic_config(topic: str, schema_topic: Optional[str]) -> dict[str, str]:
        return {"cleanup.policy": "compact"} if topic == schema_topic else {}

    def _topics_to_create(self, topics: list[str], schema_topic: Optional[str], why: str) -> ConfigurationError:
        """The error naming each missing topic and the settings it needs (docs/kafka.md)."""
        commands = "; ".join(
            f"kafka-topics.sh --bootstrap-server {self.bootstrap} --create --topic {t}"
            + "".join(f" --config {k}={v}" for k, v in self._topic_config(t, schema_topic).items())
            for t in topics
        )
        return ConfigurationError(
            f"the Kafka topics {', '.join(topics)} do not exist and {why}.",
            f"create them ({commands}); any partition count works (each key keeps one partition), a "
            "replication factor of 3 with min.insync.replicas=2 keeps them through a broker's loss, "
            "and the schema topic (…dblog_schemas) must be compacted. Or let the output create them: "
            "grant its principal CREATE on the cluster and leave create_topics out of the URL.",
        )

    # -- reading -------------------------------------------------------------------------
    def scan(self, source_id: str, table: str) -> Iterator[ChangeEvent]:
        """Every committed event of one table (``read_committed``); the copies of a TRUNCATE
        or key range in the topic's partitions come back once."""
        from .kafka_tail import read_records

        topic = self.topic_for(source_id, table)
        seen: set[Position] = set()
        for key, headers, value in read_records(self._conf or self._client_config(), [topic]):
            if value is None:  # a tombstone after a delete (tombstones=true)
                continue
            h = header_map(headers)
            if h.get(H_SOURCE) != source_id or h.get(H_TABLE) != table:
                continue
            if h.get(H_OP) in BROADCAST_OPS:  # one copy per partition: keep the first
                pos = Position.parse(h[H_POSITION])
                if pos in seen:
                    continue
                seen.add(pos)
            yield event_from_message(h, value, key)

    def source_form(self, schema: TableSchema) -> Optional[Callable[[dict[Key, Row]], dict[Key, Row]]]:
        """How ``scan``'s rows differ from the source's (core/protocols.py ``OwnRowForm``):
        ``schemas=true`` records hold Debezium's types (connect_schema.py), and ``dblog verify``
        compares the source's rows converted the way the capture converts them; None: the
        canonical values, as every other format."""
        f = self.formatter
        if not (f.fmt == "debezium" and f.schemas):
            return None
        return table_connect_schema(schema, f.decimal_mode).source_form


__all__ = ["KafkaOutput", "parse_url", "client_config", "H_EPOCH", "H_POSITION"]
