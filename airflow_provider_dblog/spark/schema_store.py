"""The schema store the changelog's rows name by schema id (``<lake>/schemas``), as the
landing reads it; spark/kafka_changelog.py reads the Kafka output's schema topic instead."""

from __future__ import annotations

from typing import Any, Optional

from pyspark.sql import SparkSession

from airflow_provider_dblog.core.events import TableSchema


class SchemaStore:
    """``<lake>/schemas`` as TableSchema objects, re-read when an unknown id shows up."""

    def __init__(self, spark: SparkSession, uri: str):
        self.spark, self.uri = spark, uri
        self.by_id: dict[str, tuple[TableSchema, Any]] = {}  # schema id -> (schema, registered_at)

    def _load(self) -> None:
        rows = (
            self.spark.read.format("delta").load(self.uri).select("schema_id", "schema_json", "registered_at").collect()
        )
        self.by_id = {r.schema_id: (TableSchema.from_json(r.schema_json), r.registered_at) for r in rows}

    def versions(self, table: str, ids: list[Optional[str]]) -> list[TableSchema]:
        """The schemas of ``ids`` oldest first; a NULL id means the table's newest schema."""
        if any(i is not None and i not in self.by_id for i in ids) or not self.by_id:
            self._load()
        missing = [i for i in ids if i is not None and i not in self.by_id]
        if missing:
            raise RuntimeError(f"{table}: schema ids {missing} are not in the schema store {self.uri}")
        picked = {i: self.by_id[i] for i in ids if i is not None}
        if None in ids:
            own = [(s, ts, i) for i, (s, ts) in self.by_id.items() if s.table == table]
            if not own:
                raise RuntimeError(
                    f"{table}: changelog rows without a schema id and no schema for the table in {self.uri}"
                )
            s, ts, i = max(own, key=lambda x: x[1])
            picked[i] = (s, ts)
        return [s for s, _ in sorted(picked.values(), key=lambda x: x[1])]
