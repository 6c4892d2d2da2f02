"""MySQL and MariaDB as the rest of DBLog sees them (sources/source_descriptor.py): the binlog,
Airflow's ``mysql`` connection, positions of ``log.py`` and (GTID mode) ``gtid.py``."""

from __future__ import annotations

from typing import Any, Optional

from ...config_kinds import BOOL, HOST, SECONDS, integer, text_list
from ...core.chunks import MYSQL
from ...core.errors import ConfigurationError
from ...core.key_types import MYSQL_KEY_TYPES
from ..source_descriptor import SourceDescriptor, extra_object

# A position's coordinate: binlog file (6) + transaction start (12) + event offset (12) +
# row (6), log.py; in GTID mode (gtid.py) "g" + era (2) + counter (20) + row number (10),
# then "/<gtid>", the transaction being the part before the row number.
COORDINATE_WIDTH, TRANSACTION_WIDTH = 36, 18
GTID_HEAD, GTID_TRANSACTION = 33, 23
# A MySQL connection's ``ssl_mode`` as the [source] sslmode (sources/tls.py).
SSL_MODES = {
    "disabled": "disable",
    "preferred": "prefer",
    "required": "require",
    "verify_ca": "verify-ca",
    "verify_identity": "verify-full",
}


def make(src: dict[str, Any], common: dict[str, Any]) -> Any:
    from .source import MySQLSource

    mysql_extra: dict[str, Any] = {"server_id": int(src["server_id"])} if src.get("server_id") else {}
    if src.get("use_gtid") is not None:
        mysql_extra["use_gtid"] = src["use_gtid"]
    if src.get("replicas"):
        mysql_extra["replicas"] = list(src["replicas"])
    if src.get("chunk_replica"):  # chunks read on this replica (mysql/chunk_replica.py)
        mysql_extra["chunk_replica"] = str(src["chunk_replica"])
    if src.get("chunk_replica_timeout") is not None:
        mysql_extra["chunk_replica_timeout"] = float(src["chunk_replica_timeout"])
    return MySQLSource(
        port=int(src.get("port", DESCRIPTOR.default_port)),
        databases=src.get("databases")
        or ([src["database"]] if src.get("database") and not src.get("tables") else None),
        watermark_database=src.get("watermark_schema", "dblog"),
        watermarks=src.get("watermarks", "table"),
        **mysql_extra,
        **common,
    )


def tls_extras(conn_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    """A MySQL connection's ``ssl`` object (ca, cert, key, check_hostname) and ``ssl_mode``."""
    out: dict[str, Any] = {}
    ssl = (extra_object(extra.get("ssl"), "ssl") if extra.get("ssl") not in (None, "", False) else None) or {}
    for ours, theirs in (("sslrootcert", "ca"), ("sslcert", "cert"), ("sslkey", "key")):
        if ssl.get(theirs):
            out[ours] = ssl[theirs]
    mode = str(extra.get("ssl_mode") or "").lower()
    if mode:
        if mode not in SSL_MODES:
            raise ConfigurationError(
                f"connection {conn_id} has ssl_mode {extra['ssl_mode']!r}.",
                f"use one of {', '.join(m.upper() for m in SSL_MODES)}.",
            )
        out["sslmode"] = SSL_MODES[mode]
    elif ssl:  # an ssl object without ssl_mode: verify as far as it allows
        verify = "verify-full" if ssl.get("check_hostname", True) else "verify-ca"
        out["sslmode"] = verify if ssl.get("ca") else "require"
    return out


def debezium_source(first: str, rest: str, database: Optional[str], txid: Optional[str]) -> dict[str, Any]:
    """Debezium's MySQL connector: db (the table's database), table and gtid (GTID mode)."""
    out: dict[str, Any] = {"db": first, "table": rest}
    if txid is not None and ":" in txid:
        out["gtid"] = txid
    return out


def transaction_of(position: str) -> Optional[str]:
    coord = position.rpartition(".")[0]
    if coord.startswith("g"):
        coord = coord.partition("/")[0]
        return coord[:GTID_TRANSACTION] if len(coord) == GTID_HEAD else None
    return coord[:TRANSACTION_WIDTH] if len(coord) == COORDINATE_WIDTH else None


DESCRIPTOR = SourceDescriptor(
    kind="mysql",
    aliases=("mariadb",),
    config_keys={
        "databases": text_list("database names", '["shop"]'),
        "server_id": integer(1, 2**32 - 1, 4242),  # MySQL's server_id is 32-bit; 0 cannot replicate
        "use_gtid": BOOL,
        "replicas": text_list('"host:port" strings', '["db2:3306"]'),
        "chunk_replica": HOST,
        "chunk_replica_timeout": SECONDS,
    },
    default_port=3306,
    make=make,
    conn_types=("mysql", "mariadb"),
    airflow_provider=(
        "apache-airflow-providers-mysql",
        "pip install 'airflow-provider-dblog[mysql]'",
        " (it builds mysqlclient: needs pkg-config and the MariaDB/MySQL client headers, e.g. Debian's libmariadb-dev)",
    ),
    tls_extras=tls_extras,
    conn_extras=("server_id", "use_gtid", "databases", "chunk_replica", "chunk_replica_timeout"),
    # the mysql provider's / drivers' own
    conn_driver_extras=frozenset(
        (
            "charset",
            "unix_socket",
            "ssl",
            "ssl_mode",
            "local_infile",
            "client",
            "init_command",
            "compress",
            "named_pipe",
            "conv",
            "use_pure",
            "allow_local_infile",
        )
    ),
    dialect=MYSQL,
    key_types=MYSQL_KEY_TYPES,
    mirror_types={
        "tinyint": "byte",
        **dict.fromkeys(("smallint", "year"), "short"),
        **dict.fromkeys(("int", "integer", "mediumint"), "int"),
        "bigint": "long",
        **dict.fromkeys(("float", "double", "real", "double precision"), "double"),
        **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), "binary"),
        "json": "json",
        "datetime": "timestamp_ntz",
        "timestamp": "timestamp",
    },
    kafka_connector="mysql",
    debezium_source=debezium_source,
    transaction_of=transaction_of,
)
