"""The lake's layout, in one place: what lies under the root a capture writes (``--lake``,
the Delta output's URL) and where the landing puts the mirrors.

    <lake>/changelog                          the capture's changelog (outputs/delta.py)
    <lake>/schemas                            the schema store its rows name by schema id
    <mirrors>/<source_id>/<schema>.<table>    one Delta mirror per table (default <lake>/mirrors)
    <mirrors>/_checkpoints/<source|_all>      the landing's streaming checkpoint (@kafka: from Kafka)
    <mirrors>/_history/<source_id>/<table>    a table's history mirror (--history, spark/history.py)

Mirrors are registered in the session catalog as ``dblog_<source>.<schema>__<table>`` (the
table, tombstones included) and ``..._current`` (the view analysts query); a history mirror
as ``..._history``.

Plain Python, no PySpark: the Delta output and the Airflow triggers use it too.
"""

from __future__ import annotations

import os
import re
from typing import Optional

from airflow_provider_dblog.core.names import split_table

CHANGELOG, SCHEMAS, MIRRORS, CHECKPOINTS = "changelog", "schemas", "mirrors", "_checkpoints"
HISTORY = "_history"


def absolute(location: str) -> str:
    """A local path made absolute (``file:`` and object-store URLs are left as they are):
    Spark resolves ``delta.`<path>``` names and streaming checkpoints against different
    directories, and refuses a relative one in a table name outright."""
    if location.startswith("delta://"):  # the capture's output URL (delta:///data/lake) names the same root
        location = location[len("delta://") :]
    if "://" in location or location.startswith("file:"):
        return location.rstrip("/")
    return os.path.abspath(os.path.expanduser(location))


def changelog_path(lake: str) -> str:
    return f"{lake.rstrip('/')}/{CHANGELOG}"


def schemas_path(lake: str) -> str:
    return f"{lake.rstrip('/')}/{SCHEMAS}"


def mirrors_root(lake: str, mirrors: Optional[str] = None) -> str:
    """Where the mirrors go: ``mirrors`` when given, else ``<lake>/mirrors`` (both absolute)."""
    return absolute(mirrors) if mirrors else f"{absolute(lake)}/{MIRRORS}"


def mirror_path(mirrors: str, source_id: str, table: str) -> str:
    """A mirror's directory: the table's name as the changelog spells it (core/names.py:
    ``edge."dot.ted"`` and ``"edge.dot".ted`` are two directories)."""
    return f"{mirrors.rstrip('/')}/{source_id}/{table}"


def checkpoint_path(mirrors: str, source: Optional[str], kafka: bool = False) -> str:
    """The landing's default streaming checkpoint: one per source (or all) and changelog kind,
    so that landing from Kafka and from the Delta changelog never share offsets."""
    return f"{mirrors.rstrip('/')}/{CHECKPOINTS}/{source or '_all'}" + ("@kafka" if kafka else "")


def history_path(mirrors: str, source_id: str, table: str) -> str:
    """A table's history mirror, beside the mirrors (a directory the mirror listing skips)."""
    return f"{mirrors.rstrip('/')}/{HISTORY}/{source_id}/{table}"


def history_catalog_name(source_id: str, table: str) -> str:
    """The history mirror's catalog name: the mirror's with ``_history``, quoted for SQL."""
    _, tbl, _ = catalog_names(source_id, table)
    return f"{tbl[:-1]}_history`"


def catalog_names(source_id: str, table: str) -> tuple[str, str, str]:
    """(database, table, current view) identifiers, quoted for SQL: the schema's and the
    table's parts apart, joined by ``__`` (a dot inside a part becomes ``_``)."""
    db = "dblog_" + re.sub(r"\W", "_", source_id).lower()
    name = "__".join(re.sub(r"\W", "_", part) for part in split_table(table)).lower()
    return f"`{db}`", f"`{db}`.`{name}`", f"`{db}`.`{name}_current`"
