"""Drift detection (issue 15 part 4): ``dblog verify`` whole and ``--ranges``, against the
full dump a re-snapshot would take, on PostgreSQL or MariaDB; with ``--mirror``, the same
for a Delta mirror (the changelog landed by Spark; ``verify_mirror`` whole and ``--ranges``).

    eval "$(scripts/services env)"
    python -m bench.verify_ranges [--source postgres|mysql] [--rows 5000000] [--drift 20] [--mirror]

The narrow dump table of bench/dbs.py (``id bigint``, ``v int``, ``s text``) is filled and
dumped by an in-process capture (10,000-row chunks, timed to DONE). With the capture
stopped, the table is verified against the replay of its changelog, whole
(core/verify.check_table: every row read from the source and compared) and by ranges
(core/range_verify.py); then ``drift`` rows are updated, deleted and inserted with nothing
capturing, and both run again. The replay is read from the changelog once per verify in
both modes (local work), so the difference is what crosses from the database. With
``--mirror`` the mirror is landed (timed) after the dump, and its verify is timed beside the
replay's: Spark reads the mirror (whole: every row collected; ranges: hashed by Spark's
workers, only (key, hash) pairs collected).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.range_verify import check_table_by_ranges
from airflow_provider_dblog.core.verify import check_table
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.outputs.lake_layout import mirrors_root

from .dbs import MariaDBBench, PostgresBench
from .dump_load import LiveCapture


def _verify(db, lake: str, ranges: bool) -> dict:
    src, out = make_source(db.source_config(db.source_id)), make_output(lake)
    src.open()
    out.open()
    try:
        t0 = time.perf_counter()
        if ranges:
            check, stats = check_table_by_ranges(src, out, db.dump_table)
        else:
            check, stats = check_table(src, out, db.dump_table), None
        seconds = time.perf_counter() - t0
    finally:
        src.close()
        out.close()
    return {
        "seconds": round(seconds, 2),
        "mismatches": len(check.mismatches),
        "source_rows": check.source_rows,
        "rows_read": stats.rows_read if stats else check.source_rows,
        "digests": stats.digests if stats else 0,
    }


def _verify_mirror(spark, db, lake: str, ranges: bool) -> dict:
    from airflow_provider_dblog.spark.verify_mirror import verify_table, verify_table_by_ranges

    src = make_source(db.source_config(db.source_id))
    src.open()
    try:
        t0 = time.perf_counter()
        if ranges:
            n_src, _, mism, stats = verify_table_by_ranges(spark, src, mirrors_root(lake), db.dump_table)
        else:
            (n_src, _, mism), stats = verify_table(spark, src, mirrors_root(lake), db.dump_table), None
        seconds = time.perf_counter() - t0
    finally:
        src.close()
    return {
        "seconds": round(seconds, 2),
        "mismatches": len(mism),
        "source_rows": n_src,
        "rows_read": stats.rows_read if stats else n_src,
        "digests": stats.digests if stats else 0,
    }


def run(rows: int, drift: int, kind: str = "postgres", mirror: bool = False) -> dict:
    db = PostgresBench() if kind == "postgres" else MariaDBBench()
    db.source_id = db.source_ids(["verify"])["verify"]
    workdir = tempfile.mkdtemp(prefix="dblog-bench-verify-")
    cap = None
    spark = None
    try:
        db.create()
        db.fill_dump_table(rows)
        cap = LiveCapture(db, db.source_id, workdir)
        cap.start().prime(-1)
        dump = cap.dump(db.dump_table, 10_000, max(600.0, rows / 2_000))
        cap.stop()
        out = {
            "source": kind,
            "rows": rows,
            "dump_s": dump["seconds"],
            "dump_rows_per_s": round(dump["rows_per_s"]),
        }
        lake = cap.lake.removeprefix("delta://")
        if mirror:
            from airflow_provider_dblog.spark.land_changelog import land
            from airflow_provider_dblog.spark.session import get_session

            spark = get_session("dblog-bench-verify", master="local[2]")
            t0 = time.perf_counter()
            land(spark, lake, source=db.source_id, log=lambda m: None)
            out["land_s"] = round(time.perf_counter() - t0, 2)
        for mode in ("whole", "ranges"):
            out[f"equal_{mode}"] = _verify(db, cap.lake, mode == "ranges")
            if mirror:
                out[f"equal_mirror_{mode}"] = _verify_mirror(spark, db, lake, mode == "ranges")
        step = max(1, rows // drift)
        db._run(  # with nothing capturing: the changelog never sees these
            f"UPDATE {db.dump_table} SET v = v + 1 WHERE id % {step} = 1 AND id <= {rows // 2}",
            f"DELETE FROM {db.dump_table} WHERE id % {step} = 7 AND id > {rows // 2}",
            f"INSERT INTO {db.dump_table} VALUES ({rows + 10}, 1, 'new'), ({rows + 20}, 2, 'new')",
        )
        for mode in ("whole", "ranges"):
            out[f"drift_{mode}"] = _verify(db, cap.lake, mode == "ranges")
            if mirror:
                out[f"drift_mirror_{mode}"] = _verify_mirror(spark, db, lake, mode == "ranges")
        return out
    finally:
        if spark is not None:
            spark.stop()
        if cap is not None:
            cap.stop()
        db.cleanup([db.source_id])


def markdown(r: dict) -> str:
    lines = [
        f"{r['source']}: full dump of {r['rows']:,} rows (10,000-row chunks): {r['dump_s']:.1f} s "
        f"({r['dump_rows_per_s']:,} rows/s)"
        + (f"; landing it into a mirror: {r['land_s']:.1f} s." if "land_s" in r else "."),
        "",
        "| Table state | Against | Verify | Seconds | vs the full dump | Source rows read | Range digests | Mismatches |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for state in ("equal", "drift"):
        for against in ("", "mirror_"):
            for mode in ("whole", "ranges"):
                v = r.get(f"{state}_{against}{mode}")
                if v is None:
                    continue
                lines.append(
                    f"| {'unchanged' if state == 'equal' else 'drifted'} | {'mirror' if against else 'replay'} | "
                    f"{mode} | {v['seconds']:.1f} | {v['seconds'] / r['dump_s']:.2f}× | {v['rows_read']:,} | "
                    f"{v['digests']:,} | {v['mismatches']:,} |"
                )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.verify_ranges", description=__doc__)
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--drift", type=int, default=20, help="about this many rows changed while nothing captures")
    p.add_argument("--source", choices=["postgres", "mysql"], default="postgres")
    p.add_argument("--mirror", action="store_true", help="also land the changelog and verify the mirror")
    a = p.parse_args(argv)
    r = run(a.rows, a.drift, a.source, a.mirror)
    print(r)
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
