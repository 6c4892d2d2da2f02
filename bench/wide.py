"""Capture throughput with wide rows (30 columns), against the raw log decoding of the same run.

    eval "$(scripts/services env)"; python -m bench.wide [--only pg|mysql] [--events 300000] [--debezium]

The narrow capture of bench/run.py, repeated on a 30-column table with a realistic mix of
types (bigint key, ints, bigints, numeric(12,2), 10-40 character strings, timestamps, dates,
booleans, a JSON column, about one value in five NULL in the nullable columns). One source
is primed (slot / checkpoint) and stopped; N events are written (90 % inserts in 10k-row
transactions, 10 % updates of 10k rows per transaction, then a sentinel row); the raw
baseline reads the same log range (pg_recvlogical on its own pgoutput slot; mariadb-binlog
--read-from-remote-server, plain and --verbose); then the capture runs in-process and is
timed until the sentinel's checkpoint is stored (everything durable in the Delta changelog).

With --debezium (opts["debezium"]), Debezium's embedded engine (bench/debezium.py) then reads
the same log range twice, with its count-only and its JSON-serialising consumer, and the
results get ``ours / Debezium`` ratios (throughput and CPU per event) from the same run.

MB/s are the bytes of the log range (WAL between the LSN before the load and after it;
binlog bytes between the two SHOW MASTER STATUS positions) divided by each reader's time.
The range is the server's whole log, so writes of other sessions during the load count too.

Contract (bench/run.py wires it in): run(kind, opts, workdir, say) -> dict, markdown(results),
plot(results, path). opts: see DEFAULTS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Optional

from . import debezium
from .common import NAMES, standalone
from .common import fmt_n as _n
from .dbs import INSERT_TXN, MariaDBBench, PostgresBench, in_transactions, split_events
from .engine_runs import SENTINEL_KEY, InProcessCapture

DEFAULTS = {
    "events": 300_000,  # log events: 90 % inserts, 10 % updates, plus one sentinel row
}

# (column, PostgreSQL type, MariaDB type, PostgreSQL expression, MariaDB expression) of the row
# whose key is g. One list for both servers, so their tables hold the same values.
COLUMNS = [
    ("id", "bigint PRIMARY KEY", "bigint PRIMARY KEY", "g", "g"),
    ("customer_id", "bigint NOT NULL", "bigint NOT NULL", "(g * 7919) % 1000000", "(g * 7919) % 1000000"),
    ("account_id", "bigint NOT NULL", "bigint NOT NULL", "g * 31", "g * 31"),
    ("session_id", "bigint", "bigint", "(g % 1000003) * 2654435761", "(g % 1000003) * 2654435761"),
    ("order_no", "int NOT NULL", "int NOT NULL", "(g % 2000000000)::int", "g % 2000000000"),
    ("quantity", "int NOT NULL", "int NOT NULL", "(g % 50 + 1)::int", "g % 50 + 1"),
    ("status", "int NOT NULL", "int NOT NULL", "(g % 6)::int", "g % 6"),
    ("store_id", "int", "int", "(g % 400)::int", "g % 400"),
    ("version", "int NOT NULL", "int NOT NULL", "1", "1"),
    (
        "amount",
        "numeric(12,2) NOT NULL",
        "decimal(12,2) NOT NULL",
        "((g % 9999999) / 100.0)::numeric(12,2)",
        "CAST((g % 9999999) / 100 AS DECIMAL(12,2))",
    ),
    (
        "tax",
        "numeric(12,2) NOT NULL",
        "decimal(12,2) NOT NULL",
        "((g % 9999999) / 500.0)::numeric(12,2)",
        "CAST((g % 9999999) / 500 AS DECIMAL(12,2))",
    ),
    (
        "discount",
        "numeric(12,2)",
        "decimal(12,2)",
        "CASE WHEN g % 4 = 0 THEN NULL ELSE ((g % 500) / 100.0)::numeric(12,2) END",
        "IF(g % 4 = 0, NULL, CAST((g % 500) / 100 AS DECIMAL(12,2)))",
    ),
    (
        "balance",
        "numeric(12,2) NOT NULL",
        "decimal(12,2) NOT NULL",
        "(((g % 2000000) - 1000000) / 100.0)::numeric(12,2)",
        "CAST(((g % 2000000) - 1000000) / 100 AS DECIMAL(12,2))",
    ),
    (
        "email",
        "varchar(64) NOT NULL",
        "varchar(64) NOT NULL",
        "'user' || g || '@example' || (g % 97) || '.com'",
        "CONCAT('user', g, '@example', g % 97, '.com')",
    ),
    (
        "first_name",
        "varchar(40) NOT NULL",
        "varchar(40) NOT NULL",
        "substr(md5(g::text), 1, 8)",
        "SUBSTR(MD5(g), 1, 8)",
    ),
    (
        "last_name",
        "varchar(40) NOT NULL",
        "varchar(40) NOT NULL",
        "substr(md5((g + 1)::text), 1, 12)",
        "SUBSTR(MD5(g + 1), 1, 12)",
    ),
    (
        "street",
        "varchar(64)",
        "varchar(64)",
        "(abs(g) % 999 + 1) || ' ' || substr(md5(g::text), 9, 16) || ' Street'",
        "CONCAT(ABS(g) % 999 + 1, ' ', SUBSTR(MD5(g), 9, 16), ' Street')",
    ),
    ("city", "varchar(40)", "varchar(40)", "'City ' || (abs(g) % 1000)", "CONCAT('City ', ABS(g) % 1000)"),
    (
        "country",
        "varchar(32) NOT NULL",
        "varchar(32) NOT NULL",
        "(ARRAY['Germany', 'France', 'United States', 'Italy', 'Spain'])[abs(g) % 5 + 1]",
        "ELT(ABS(g) % 5 + 1, 'Germany', 'France', 'United States', 'Italy', 'Spain')",
    ),
    (
        "sku",
        "varchar(24) NOT NULL",
        "varchar(24) NOT NULL",
        "'SKU-' || lpad((abs(g) % 100000)::text, 8, '0')",
        "CONCAT('SKU-', LPAD(ABS(g) % 100000, 8, '0'))",
    ),
    (
        "tracking_code",
        "varchar(32)",
        "varchar(32)",
        "upper(substr(md5((g * 3)::text), 1, 20))",
        "UPPER(SUBSTR(MD5(g * 3), 1, 20))",
    ),
    (
        "note",
        "text",
        "text",
        "CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || md5(g::text) END",
        "IF(g % 3 = 0, NULL, CONCAT('note ', MD5(g)))",
    ),
    (
        "created_at",
        "timestamp NOT NULL",
        "datetime(6) NOT NULL",
        "timestamp '2024-01-01' + (g % 31536000) * interval '1 second'",
        "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL (g % 31536000) SECOND",
    ),
    (
        "updated_at",
        "timestamptz",
        "timestamp(6) NULL DEFAULT NULL",
        "timestamptz '2024-06-01 00:00:00+00' + (g % 86400000) * interval '1 millisecond'",
        "TIMESTAMP'2024-06-01 00:00:00' + INTERVAL (g % 86400000) * 1000 MICROSECOND",
    ),
    (
        "shipped_at",
        "timestamp",
        "datetime(6) NULL",
        "CASE WHEN g % 5 = 0 THEN NULL ELSE timestamp '2024-02-01' + (g % 1000000) * interval '1 second' END",
        "IF(g % 5 = 0, NULL, TIMESTAMP'2024-02-01 00:00:00' + INTERVAL (g % 1000000) SECOND)",
    ),
    (
        "birth_date",
        "date",
        "date",
        "date '1950-01-01' + (g % 20000)::int",
        "DATE'1950-01-01' + INTERVAL (g % 20000) DAY",
    ),
    (
        "due_date",
        "date NOT NULL",
        "date NOT NULL",
        "date '2024-01-01' + (g % 365)::int",
        "DATE'2024-01-01' + INTERVAL (g % 365) DAY",
    ),
    ("is_active", "boolean NOT NULL", "boolean NOT NULL", "g % 2 = 0", "g % 2 = 0"),
    (
        "is_vip",
        "boolean",
        "boolean",
        "CASE WHEN g % 7 = 0 THEN NULL ELSE g % 10 = 1 END",
        "IF(g % 7 = 0, NULL, g % 10 = 1)",
    ),
    (
        "attrs",
        "jsonb",
        "JSON",
        "jsonb_build_object('src', 'web', 'n', g % 1000, 'tags', jsonb_build_array('a' || (g % 10), 'b'), "
        "'ok', g % 2 = 0)",
        "JSON_OBJECT('src', 'web', 'n', g % 1000, 'tags', JSON_ARRAY(CONCAT('a', g % 10), 'b'), 'ok', g % 2 = 0)",
    ),
]
assert len(COLUMNS) == 30


def _columns_ddl(dialect: int) -> str:
    return "(" + ", ".join(f"{c[0]} {c[dialect]}" for c in COLUMNS) + ")"


def _select(dialect: int) -> str:
    return ", ".join(c[dialect] for c in COLUMNS)


class WidePostgresBench(PostgresBench):
    """PostgresBench whose event table ``ev`` is the 30-column table (no dump table)."""

    log_name = "WAL"

    def create(self) -> None:
        self._run(f"CREATE SCHEMA {self.ns}", f"CREATE TABLE {self.event_table} {_columns_ddl(1)}")

    def source_config(self, source_id: str) -> dict:
        return dict(super().source_config(source_id), tables=[self.event_table])

    def _insert(self, source: str) -> str:
        return f"INSERT INTO {self.event_table} SELECT {_select(3)} FROM {source}"

    def insert_primer(self, key: int) -> None:
        self._run(self._insert(f"(SELECT {key}::bigint AS g) s"))

    def fill_event_table(self, rows: int) -> None:
        """Rows 1..rows in one statement (for a dump; written before any source exists)."""
        self._run(self._insert(f"generate_series(1::bigint, {rows}::bigint) AS s(g)"))
        self._run(f"VACUUM ANALYZE {self.event_table}", autocommit=True)

    def prepare_log_baseline(self) -> None:
        super().prepare_log_baseline()
        self.start_lsn = self._run("SELECT pg_current_wal_insert_lsn()::text")[0][0]

    def generate(self, n_events: int) -> dict:
        inserts, updates = split_events(n_events)
        c = self.connect()
        t0 = time.perf_counter()
        try:
            in_transactions(
                c,
                1,
                inserts,
                INSERT_TXN,
                lambda lo, hi: self._insert(f"generate_series({lo}::bigint, {hi}::bigint) AS s(g)"),
            )
            in_transactions(
                c,
                1,
                updates,
                INSERT_TXN,
                lambda lo, hi: (
                    f"UPDATE {self.event_table} SET quantity = quantity + 1, version = version + 1, "
                    f"updated_at = updated_at + interval '1 second' WHERE id BETWEEN {lo} AND {hi}"
                ),
            )
            cur = c.cursor()
            cur.execute("SELECT pg_current_wal_lsn()::text")
            self.end_lsn = cur.fetchone()[0]
        finally:
            c.close()
        return {"inserts": inserts, "updates": updates, "seconds": time.perf_counter() - t0}

    def log_bytes(self) -> int:
        return int(self._run(f"SELECT pg_wal_lsn_diff('{self.end_lsn}', '{self.start_lsn}')")[0][0])


class WideMariaDBBench(MariaDBBench):
    """MariaDBBench whose event table ``ev`` is the 30-column table (no dump table)."""

    log_name = "binlog"

    def create(self) -> None:
        self._run(f"CREATE DATABASE {self.ns}", f"CREATE TABLE {self.event_table} {_columns_ddl(2)}")

    def source_config(self, source_id: str) -> dict:
        return dict(super().source_config(source_id), tables=[self.event_table])

    def _insert(self, source: str) -> str:
        return f"INSERT INTO {self.event_table} SELECT {_select(4)} FROM {source}"

    def insert_primer(self, key: int) -> None:
        self._run(self._insert(f"(SELECT CAST({key} AS SIGNED) AS g) s"))

    def fill_event_table(self, rows: int) -> None:
        """Rows 1..rows in one statement (for a dump; written before any source exists)."""
        self._run(self._insert(f"(SELECT CAST(seq AS SIGNED) AS g FROM {self.ns}.seq_1_to_{rows}) s"))

    def generate(self, n_events: int) -> dict:
        inserts, updates = split_events(n_events)
        t0 = time.perf_counter()
        c = self.connect()
        try:
            # The Sequence engine's virtual table seq_<lo>_to_<hi> (any database holds it).
            in_transactions(
                c,
                1,
                inserts,
                INSERT_TXN,
                lambda lo, hi: self._insert(f"(SELECT CAST(seq AS SIGNED) AS g FROM {self.ns}.seq_{lo}_to_{hi}) s"),
            )
            in_transactions(
                c,
                1,
                updates,
                INSERT_TXN,
                lambda lo, hi: (
                    f"UPDATE {self.event_table} SET quantity = quantity + 1, version = version + 1, "
                    f"updated_at = updated_at + INTERVAL 1 SECOND WHERE id BETWEEN {lo} AND {hi}"
                ),
            )
        finally:
            c.close()
        self.end = self._master_status()
        return {"inserts": inserts, "updates": updates, "seconds": time.perf_counter() - t0}

    def log_bytes(self) -> int:
        sizes = dict((r[0], int(r[1])) for r in self._run("SHOW BINARY LOGS"))
        files = self._binlog_files()
        return sum(sizes[f] for f in files) - self.start[1] - (sizes[self.end[0]] - self.end[1])


WIDE = {"pg": WidePostgresBench, "mysql": WideMariaDBBench}


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _rate(n: int, seconds: float, log_bytes: int) -> dict:
    return {
        "seconds": round(seconds, 3),
        "events_per_s": round(n / seconds, 1),
        "mb_per_s": round(log_bytes / 2**20 / seconds, 2),
    }


def run(kind: str, opts: Optional[dict], workdir: str, say) -> dict:
    """Wide-row capture on one database ("pg" or "mysql"); cleans up even on failure."""
    o = {**DEFAULTS, **(opts or {})}
    n = int(o["events"])
    db = WIDE[kind]()
    source_id = db.source_ids(["wide"])["wide"]
    timeout = max(300.0, n / 500)
    cap: Optional[InProcessCapture] = None
    ok = False
    with_dbz = bool(o.get("debezium"))  # not in DEFAULTS: the default run is unchanged
    try:
        say(f"{kind} wide: creating {db.event_table} ({len(COLUMNS)} columns), priming {source_id}")
        db.create()
        cap = InProcessCapture(db, source_id, workdir)
        cap.start().prime(-1)
        cap.stop()
        db.prepare_log_baseline()
        if with_dbz:
            debezium.prepare(db)
        say(f"{kind} wide: writing {n} log events with the capture stopped")
        gen = db.generate(n)
        db.insert_primer(SENTINEL_KEY)  # the end marker, a transaction of its own
        log_bytes = db.log_bytes()
        out: dict = {
            "label": db.label,
            "columns": len(COLUMNS),
            "events": n,
            "load": {k: round(v, 2) if isinstance(v, float) else v for k, v in gen.items()},
            "log_name": db.log_name,
            "log_bytes": log_bytes,
        }

        say(f"{kind} wide: baseline {db.log_baseline_name}")
        out["baseline"] = dict(name=db.log_baseline_name, **_rate(n, db.run_log_baseline(), log_bytes))
        if kind == "mysql":
            out["baseline_decoded"] = dict(
                name="mariadb-binlog --verbose (rows decoded)", **_rate(n, db.run_log_baseline(verbose=True), log_bytes)
            )
        say(f"{kind} wide: capture in-process")
        cpu0 = time.process_time()
        r = cap.capture_until_sentinel(n, timeout)
        cpu = time.process_time() - cpu0
        cap.stop()
        dblog = _rate(n, r["seconds"], log_bytes)
        if with_dbz:  # the whole benchmark process: capture threads and the sentinel poll
            dblog["cpu_s"] = round(cpu, 3)
            dblog["cpu_us_per_event"] = round(cpu / n * 1e6, 2)
        for k in ("startup_s", "events_per_s_after_startup"):
            if k in r:
                dblog[k] = round(r[k], 3 if k == "startup_s" else 1)
        dblog["changelog_bytes"] = _dir_bytes(os.path.join(cap.dir, "lake"))
        out["dblog"] = dblog
        out["ratio"] = round(dblog["events_per_s"] / out["baseline"]["events_per_s"], 4)
        if "baseline_decoded" in out:
            out["ratio_decoded"] = round(dblog["events_per_s"] / out["baseline_decoded"]["events_per_s"], 4)
        say(
            f"{kind} wide: {dblog['events_per_s']:,.0f} events/s ({dblog['mb_per_s']} MB/s of {db.log_name}) vs "
            f"{out['baseline']['events_per_s']:,.0f} raw: ratio {out['ratio']}"
        )
        if with_dbz:
            out["debezium"] = {}
            for consumer in debezium.ENGINE_CONSUMERS:
                say(f"{kind} wide: {debezium.CONSUMERS[consumer]}")
                res = debezium.run(db, consumer, db.event_table, n, timeout, say)
                d = dict(name=res["name"], engine=res["engine"], **debezium.rate(res, n))
                d["ratio"] = debezium.ratio(dblog["events_per_s"], d["events_per_s"])
                d["cpu_ratio"] = debezium.cpu_ratio(dblog["cpu_us_per_event"], d["cpu_us_per_event"])
                out["debezium"][consumer] = d
                say(
                    f"{kind} wide: Debezium {consumer}: {d['events_per_s']:,.0f} events/s, "
                    f"{d['cpu_us_per_event']} CPU µs/event; ours / Debezium {d['ratio']}"
                )
        ok = True
        return out
    finally:
        if with_dbz:
            try:
                debezium.cleanup(db)
            except Exception as exc:
                say(f"{kind} wide: dropping the Debezium slots: {exc}")
        if cap is not None:
            try:
                cap.stop(120 if ok else 10)
            except Exception as exc:  # keep cleaning up
                say(f"{kind} wide: stopping {source_id}: {exc}")
            shutil.rmtree(cap.dir, ignore_errors=True)
        try:
            db.cleanup([source_id])
        except Exception as exc:
            say(f"{kind} wide: clean-up of {db.ns} failed: {exc}")


# -- reporting ---------------------------------------------------------------------------------
def _r(x) -> str:
    if not isinstance(x, (int, float)) or x != x:
        return "–"
    return f"{x:.2f}×" if x >= 0.1 or x <= 0 else f"{x:.3f}× (1/{1 / x:,.0f})"


def _mb(b) -> str:
    return f"{b / 2**20:,.1f}" if isinstance(b, (int, float)) else "–"


def markdown(results: dict) -> str:
    lines = [
        "### Capture throughput, wide rows (30 columns)",
        "",
        "The narrow-row capture above, repeated on a 30-column table: bigint key, ints and bigints, "
        "numeric(12,2), strings of 10-40 characters, timestamps (one with time zone), dates, booleans, "
        "a JSON column (jsonb / MariaDB JSON) and NULLs in about one of five nullable values. With the "
        "capture stopped, N events are written (90 % inserts in 10k-row transactions by `INSERT ... SELECT` "
        "from `generate_series` / MariaDB's `seq_1_to_N`, 10 % updates of 10k rows per transaction, then a "
        "sentinel row); the in-process capture is timed from start until the sentinel's checkpoint is stored "
        "(everything durable in the Delta changelog). Baseline: the same log range read by `pg_recvlogical` "
        "(own pgoutput slot and publication, to /dev/null) or `mariadb-binlog --read-from-remote-server` "
        "(median of 3, also with `--verbose`, which decodes the rows). MB/s = bytes of the log range (WAL / "
        "binlog; writes of other sessions during the load included) per second of each reader.",
        "",
        "| Source | Raw baseline | Events | Log MB | Baseline events/s | Baseline MB/s | DBLog events/s "
        "| DBLog MB/s | Ratio | Delta changelog MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in results.items():
        name = NAMES.get(kind, kind)
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} | | | | | | | | |")
            continue
        b, d = r["baseline"], r["dblog"]
        lines.append(
            f"| {r['label']} | {b['name']} | {_n(r['events'])} | {_mb(r['log_bytes'])} | "
            f"{_n(b['events_per_s'])} | {b['mb_per_s']:,.1f} | {_n(d['events_per_s'])} | "
            f"{d['mb_per_s']:,.1f} | {_r(r['ratio'])} | {_mb(d['changelog_bytes'])} |"
        )
        if "baseline_decoded" in r:
            bd = r["baseline_decoded"]
            lines.append(
                f"| ″ | {bd['name']} | ″ | ″ | {_n(bd['events_per_s'])} | {bd['mb_per_s']:,.1f} | ″ | ″ "
                f"| {_r(r['ratio_decoded'])} | |"
            )
    starts = [
        f"{NAMES.get(k, k)} {r['dblog']['startup_s']} s "
        f"({_n(r['dblog']['events_per_s_after_startup'])} events/s without it)"
        for k, r in results.items()
        if "error" not in r and "startup_s" in r["dblog"]
    ]
    if starts:
        lines += ["", "Start-up (connect, open the Delta tables) is inside these times: " + "; ".join(starts) + "."]
    if any("debezium" in r for r in results.values()):
        lines += ["", *markdown_debezium(results)]
    return "\n".join(lines) + "\n"


def markdown_debezium(results: dict) -> list[str]:
    """The --debezium rows: ours against Debezium's embedded engine, same run, same range."""
    lines = [
        "#### Against Debezium (same run)",
        "",
        "| Source | Reader | Events/s | CPU s | CPU µs per event | Start-up s | ours / Debezium (events/s) "
        "| CPU per event, Debezium / ours |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results.values():
        if "debezium" not in r:
            continue
        d = r["dblog"]
        lines.append(
            f"| {r['label']} | DBLog capture (durable Delta changelog) | {_n(d['events_per_s'])} | "
            f"{d['cpu_s']:.1f} | {d['cpu_us_per_event']:.1f} | {d.get('startup_s', '–')} | | |"
        )
        for b in r["debezium"].values():
            lines.append(
                f"| ″ | {b['name']} | {_n(b['events_per_s'])} | {b['cpu_s']:.1f} | {b['cpu_us_per_event']:.1f} | "
                f"{b['startup_s']} | {_r(b['ratio'])} | {_r(b['cpu_ratio'])} |"
            )
    return lines


def plot(results: dict, path: str) -> Optional[str]:
    ok = {k: r for k, r in results.items() if "error" not in r}
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: list[tuple[str, float, str, str]] = []  # (label, events/s, colour, annotation)
    for kind, r in ok.items():
        name = NAMES.get(kind, kind)
        bars.append((f"{name}\n{r['baseline']['name'].split(' ')[0]}", r["baseline"]["events_per_s"], "#9e9e9e", ""))
        if "baseline_decoded" in r:
            bars.append((f"{name}\nmariadb-binlog\n--verbose", r["baseline_decoded"]["events_per_s"], "#c8c8c8", ""))
        bars.append((f"{name}\nDBLog", r["dblog"]["events_per_s"], "#1f77b4", f"{_r(r['ratio'])} of raw"))
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(bars), 4.5))
    xs = range(len(bars))
    ax.bar(xs, [b[1] for b in bars], color=[b[2] for b in bars])
    for x, (_, v, _, note) in zip(xs, bars):
        ax.annotate(f"{v:,.0f}" + (f"\n{note}" if note else ""), (x, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([b[0] for b in bars], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("events/s (log scale)")
    ax.set_title(f"Capture throughput, wide rows ({len(COLUMNS)} columns)\nraw log readers (grey) vs DBLog (blue)")
    ax.margins(y=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.wide", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(WIDE), help="one database only")
    p.add_argument("--events", type=int, default=DEFAULTS["events"], help="log events (default %(default)s)")
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    p.add_argument(
        "--debezium",
        action="store_true",
        help="also run Debezium's embedded engine (count-only and JSON consumers) over the same log range "
        "and report ours / Debezium (builds bench/debezium/ with Maven once, cached in .bench-debezium/)",
    )
    args = p.parse_args(argv)

    opts: dict = {"events": args.events}
    if args.debezium:
        opts["debezium"] = True
    return standalone("wide", sys.modules[__name__], [args.only] if args.only else list(WIDE), opts, args.plot)


if __name__ == "__main__":
    sys.exit(main())
