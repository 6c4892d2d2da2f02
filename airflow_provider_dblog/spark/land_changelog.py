"""Land a DBLog changelog into one Delta *mirror* table per source table.

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 \\
        --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
        --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
        land_changelog.py --lake s3a://bucket/dblog [--source pg1]
    python -m airflow_provider_dblog.spark.land_changelog --lake /data/lake   # local[2]

Plain PySpark (no Airflow imports), submitted by SparkSubmitOperator or by hand. This module
is the driver and its command line; the merge is spark/lander.py, the paths under the lake
outputs/lake_layout.py, the schema store spark/schema_store.py.

*Incremental*: the changelog is read as a Delta streaming source with an availableNow
trigger and a checkpoint, so each run lands only the changelog versions that earlier runs
have not (then stops); each mirror commit is exactly once and monotonic (spark/lander.py).

Mirrors live at ``<mirrors>/<source_id>/<schema>.<table>`` (default ``<lake>/mirrors``)
and are registered in the session catalog as ``dblog_<source>.<schema>__<table>`` (the table,
tombstones included) and ``..._current`` (the view analysts query).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from typing import Any, Optional

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.outputs.lake_layout import (
    absolute,
    catalog_names,
    checkpoint_path,
    mirror_path,
)
from airflow_provider_dblog.parent_pipe import stop_with_parent
from airflow_provider_dblog.spark import mirror_types as mt
from airflow_provider_dblog.spark.changelog_tables import changelog_tables
from airflow_provider_dblog.spark.kafka_changelog import KafkaChangelog
from airflow_provider_dblog.spark.lander import Lander
from airflow_provider_dblog.spark.merge_rows import TableFacts
from airflow_provider_dblog.spark.mirror_tables import PROP_KEY, PROP_STOPPED, ensure_database, list_mirrors
from airflow_provider_dblog.spark.schema_store import SchemaStore
from airflow_provider_dblog.spark.session import get_session

# Continuous mode looks for new changelog tables (a source's first commit) this often.
DISCOVER_SECONDS = 30.0

# Kept importable from here: tests, scripts and users' Lander subclasses name them so.
__all__ = [
    "land",
    "main",
    "build_parser",
    "Lander",
    "TableFacts",
    "SchemaStore",
    "absolute",
    "mirror_path",
    "catalog_names",
    "ensure_database",
    "list_mirrors",
    "PROP_KEY",
    "PROP_STOPPED",
]


def land(
    spark: SparkSession,
    lake: str,
    source: Optional[str] = None,
    mirrors: Optional[str] = None,
    checkpoint: Optional[str] = None,
    max_files_per_batch: int = 1000,
    register: bool = True,
    log=print,
    lander_class: type[Lander] = Lander,
    trigger_seconds: Optional[float] = None,
    max_seconds: Optional[float] = None,
    stop: Optional[threading.Event] = None,
    deletion_vectors: Optional[bool] = None,
    kafka: Any = None,
    parallel_tables: Optional[int] = None,
    metrics: Any = None,
    history: Optional[list[str]] = None,
) -> dict:
    """Land every changelog version not landed yet (availableNow), then return run stats.

    One streaming query per changelog table (spark/changelog_tables.py): a table per source,
    each with its checkpoint ``<mirrors>/_checkpoints/<source>``, one after another; or the
    one table of a lake written before (checkpoint ``<source|_all>``, as it always was).

    Continuous mode (``trigger_seconds``): each table's query lands a micro-batch every
    ``trigger_seconds`` (a processing-time trigger) until ``max_seconds`` passed or ``stop`` is
    set, and a source's table created meanwhile gets its query within ``DISCOVER_SECONDS``; a
    micro-batch cut short by the stop is landed again by the next run and changes nothing
    there (idempotent merges, see ``Lander``).

    ``lander_class``: a Lander subclass to merge with (e.g. one that adds a step per table).
    ``deletion_vectors``: Delta deletion vectors on the mirrors (docs/landing.md): None (the
    default) creates new mirrors with them and leaves existing ones as they are, True also
    turns them on for existing mirrors, False creates new mirrors without them.
    ``kafka``: a ``kafka_changelog.KafkaChangelog``: read the capture's Kafka topics (and
    schema topic) instead of the lake's changelog tables; the mirrors still go under ``<lake>``.
    ``parallel_tables``: tables of a micro-batch landed at once (``Lander``).
    ``metrics``: a ``metrics.landing.LandingMetrics`` the Lander records each table's batch in.
    ``history``: tables ("schema.table", "*": all) that also get a history mirror (SCD type 2,
    spark/history.py)."""
    lake = absolute(lake)

    def new_lander(table_source: Optional[str]) -> Lander:
        lander = lander_class(
            spark,
            lake,
            mirrors,
            register,
            log,
            deletion_vectors=deletion_vectors,
            parallel_tables=parallel_tables,
            history=history,
        )
        lander.checkpoint = absolute(checkpoint) if checkpoint else checkpoint_path(lander.mirrors, table_source, kafka)
        lander.metrics = metrics
        return lander

    t0 = time.time()
    running: dict[str, tuple[Any, Lander]] = {}  # changelog table (or topics) -> its query and lander

    def start(key: str, stream: Any, lander: Lander, name: Optional[str]) -> None:
        if source:
            stream = stream.where(F.col("source_id") == source)
        writer = stream.writeStream.foreachBatch(lander.land_batch).option("checkpointLocation", lander.checkpoint)
        if trigger_seconds:
            writer = writer.trigger(processingTime=f"{float(trigger_seconds)} seconds")
        else:
            writer = writer.trigger(availableNow=True)
        query = writer.queryName(f"dblog_land_{re.sub(r'[^A-Za-z0-9_]', '_', name or 'all')}").start()
        running[key] = (query, lander)
        if not trigger_seconds:
            query.awaitTermination()  # one changelog table after another

    def start_new_tables() -> None:
        """A stream per changelog table not landing yet (a table per source, or the shared one)."""
        tables = [t for t in changelog_tables(spark, lake, source) if t.path not in running]
        if checkpoint and len(running) + len(tables) > 1:
            raise ConfigurationError(
                f"--checkpoint names one stream's checkpoint, and {lake} has a changelog table per source.",
                "pass --source (a landing per source) or leave --checkpoint out (each source's stream "
                "then keeps <mirrors>/_checkpoints/<source>).",
            )
        for t in tables:
            stream = (
                spark.readStream.format("delta")
                .option("maxFilesPerTrigger", max_files_per_batch)
                # An OPTIMIZE of the changelog commits no data change and is skipped anyway;
                # this also skips a user's DELETE of old changelog rows instead of failing.
                .option("skipChangeCommits", "true")
                .load(t.path)
            )
            start(t.path, stream, new_lander(t.source_id or source), t.source_id or source)

    if kafka is not None:  # the same columns, from the Kafka output's topics (spark/kafka_changelog.py)
        lander = new_lander(source)
        lander.schemas = kafka.schema_store(spark)
        start("kafka", kafka.stream(spark), lander, source)
    else:
        start_new_tables()
        if not running:
            log(
                f"no changelog {'of source ' + repr(source) + ' ' if source else ''}under {lake} yet: "
                "a capture creates its source's table at its first commit"
            )
    if trigger_seconds:
        deadline = time.monotonic() + max_seconds if max_seconds else float("inf")
        stop = stop or threading.Event()
        looked = time.monotonic()
        try:
            # Poll: a query may also end by itself (a failed batch), which awaitTermination raises.
            while not stop.is_set() and time.monotonic() < deadline:
                if any(query.awaitTermination(1 / max(1, len(running))) for query, _ in list(running.values())):
                    break
                if not running:
                    time.sleep(1)
                if kafka is None and time.monotonic() - looked >= DISCOVER_SECONDS:
                    start_new_tables()  # a source whose capture made its first commit since
                    looked = time.monotonic()
        finally:  # one failed query stops the others too
            for query, _ in running.values():
                query.stop()
        log(f"continuous landing stopped after {time.time() - t0:.0f} s")
    landers = [lander for _, lander in running.values()]
    registered = landers[0].register_all() if register and landers else []
    return {
        "events": sum(lander.events for lander in landers),
        "tables": sorted(t for lander in landers for _, t in lander.landed),
        "seconds": round(time.time() - t0, 3),
        "registered": registered,
        "checkpoint": landers[0].checkpoint if len(landers) == 1 else [lander.checkpoint for lander in landers],
        "stopped": {k: v for lander in landers for k, v in lander.stopped.items()},
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="land_changelog", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--lake",
        required=True,
        help="the capture's output root (holds changelogs/<source> and schemas/); with --kafka, the root of the mirrors",
    )
    p.add_argument(
        "--kafka",
        metavar="URL",
        help="land from the capture's Kafka output instead: its output URL, kafka://host:port?topic_prefix=...",
    )
    p.add_argument(
        "--kafka-config-env",
        default="DBLOG_SPARK_KAFKA_CONFIG",
        help="environment variable holding a JSON object of Kafka Java client settings (security, SASL, TLS)",
    )
    p.add_argument("--max-records-per-batch", type=int, help="with --kafka: Kafka records per micro-batch")
    p.add_argument("--source", help="land only this source_id (default: every source under the lake)")
    p.add_argument("--mirrors", help="root of the mirror tables (default <lake>/mirrors)")
    p.add_argument(
        "--checkpoint",
        help="streaming checkpoint of one changelog table (default <mirrors>/_checkpoints/<source>, each source's)",
    )
    p.add_argument(
        "--max-files-per-batch",
        type=int,
        default=1000,
        help="changelog files per micro-batch (one capture flush is one file)",
    )
    p.add_argument("--no-register", action="store_true", help="do not register the mirrors in the catalog")
    p.add_argument("--master", help="Spark master when run without spark-submit (default local[2])")
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep landing: a micro-batch every --trigger-seconds, until --max-seconds or SIGTERM",
    )
    p.add_argument("--trigger-seconds", type=float, default=5.0, help="continuous mode's trigger interval")
    p.add_argument("--max-seconds", type=float, help="continuous mode: stop after this long (default: never)")
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="continuous mode: stop as on SIGTERM when standard input ends (the process that started "
        "this one holds its other end: its death, even by SIGKILL, ends this landing)",
    )
    p.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Delta deletion vectors on the mirrors, so a MERGE's cost follows the change, not the "
        "mirror. Default: on for new mirrors, existing ones keep theirs; --deletion-vectors also "
        "turns them on for existing mirrors; --no-deletion-vectors creates new mirrors without "
        "them, for readers that lack the feature",
    )
    p.add_argument(
        "--parallel-tables",
        type=_at_least_one,
        metavar="N",
        help="tables of a micro-batch landed at once, each on a Spark session of its own "
        "(default: up to 4; 1: one after another)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve the landing's metrics for Prometheus on this port (docs/operations.md); OTLP is "
        "exported when OTEL_EXPORTER_OTLP_ENDPOINT is set",
    )
    p.add_argument("--metrics-host", default="0.0.0.0", help="the address the metrics endpoint listens on")
    p.add_argument(
        "--history",
        action="append",
        metavar="TABLE",
        help="also keep a history mirror (SCD type 2: every version with _valid_from/_valid_to) of this "
        "table, under <mirrors>/_history (repeatable; '*': every table; docs/landing.md)",
    )
    return p


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more (1: one table at a time)")
    return n


def main(argv: Optional[list[str]] = None, lander_class: type[Lander] = Lander) -> int:
    args = build_parser().parse_args(argv)
    kafka = None
    if args.kafka:  # a wrong URL or client setting is reported before Spark starts
        try:
            kafka = KafkaChangelog.from_url(args.kafka, args.source, args.kafka_config_env, args.max_records_per_batch)
        except ConfigurationError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
    try:  # a taken port is reported before Spark starts
        from airflow_provider_dblog.metrics.landing import start_landing_metrics

        metrics = start_landing_metrics(args.metrics_port, args.metrics_host, args.source)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    spark = get_session(
        "dblog-land-changelog", master=args.master, locations=(args.lake, args.mirrors, args.checkpoint)
    )
    stop = threading.Event()
    if args.continuous:  # SIGTERM (the trigger's cleanup, a supervisor): stop between batches
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        if args.exit_with_parent:
            stop_with_parent(stop)
    try:
        stats = land(
            spark,
            args.lake,
            args.source,
            args.mirrors,
            args.checkpoint,
            args.max_files_per_batch,
            not args.no_register,
            log=lambda m: print(m, flush=True),
            lander_class=lander_class,
            trigger_seconds=args.trigger_seconds if args.continuous else None,
            max_seconds=args.max_seconds,
            stop=stop,
            deletion_vectors=args.deletion_vectors,
            kafka=kafka,
            parallel_tables=args.parallel_tables,
            metrics=metrics,
            history=args.history,
        )
    except mt.IncompatibleSchemaChange as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - a streaming failure wraps the batch's error
        inner = _incompatible_in(exc)
        if inner:
            print(f"error: {inner}", file=sys.stderr, flush=True)
            return 2
        raise
    print(json.dumps(stats), flush=True)
    for table, reason in sorted(stats["stopped"].items()):  # landed all the others first
        print(f"error: mirror of {table} stopped: {reason}", file=sys.stderr, flush=True)
    return 2 if stats["stopped"] else 0


def _incompatible_in(exc: BaseException) -> Optional[str]:
    """The IncompatibleSchemaChange message inside a StreamingQueryException, if any."""
    text = str(exc)
    m = re.search(r"incompatible schema change in .*?(?:change the source column back\.)", text, re.S)
    return m.group(0) if m else None


if __name__ == "__main__":
    sys.exit(main())
