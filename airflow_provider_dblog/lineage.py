"""OpenLineage for the operators: which datasets a task reads and writes, named by
OpenLineage's naming spec (docs/operations.md "Lineage").

Airflow's OpenLineage provider calls an operator's ``get_openlineage_facets_on_start`` /
``_on_complete`` when it is installed; the operators import this module only there, and this
module imports the facets only in ``operator_lineage``, so the provider works without it.

Names (https://openlineage.io/docs/spec/naming):

==========================  ======================================  ==========================
dataset                     namespace                               name
==========================  ======================================  ==========================
PostgreSQL table            ``postgres://host:port``                ``database.schema.table``
MySQL / MariaDB table       ``mysql://host:port``                   ``database.table``
changelog on local disk     ``file``                                ``/lake/changelog``
changelog on an object      ``s3://bucket`` (``gs://``, ``abfss``)  ``lake/changelog``
store
changelog on Kafka          ``kafka://first-bootstrap-host:port``   the table's topic
mirror                      as the changelog's                      ``<mirrors>/<source>/<table>``
==========================  ======================================  ==========================

No credential reaches a name: output URLs carry none (outputs/_urls.py refuses them) and a
source is named by host and port only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence
from urllib.parse import urlsplit

from .core.events import TableSchema
from .outputs.lake_layout import absolute, changelog_path, history_path, mirror_path, mirrors_root

DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306}


@dataclass(frozen=True)
class LineageDataset:
    """A dataset before it becomes OpenLineage's: plain values, testable without the client."""

    namespace: str
    name: str
    schema: Optional[TableSchema] = None
    row_count: Optional[int] = None  # rows written (an output's statistics)
    # (table, mismatches) of a verification: an input's data quality assertions
    assertions: tuple[tuple[str, int], ...] = field(default=())
    # column lineage: this dataset's field -> the (namespace, name, field) it is made of
    fields_from: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = field(default=())


def location(uri: str) -> tuple[str, str]:
    """(namespace, name) of a file or object-store location."""
    uri = absolute(uri)  # the lake's own rule: delta:// dropped, a local path made absolute
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return "file", parts.path
    if "://" not in uri:  # a path (``C:\\`` included, whose drive urlsplit takes for a scheme)
        return "file", uri
    authority = parts.netloc.rpartition("@")[2]  # never a userinfo part, whatever the URL held
    return f"{parts.scheme}://{authority}", parts.path.strip("/")


def source_namespace(source: Mapping[str, Any]) -> str:
    """``postgres://host:port`` / ``mysql://host:port`` of the ``[source]`` table."""
    kind = "postgres" if source["type"] == "postgres" else "mysql"
    host = source.get("host") or "localhost"
    return f"{kind}://{host}:{source.get('port') or DEFAULT_PORTS[kind]}"


def source_dataset(source: Mapping[str, Any], table: str, schema: Optional[TableSchema] = None) -> LineageDataset:
    """A captured table. DBLog spells it ``schema.table`` on PostgreSQL (the database is the
    connection's) and ``database.table`` on MySQL, which is already OpenLineage's name."""
    name = f"{source['database']}.{table}" if source["type"] == "postgres" and source.get("database") else table
    return LineageDataset(source_namespace(source), name, schema)


