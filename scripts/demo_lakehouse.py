"""The demo's lakehouse end: land the changelog into typed Delta mirrors (unless Airflow's
dblog_land already did), show a few mirror rows through Spark SQL, and compare every mirror
with its source table, typed (spark/verify_mirror.py): 0 mismatches or the demo fails.

    python -m scripts.demo_lakehouse --config demo-output/postgres/dblog.toml \
        --lake demo-output/postgres/lake [--land]

One Spark session (local[2], the jars scripts/spark-jars resolved: DBLOG_SPARK_JARS) runs
the same ``main()``s as ``python -m airflow_provider_dblog.spark.land_changelog`` and
``python -m airflow_provider_dblog.spark.verify_mirror``, so the demo starts one JVM, not three.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

# pyspark's import-time notice about pandas 3 says nothing about this demo (no pandas API used)
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

from airflow_provider_dblog.config import load_config  # noqa: E402
from airflow_provider_dblog.outputs.lake_layout import mirrors_root  # noqa: E402
from airflow_provider_dblog.spark import land_changelog, verify_mirror  # noqa: E402
from airflow_provider_dblog.spark.session import get_session  # noqa: E402

ROWS_SHOWN = 5


def show_mirror(spark, mirrors: str, source_id: str, table: str) -> None:
    """The mirror's typed columns and its newest live rows, through Spark SQL."""
    path = land_changelog.mirror_path(mirrors, source_id, table)
    columns = spark.sql(f"DESCRIBE delta.`{path}`").collect()
    typed = [(r.col_name, r.data_type) for r in columns if r.col_name and not r.col_name.startswith("#")]
    shown = [name for name, _ in typed if not name.startswith("_")] + ["_op", "_origin"]
    counts = spark.sql(
        f"SELECT count_if(NOT _deleted) AS live, count_if(_deleted) AS tombstones FROM delta.`{path}`"
    ).first()
    print(f"\n  mirror of {table}: {path}", flush=True)
    print("    typed columns: " + ", ".join(f"{n} {t}" for n, t in typed if not n.startswith("_")), flush=True)
    print(f"    {counts.live} live rows, {counts.tombstones} tombstones (deleted keys)", flush=True)
    sql = f"SELECT {', '.join(shown)} FROM delta.`{path}` WHERE NOT _deleted ORDER BY _position DESC LIMIT {ROWS_SHOWN}"
    print(f'    spark.sql("{sql.replace(path, "<mirror>")}"):', flush=True)
    spark.sql(sql).show(truncate=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--lake", required=True)
    p.add_argument("--land", action="store_true", help="run the landing job first")
    args = p.parse_args(argv)
    source = load_config(args.config)["source"]
    source_id, tables = source["id"], source["tables"]
    mirrors = mirrors_root(args.lake)
    t0 = time.time()
    spark = get_session("dblog-demo-lakehouse", locations=[args.lake])  # DBLOG_SPARK_MASTER: local[2] or a cluster
    print(f"  Spark {spark.version} session ({spark.sparkContext.master}) in {time.time() - t0:.1f} s", flush=True)
    if args.land:
        land_args = ["--lake", args.lake, "--source", source_id]
        print(f"$ python -m airflow_provider_dblog.spark.land_changelog {' '.join(land_args)}", flush=True)
        t0 = time.time()
        if land_changelog.main(land_args) != 0:
            sys.exit("demo FAILED: the landing job stopped a mirror")
        print(f"  landed in {time.time() - t0:.1f} s", flush=True)
    for table in tables:
        show_mirror(spark, mirrors, source_id, table)
    verify_args = ["--config", args.config, "--lake", args.lake]
    print(f"$ python -m airflow_provider_dblog.spark.verify_mirror {' '.join(verify_args)}", flush=True)
    bad = verify_mirror.main(verify_args)
    spark.stop()
    if bad:
        print("demo FAILED: a mirror differs from its source table", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
