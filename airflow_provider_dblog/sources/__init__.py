"""The sources, one package per database, and their registry.

Everything outside ``sources/`` that depends on the database (the config's keys and
``make_source``, the Airflow hook's connection types and TLS extras, the Kafka connector
names, the mirrors' types, a position's transaction) asks ``descriptor(kind)`` or
``descriptors()`` (sources/source_descriptor.py). A new source is a package here plus its line in
``_REGISTERED`` (docs/design.md, "Adding a source").
"""

from __future__ import annotations

from typing import Optional

from .mysql.descriptor import DESCRIPTOR as _MYSQL
from .postgres.descriptor import DESCRIPTOR as _POSTGRES
from .source_descriptor import SourceDescriptor

_REGISTERED: tuple[SourceDescriptor, ...] = (_POSTGRES, _MYSQL)


def descriptors() -> tuple[SourceDescriptor, ...]:
    return _REGISTERED


def descriptor(kind: str) -> Optional[SourceDescriptor]:
    """The source whose type (or one of its aliases) is ``kind``, any case; None if none."""
    kind = kind.lower()
    return next((d for d in _REGISTERED if kind == d.kind or kind in d.aliases), None)


def for_connection(conn_type: str) -> Optional[SourceDescriptor]:
    """The source an Airflow connection of type ``conn_type`` is, or None."""
    conn_type = conn_type.lower()
    return next((d for d in _REGISTERED if conn_type in d.conn_types), None)


def transaction_of(position: str) -> Optional[str]:
    """The part of ``position`` every event of its source transaction shares, by the first
    source that recognises the position; None if none does."""
    for d in _REGISTERED:
        found = d.transaction_of(position)
        if found is not None:
            return found
    return None
