"""The lake's layout, in one place: what lies under the root a capture writes (``--lake``,
the Delta output's URL) and where the landing puts the mirrors.

    <lake>/changelogs/<source_id>             each source's changelog (outputs/delta.py)
    <lake>/changelog                          the one changelog every source shared, in lakes
                                              written before (still read and written there)
    <lake>/schemas                            the schema store the rows name by schema id
    <mirrors>/<source_id>/<schema>.<table>    one Delta mirror per table (default <lake>/mirrors)
    <mirrors>/_checkpoints/<source|_all>      the landing's streaming checkpoint (@kafka: from Kafka)
    <mirrors>/_history/<source_id>/<table>    a table's history mirror (--history, spark/history.py)

Mirrors are registered in the session catalog as ``dblog_<source>.<schema>__<table>`` (the
table, tombstones included) and ``..._current`` (the view analysts query); a history mirror
as ``..._history``.

A table per source: captures sharing a root never race for one table's versions (each
commit of a shared table was a race every other capture could win, a retry each). The layout
is the lake's, not the source's: a lake holding ``<lake>/changelog`` was written by the
layout before and stays in it, every source included (``shared_layout``), so that writers and
readers always agree by one existence check. The schema store stays shared: its rows are
addressed by content and written only when a schema is new (start, DDL).

Plain Python, no PySpark: the Delta output and the Airflow triggers use it too.
"""

from __future__ import annotations

import os
import re
from typing import Optional

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.names import split_table

CHANGELOG, SCHEMAS, MIRRORS, CHECKPOINTS = "changelog", "schemas", "mirrors", "_checkpoints"
CHANGELOGS, HISTORY = "changelogs", "_history"
# A source id names a directory of the lake (changelogs/<id>, mirrors/<id>): one path segment.
_SEGMENT = re.compile(r"[^/\\?#%\s]+")


def absolute(location: str) -> str:
    """A local path made absolute (``file:`` and object-store URLs are left as they are):
    Spark resolves ``delta.`<path>``` names and streaming checkpoints against different
    directories, and refuses a relative one in a table name outright."""
    if location.startswith("delta://"):  # the capture's output URL (delta:///data/lake) names the same root
        location = location[len("delta://") :]
    if "://" in location or location.startswith("file:"):
        return location.rstrip("/")
    return os.path.abspath(os.path.expanduser(location))


def changelog_path(lake: str, source_id: Optional[str] = None) -> str:
    """``source_id``'s changelog table (``<lake>/changelogs/<source_id>``); without one, the
    table every source shared in a lake of the layout before (``<lake>/changelog``)."""
    if source_id is None:
        return f"{lake.rstrip('/')}/{CHANGELOG}"
    return f"{changelogs_root(lake)}/{require_segment(source_id)}"


def changelogs_root(lake: str) -> str:
    """The directory holding one changelog table per source."""
    return f"{lake.rstrip('/')}/{CHANGELOGS}"


def require_segment(source_id: str) -> str:
    """``source_id`` if it can name a directory of the lake; ConfigurationError otherwise."""
    if not _SEGMENT.fullmatch(source_id) or source_id in (".", "..") or source_id.startswith("_"):
        raise ConfigurationError(
            f"the source id {source_id!r} cannot name a directory of the lake (changelogs/<id>, mirrors/<id>).",
            "use letters, digits, '-', '.' and '_' (not first), without '/', '?', '#', '%' or spaces.",
        )
    return source_id


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
