"""What the rest of DBLog knows about one database: a source package's one descriptor.

Each source package (``sources/postgres/``, ``sources/mysql/``) declares one
``SourceDescriptor`` in its ``descriptor.py`` and the registry (``sources/__init__.py``)
lists it; the config, the Airflow hook, the Kafka output and the Spark jobs look a database
up there (``descriptor(kind)``, ``descriptors()``) instead of naming it. A descriptor
module imports no driver: the Spark jobs and the Airflow hook read it too, and the source
itself (psycopg2, PyMySQL, ...) is imported only by ``make``.

What core/ needs of a database stays defined in core/ (core imports nothing else of the
package): its chunk SQL dialect (core/chunks.py) and its key types (core/key_types.py); the
descriptor names those objects, so a database is still registered in one place.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping, Optional

from ..config_kinds import Kind
from ..core.chunks import Dialect
from ..core.errors import ConfigurationError
from ..core.key_types import KeyTypes

# The families of source column types a mirror column has (spark/mirror_types.py maps each
# to its Spark type); a type in none of them is a decimal, boolean, date or string there.
# Debezium's ``source`` fields naming the table and the transaction of an event of table
# ``first.rest`` (``database``: the kafka:// URL's, ``txid``: the event's), as its connector
# writes them (outputs/kafka_format.py).
DebeziumSource = Callable[[str, str, Optional[str], Optional[str]], dict[str, Any]]
MIRROR_FAMILIES = ("byte", "short", "int", "long", "double", "binary", "json", "timestamp_ntz", "timestamp")


@dataclasses.dataclass(frozen=True)
class SourceDescriptor:
    kind: str  # the [source] type (config) and the registry's key: "postgres", "mysql"
    aliases: tuple[str, ...]  # other spellings of the type accepted in the config ("pg", "mariadb")
    # The [source] keys only this database reads (config_keys.py adds them to the common ones).
    config_keys: Mapping[str, Kind]
    default_port: int
    # Build the source from the checked [source] table and the keyword arguments every
    # source takes (source_id, host, user, password, tables, key_columns, tls).
    make: Callable[[dict[str, Any], dict[str, Any]], Any]
    # Airflow: the connection types that are this database, the provider that registers the
    # first one (distribution, how to install it, a note for the fix), the extra naming the
    # database when the connection's schema field is empty, and the connection's TLS extras
    # as [source] TLS keys (sources/tls.py): ``tls_extras(conn_id, extra)``.
    conn_types: tuple[str, ...]
    airflow_provider: tuple[str, str, str]
    tls_extras: Callable[[str, dict[str, Any]], dict[str, Any]]
    dialect: Dialect  # keyset chunk SQL (core/chunks.py)
    key_types: KeyTypes  # the type families a key value is checked against (core/key_types.py)
    mirror_types: Mapping[str, str]  # type base name -> one of MIRROR_FAMILIES (spark/mirror_types.py)
    kafka_connector: str  # the Debezium connector this source's kafka:// messages imitate
    debezium_source: DebeziumSource  # its naming of table and transaction in ``source``
    # The part of an encoded position (``<coordinate>.<sub>``) shared by every event of its
    # transaction, or None if the position is not one of this database's.
    transaction_of: Callable[[str], Optional[str]]
    conn_database_extra: Optional[str] = None  # e.g. PostgreSQL's "dbname"
    # DBLog options in the connection's extras copied into [source] as they are (e.g. slot_name),
    # and the extras Airflow's provider and the drivers define for this connection type.
    conn_extras: tuple[str, ...] = ()
    conn_driver_extras: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.mirror_types.values()) - set(MIRROR_FAMILIES)
        if unknown:
            raise ValueError(f"{self.kind}: unknown mirror type families {sorted(unknown)}")


def extra_object(value: Any, name: str) -> Optional[dict[str, Any]]:
    """An Airflow connection extra that holds an object (the UI may give it as JSON text)."""
    if value in (None, "", {}):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ConfigurationError(
                f"the connection extra {name} is not valid JSON.",
                'write it as an object, e.g. {"shop.events": ["event_id"]}.',
            ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"the connection extra {name} is not an object.", "write it as a JSON object.")
    return value
