"""Which changelog tables a Spark job reads under a lake (outputs/lake_layout.py): one per
source (``<lake>/changelogs/<source_id>``), or, in a lake written before the table per
source, the one table every source shares (``<lake>/changelog``), decided as the capture
decides it: by whether that shared table exists. Plain PySpark: listed through the Hadoop
file system of the session, so ``s3a://`` and local lakes alike.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from pyspark.sql import SparkSession

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.outputs.lake_layout import changelog_path, changelogs_root


class ChangelogTable(NamedTuple):
    """A changelog table: ``source_id`` None for the shared table of a lake written before
    (its rows are filtered by source where one is asked for)."""

    source_id: Optional[str]
    path: str


def _fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm: Any = spark._jvm  # py4j's view of the JVM: untyped
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(spark._jsc.hadoopConfiguration()), p


def _exists(spark: SparkSession, path: str) -> bool:
    fs, p = _fs(spark, path)
    return bool(fs.exists(p))


def shared_layout(spark: SparkSession, lake: str) -> bool:
    """Whether ``lake`` was written before the table per source (it holds ``changelog/``)."""
    return _exists(spark, f"{changelog_path(lake)}/_delta_log")


def changelog_tables(spark: SparkSession, lake: str, source: Optional[str] = None) -> list[ChangelogTable]:
    """The changelog tables of ``source`` or of every source under ``lake``: none where no
    capture has committed yet (a capture creates its source's table at its first commit)."""
    if shared_layout(spark, lake):
        return [ChangelogTable(None, changelog_path(lake))]
    if source is not None:
        path = changelog_path(lake, source)
        return [ChangelogTable(source, path)] if _exists(spark, f"{path}/_delta_log") else []
    fs, root = _fs(spark, changelogs_root(lake))
    if not fs.exists(root):
        return []
    names = sorted(s.getPath().getName() for s in fs.listStatus(root) if s.isDirectory())
    return [
        ChangelogTable(name, changelog_path(lake, name))
        for name in names
        if not name.startswith(("_", ".")) and _exists(spark, f"{changelog_path(lake, name)}/_delta_log")
    ]


def changelog_of(spark: SparkSession, lake: str, source: str) -> str:
    """The path of the table holding ``source``'s events; ConfigurationError if none."""
    found = changelog_tables(spark, lake, source)
    if not found:
        raise ConfigurationError(
            f"there is no changelog of source {source!r} under {lake} (no Delta table at "
            f"{changelog_path(lake, source)}).",
            "check the lake and the source id: a capture creates its source's table at its first commit "
            "(docs/changelog-format.md, Layout).",
        )
    return found[0].path