def changelog_datasets(
    output: Any, source_id: str, tables: Sequence[str], sources: Sequence[LineageDataset] = ()
) -> list[LineageDataset]:
    """Where the capture writes these tables' changes: one changelog table (Delta, JSON
    lines), or a topic per table (Kafka; one topic for all with ``topic=``). ``sources``:
    the tables' datasets with their schemas, for the column lineage (``column_lineage``)."""
    from .outputs.kafka import KafkaOutput

    if isinstance(output, KafkaOutput):
        namespace = f"kafka://{output.bootstrap.split(',')[0].strip()}"
        topics: dict[str, list[str]] = {}  # in order, once each
        for t in tables:
            topics.setdefault(output.topic_for(source_id, t), []).append(t)
        return [
            LineageDataset(namespace, topic, fields_from=column_lineage(sources, ts)) for topic, ts in topics.items()
        ]
    from .outputs.delta import DeltaChangelogOutput

    uri: Optional[str]
    if isinstance(output, DeltaChangelogOutput):
        try:  # the source's table (or the shared one of a lake written before)
            uri = output.changelog_uri(source_id)
        except Exception:  # noqa: BLE001 - lineage never fails the task; named by the layout instead
            uri = changelog_path(output.root, source_id)
    else:
        uri = getattr(output, "changelog_path", None)  # JSON lines
    if uri is None:  # python: outputs write wherever their function does
        return []
    return [LineageDataset(*location(str(uri)), fields_from=column_lineage(sources, tables))]


def column_lineage(sources: Sequence[LineageDataset], tables: Sequence[str]) -> tuple:
    """The changelog's fields made of these tables' columns (docs/changelog-format.md): the
    row images ``after`` and ``before`` of every column, ``key`` of the key columns. Cheap:
    the schemas are the ones the schema facets already carry."""
    wanted = set(tables)
    known = [(d.namespace, d.name, d.schema) for d in sources if d.schema is not None and d.schema.table in wanted]
    images = tuple((ns, name, c.name) for ns, name, schema in known for c in schema.columns)
    keys = tuple((ns, name, k) for ns, name, schema in known for k in schema.key)
    return (("after", images), ("before", images), ("key", keys)) if images else ()


def mirror_datasets(
    mirrors: str, schemas: Iterable[tuple[str, TableSchema]], history: bool = False
) -> list[LineageDataset]:
    """The Delta mirrors of (source id, table schema) pairs under ``mirrors`` (``history``:
    their history mirrors)."""
    out = []
    for source_id, schema in schemas:
        path = (history_path if history else mirror_path)(mirrors, source_id, schema.table)
        namespace, name = location(path)
        out.append(LineageDataset(namespace, name, schema))
    return out


def existing_mirrors(mirrors: str, source_id: Optional[str] = None) -> list[LineageDataset]:
    """The mirrors already under a local ``mirrors`` root (``<source>/<table>/_delta_log``),
    of one source or all. On an object store: none (listing it from a worker costs a scan of
    the bucket; the landing's own run knows its tables)."""
    namespace, root = location(mirrors)
    if namespace != "file" or not os.path.isdir(root):
        return []
    out = []
    for source in sorted(os.listdir(root)) if source_id is None else [source_id]:
        if source.startswith("_") or not os.path.isdir(os.path.join(root, source)):
            continue  # _checkpoints
        for table in sorted(os.listdir(os.path.join(root, source))):
            if os.path.isdir(os.path.join(root, source, table, "_delta_log")):
                out.append(LineageDataset(namespace, mirror_path(root, source, table)))
    return out


def landing_datasets(
    lake: str, mirrors: Optional[str] = None, source_id: Optional[str] = None
) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """(inputs, outputs) of a landing of ``lake``: the changelog tables of ``source_id`` (or of
    every source), named as the capture names them so the graph connects, and the mirrors of
    ``source_id`` (or all) that exist under the mirrors root (``existing_mirrors``: a local
    root only). A lake that cannot be looked at (an object store without credentials here)
    names ``source_id``'s table by the layout and lists no other."""
    from .outputs.delta import lake_changelogs

    root = absolute(lake)
    try:
        tables = lake_changelogs(root, source_id)
    except Exception:  # noqa: BLE001 - lineage never fails the task; named by the layout instead
        tables = [changelog_path(root, source_id)] if source_id else []
    return [LineageDataset(*location(t)) for t in tables], existing_mirrors(mirrors_root(lake, mirrors), source_id)


