"""The Kafka output from an Airflow ``kafka`` connection (the connection type of
``apache-airflow-providers-apache-kafka``, whose extra is a JSON object of librdkafka
settings: ``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*`` ...).

Only the connection is read here (Airflow's Connection API), so the Kafka provider need not
be installed. The settings never enter the output URL, the config file, argv or XCom: the
capture child gets them as JSON in its environment (``DBLOG_KAFKA_CONFIG``), and an output
built in this process gets them in memory.

Extras that are DBLog output options, not client settings: ``topic_prefix``, ``topic``,
``format`` (dblog | debezium), ``connector`` (postgresql | mysql), ``database``,
``transactional_id_prefix``, ``create_topics`` and ``schemas`` (true | false, a JSON boolean
too), ``decimal_handling_mode``, ``partitions`` and ``replication_factor`` (of the topics the
output creates).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from ..core.errors import ConfigurationError
from ..outputs.kafka import _OWNED, DEFAULT_CONFIG_ENV, URL_PARAMS, KafkaOutput

KAFKA_CONN_TYPE = "kafka"
# The URL's options but the one naming the client settings' variable (the hook fills it).
OUTPUT_EXTRAS = tuple(p for p in URL_PARAMS if p != "config_env")


def _option(value: Any) -> str:
    """An extra's value as the URL option's text (a JSON ``false`` is ``false``, not ``False``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _split(conn_id: str, conn: Any) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(bootstrap servers, output options, client settings) of a ``kafka`` connection."""
    if (conn.conn_type or "") != KAFKA_CONN_TYPE:
        raise ConfigurationError(
            f"connection {conn_id} is of type {conn.conn_type!r}, not {KAFKA_CONN_TYPE!r}.",
            "use an Airflow Kafka connection (its extra holds bootstrap.servers and the client settings).",
        )
    extra = dict(conn.extra_dejson or {})
    options = {k: _option(extra.pop(k)) for k in OUTPUT_EXTRAS if k in extra}
    # A consumer's group.id and the like are common in these connections: the output sets
    # its own (exactly once depends on them), so theirs are left out rather than refused.
    settings = {k: v for k, v in extra.items() if k not in _OWNED}
    bootstrap = settings.pop("bootstrap.servers", None)
    if not bootstrap and conn.host:
        bootstrap = f"{conn.host}:{conn.port}" if conn.port else conn.host
    if not bootstrap:
        raise ConfigurationError(
            f"connection {conn_id} names no Kafka bootstrap servers.",
            'set "bootstrap.servers" in its extra (e.g. "broker1:9092,broker2:9092").',
        )
    return str(bootstrap), options, settings


def kafka_output_config(conn_id: str, conn: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``[output]`` table for the capture child (no secret in it) and the environment
    variables to add to the child's environment (the client settings)."""
    bootstrap, options, settings = _split(conn_id, conn)
    query = urllib.parse.urlencode({**options, "config_env": DEFAULT_CONFIG_ENV})
    return {"url": f"kafka://{bootstrap}?{query}"}, {DEFAULT_CONFIG_ENV: json.dumps(settings)}


def kafka_output(conn_id: str, conn: Any) -> KafkaOutput:
    """The output itself, for this process (settings in memory, not in the environment)."""
    bootstrap, options, settings = _split(conn_id, conn)
    return KafkaOutput(bootstrap, options, client_settings=settings)
