"""PostgreSQL as the rest of DBLog sees it (sources/source_descriptor.py): pgoutput or wal2json
logical replication, Airflow's ``postgres`` connection, positions of ``log.py``."""

from __future__ import annotations

from typing import Any, Optional

from ...config_kinds import TEXT, choice
from ...core.chunks import POSTGRES
from ...core.key_types import POSTGRES_KEY_TYPES
from ..source_descriptor import SourceDescriptor

# A position's coordinate: commit LSN (16 hex) + index in the transaction (10 digits), log.py.
COORDINATE_WIDTH, TRANSACTION_WIDTH = 26, 16
# A Postgres connection's own TLS extras (libpq names) are the [source] TLS keys as they are.
TLS_EXTRAS = ("sslmode", "sslrootcert", "sslcert", "sslkey")


def make(src: dict[str, Any], common: dict[str, Any]) -> Any:
    from .source import PostgresSource

    extra = {k: src[k] for k in ("plugin", "slot_name", "publication") if src.get(k)}
    return PostgresSource(
        port=int(src.get("port", DESCRIPTOR.default_port)),
        dbname=src.get("database", "postgres"),
        watermark_schema=src.get("watermark_schema", "dblog"),
        watermarks=src.get("watermarks", "table"),
        **extra,
        **common,
    )


def tls_extras(conn_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {k: extra[k] for k in TLS_EXTRAS if extra.get(k) not in (None, "")}


def debezium_source(first: str, rest: str, database: Optional[str], txid: Optional[str]) -> dict[str, Any]:
    """Debezium's PostgreSQL connector: db (the URL's database), schema, table and txId."""
    out: dict[str, Any] = {"db": database, "schema": first, "table": rest}
    if txid is not None and txid.isdigit():
        out["txId"] = int(txid)
    return out


def transaction_of(position: str) -> Optional[str]:
    coord = position.rpartition(".")[0]
    return coord[:TRANSACTION_WIDTH] if len(coord) == COORDINATE_WIDTH and not coord.startswith("g") else None


DESCRIPTOR = SourceDescriptor(
    kind="postgres",
    aliases=("postgresql", "pg"),
    config_keys={"plugin": choice("pgoutput", "wal2json"), "slot_name": TEXT, "publication": TEXT},
    default_port=5432,
    make=make,
    conn_types=("postgres", "postgresql"),
    airflow_provider=("apache-airflow-providers-postgres", "pip install apache-airflow-providers-postgres", ""),
    tls_extras=tls_extras,
    conn_database_extra="dbname",
    conn_extras=("slot_name", "publication", "plugin"),
    # the postgres provider's / psycopg2's own
    conn_driver_extras=frozenset(
        (
            "sslmode",
            "sslcert",
            "sslkey",
            "sslrootcert",
            "sslcrl",
            "application_name",
            "keepalives",
            "keepalives_idle",
            "keepalives_interval",
            "keepalives_count",
            "connect_timeout",
            "options",
            "client_encoding",
            "cursor",
            "iam",
            "redshift",
            "redshift-serverless",
            "aws_conn_id",
            "cluster-identifier",
            "workgroup-name",
            "enable_log_db_messages",
            "sqlalchemy_scheme",
            "sqlalchemy_options",
            "sqlalchemy_query",
            "azure_conn_id",
        )
    ),
    dialect=POSTGRES,
    key_types=POSTGRES_KEY_TYPES,
    mirror_types={
        **dict.fromkeys(("smallint", "int2"), "short"),
        **dict.fromkeys(("integer", "int4", "serial"), "int"),
        **dict.fromkeys(("bigint", "int8", "oid", "xid", "bigserial"), "long"),
        **dict.fromkeys(("real", "double precision", "float4", "float8"), "double"),
        "bytea": "binary",
        **dict.fromkeys(("json", "jsonb"), "json"),
        "timestamp without time zone": "timestamp_ntz",
        **dict.fromkeys(("timestamp with time zone", "timestamptz"), "timestamp"),
    },
    kafka_connector="postgresql",
    debezium_source=debezium_source,
    transaction_of=transaction_of,
)