def source_schemas(source: Any, tables: Optional[Sequence[str]] = None) -> dict[str, TableSchema]:
    """The schemas of ``tables`` (default: every captured table) from an open source, in one
    catalog query where the source offers it (core/protocols.py CatalogSchemas)."""
    from .core.protocols import CatalogSchemas

    names = list(tables) if tables is not None else source.tables()
    if isinstance(source, CatalogSchemas):
        found = source.catalog_schemas(names)
        return {t: s for t, s in found.items() if isinstance(s, TableSchema)}
    return {t: source.table_schema(t) for t in names}


def source_inputs(hook: Any, tables: Optional[Sequence[str]] = None) -> tuple[str, list[LineageDataset]]:
    """(source id, the tables as inputs with their schemas) through a DBLog hook. Opens the
    source as the capture and a dump do (the same checks, nothing more), and closes it."""
    config = hook.source_config()
    source = hook.get_source()
    source.open()
    try:
        schemas = source_schemas(source, tables)
    finally:
        source.close()
    return config["id"], [source_dataset(config, t, s) for t, s in schemas.items()]


def operator_lineage(
    inputs: Sequence[LineageDataset], outputs: Sequence[LineageDataset], run_facets: Optional[dict[str, Any]] = None
) -> Any:
    """The provider's ``OperatorLineage`` of these datasets: a schema facet where the schema
    is known, output statistics where rows were counted, data quality assertions where a
    verification ran."""
    from airflow.providers.common.compat.openlineage.facet import (
        InputDataset,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    def facets(d: LineageDataset) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": schema_facet(d.schema)} if d.schema is not None else {}
        if d.fields_from:
            out["columnLineage"] = column_lineage_facet(d.fields_from)
        return out

    return OperatorLineage(
        inputs=[
            InputDataset(
                namespace=d.namespace,
                name=d.name,
                facets=facets(d),
                inputFacets={"dataQualityAssertions": assertions_facet(d.assertions)} if d.assertions else {},
            )
            for d in inputs
        ],
        outputs=[
            OutputDataset(
                namespace=d.namespace,
                name=d.name,
                facets=facets(d),
                outputFacets=(
                    {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=d.row_count)}
                    if d.row_count is not None
                    else {}
                ),
            )
            for d in outputs
        ],
        run_facets=run_facets or {},
    )


def schema_facet(schema: TableSchema) -> Any:
    """The source's own column types (``numeric(10,2)``, ``varchar(20)``): what the mirror's
    typed columns are derived from (spark/mirror_types.py)."""
    from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacet, SchemaDatasetFacetFields

    key = set(schema.key)
    return SchemaDatasetFacet(
        fields=[
            SchemaDatasetFacetFields(
                name=c.name,
                type=c.type,
                description=("primary key" if c.name in key else None),
            )
            for c in schema.columns
        ]
    )


def column_lineage_facet(fields_from: Sequence[tuple[str, Sequence[tuple[str, str, str]]]]) -> Any:
    """OpenLineage's column lineage: each changelog field from the source columns it encodes
    (an identity copy of their values into a JSON image)."""
    from airflow.providers.common.compat.openlineage.facet import ColumnLineageDatasetFacet, Fields, InputField

    return ColumnLineageDatasetFacet(
        fields={
            name: Fields(
                inputFields=[InputField(namespace=ns, name=ds, field=col) for ns, ds, col in inputs],
                transformationType="IDENTITY",
                transformationDescription="the column's value in the changelog's JSON row image",
            )
            for name, inputs in fields_from
        }
    )


def assertions_facet(assertions: Sequence[tuple[str, int]]) -> Any:
    """One ``equals_source`` assertion per verified table: its replay (or mirror) holds the
    source's rows, ``actual`` the keys that differ."""
    # not re-exported by common.compat; openlineage-python is the OpenLineage provider's own dependency
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion,
        DataQualityAssertionsDatasetFacet,
    )

    return DataQualityAssertionsDatasetFacet(
        assertions=[
            Assertion(
                assertion="equals_source",
                success=n == 0,
                name=f"dblog verify {table}",
                severity="error",
                expected="0 mismatched keys",
                actual=f"{n} mismatched keys",
            )
            for table, n in assertions
        ]
    )
