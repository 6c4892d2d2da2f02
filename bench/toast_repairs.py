"""What the capture's automatic TOAST repairs cost (issue 39 part 2), on PostgreSQL.

Without REPLICA IDENTITY FULL, an UPDATE that leaves a TOASTed column unchanged reaches the
changelog with the placeholder ``{"$unchanged_toast": true}``; the capture queues key-list
"repair" dumps (core/toast.py ``ToastRepairs``) for the keys whose full row it has not
emitted in this process (``ToastKnown``). A restarted capture knows no key, so the
placeholders it reads again (from the checkpoint on) and those that follow queue repairs.

The run: a table ``docs (id int primary key, n int, doc text)`` whose ``doc`` is 20,000
random base64 characters (incompressible, so stored out of line; REPLICA IDENTITY DEFAULT),
``--rows`` seeded rows; ``dblog capture`` as a child process (local state file, ``delta://``
changelog in a temporary directory); a backfill ``dblog dump --all`` waited for; then
``--threads`` connections run single-row ``UPDATE docs SET n = n + 1 WHERE id = <random>``
for ``--seconds`` seconds, the capture SIGKILLed halfway and restarted at once (the
expensive case). After the workload stops, a sentinel row is inserted; the capture has
drained when the sentinel is in the changelog and no dump is pending or running. Printed:
placeholders in the changelog (events whose ``after`` holds ``$unchanged_toast``), repair
dumps queued (the key-list dumps of ``state.list_dumps``; also how many were pending at the
SIGKILL and queued after the restart), performed (done with rows > 0), rows read by them
(their progress rows), rows read per placeholder, the drain time after the workload stopped, and ``dblog verify`` of the table (0 mismatches expected).

    eval "$(scripts/services env)"
    python -m bench.toast_repairs [--rows 1000] [--seconds 40] [--threads 4] [--seed 1]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.toast import UNCHANGED_TOAST_KEY
from airflow_provider_dblog.outputs.lake_layout import changelog_path
from airflow_provider_dblog.state.local import LocalStateStore

from .common import fmt_n as _n
from .common import raise_if_exited, say, terminate
from .dbs import PostgresBench
from .engine_runs import REPO, wait_for

DOC_CHARS = 20_000  # base64 of random bytes: pglz cannot shrink it, so it is TOASTed out of line
DRAIN_TIMEOUT = 3_600.0


def _doc(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(DOC_CHARS * 3 // 4)).decode()


class ChildCapture:
    """``dblog capture`` as a child process that can be SIGKILLed and started again."""

    def __init__(self, config: str, log_path: str):
        self.config, self.log_path = config, log_path
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
        cmd = [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", self.config, "capture"]
        with open(self.log_path, "a") as log:
            log.write(f"\n=== start at {time.time():.3f}\n")
            log.flush()
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)

    def check(self) -> None:
        raise_if_exited(self.proc, self.log_path, "the capture")

    def kill(self) -> None:
        self.check()
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 120) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        terminate(self.proc, timeout)


class UpdateLoad:
    """``threads`` connections, each committing single-row ``UPDATE ... SET n = n + 1`` of a
    random key (its own RNG, seeded from ``seed``) until stopped."""

    def __init__(self, db: PostgresBench, table: str, rows: int, threads: int, seed: int):
        self.db, self.table, self.rows = db, table, rows
        self.halt = threading.Event()
        self.counts = [0] * threads
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._work, args=(i, random.Random(seed * 1_000 + i)), daemon=True)
            for i in range(threads)
        ]

    def _work(self, i: int, rng: random.Random) -> None:
        try:
            c = self.db.connect()
            c.autocommit = True
            try:
                cur = c.cursor()
                while not self.halt.is_set():
                    cur.execute(f"UPDATE {self.table} SET n = n + 1 WHERE id = %s", (rng.randint(1, self.rows),))
                    self.counts[i] += 1
            finally:
                c.close()
        except Exception as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"bench: the update load failed: {self.errors[0]}")

    def stop(self) -> int:
        self.halt.set()
        for t in self.threads:
            t.join(60)
        self.check()
        return sum(self.counts)


def _write_config(path: str, source: dict, state_path: str, lake: str) -> None:
    lines = ["[source]"] + [f"{k} = {json.dumps(v)}" for k, v in source.items()]  # JSON is TOML here
    lines += ["", "[state]", f"path = {json.dumps(state_path)}", "", "[output]", f"url = {json.dumps(lake)}", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def _dblog(config: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", config, *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1_800)
    if check and proc.returncode != 0:
        raise RuntimeError(f"bench: dblog {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _changelog(lake_dir: str, source_id: str, table: str, columns: list[str], op: Optional[str] = None):
    """The table's changelog events (only ``columns``), read straight from the Delta table."""
    import pyarrow.dataset as pds
    from deltalake import DeltaTable

    uri = changelog_path(lake_dir, source_id)
    if not DeltaTable.is_deltatable(uri):
        return None
    flt = pds.field("table") == table
    if op is not None:
        flt = flt & (pds.field("op") == op)
    return DeltaTable(uri).to_pyarrow_dataset().to_table(columns=columns, filter=flt)


def _repair_dumps(state: LocalStateStore, source_id: str) -> list:
    return [d for d in state.list_dumps(source_id) if d.spec.keys is not None]


def _rows(dump) -> int:
    return sum(p.rows for p in dump.progress.values())


def run(rows: int, seconds: float, threads: int, seed: int, backfill: str = "first") -> dict:
    db = PostgresBench()
    source_id = db.source_ids(["toast"])["toast"]
    table = f"{db.ns}.docs"
    workdir = tempfile.mkdtemp(prefix="dblog-bench-toast-")
    lake_dir = os.path.join(workdir, "lake")
    config, state_path = os.path.join(workdir, "dblog.toml"), os.path.join(workdir, "state.db")
    cap = ChildCapture(config, os.path.join(workdir, "capture.log"))
    load: Optional[UpdateLoad] = None
    rng = random.Random(seed)
    out: dict = {"rows": rows, "seconds": seconds, "threads": threads, "seed": seed, "doc_chars": DOC_CHARS}
    try:
        say(f"creating {table} with {rows:,} rows of {DOC_CHARS:,}-character docs")
        db._run(
            f"CREATE SCHEMA {db.ns}",
            f"CREATE TABLE {table} (id int PRIMARY KEY, n int NOT NULL, doc text NOT NULL)",
            f"ALTER TABLE {table} REPLICA IDENTITY DEFAULT",
        )
        c = db.connect()
        try:
            cur = c.cursor()
            for i in range(1, rows + 1):
                cur.execute(f"INSERT INTO {table} VALUES (%s, 0, %s)", (i, _doc(rng)))
                if i % 200 == 0:
                    c.commit()
            c.commit()
            cur.execute(f"SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = '{table}'::regclass")
            out["toast_bytes"] = cur.fetchone()[0]
        finally:
            c.close()
        if out["toast_bytes"] < rows * DOC_CHARS // 2:
            raise RuntimeError(f"bench: the docs are not stored out of line ({out['toast_bytes']:,} TOAST bytes)")

        _write_config(config, dict(db.source_config(source_id), tables=[table]), state_path, f"delta://{lake_dir}")
        state = LocalStateStore(state_path)
        cap.start()
        wait_for(lambda: state.get_value(status_key(source_id)) is not None, 120, "the capture to start", cap.check)
        out["backfill"] = backfill

        def backfill_dump() -> None:
            dump_id = _dblog(config, "dump", "--all").stdout.strip().splitlines()[-1]
            t0 = time.perf_counter()
            wait_for(lambda: state.get_dump(dump_id).status is DumpStatus.DONE, 600, "the backfill dump", cap.check)
            out["backfill_s"] = round(time.perf_counter() - t0, 1)
            say(f"backfill dump done in {out['backfill_s']} s")

        if backfill == "first":  # every key has a full row before the updates: none needs a repair
            backfill_dump()
        say(f"update load for {seconds:g} s, {threads} threads")

        load = UpdateLoad(db, table, rows, threads, seed)
        t_load = time.perf_counter()
        load.start()
        while time.perf_counter() - t_load < seconds / 2:
            load.check()
            cap.check()
            time.sleep(0.2)
        before = _repair_dumps(state, source_id)
        out["repairs_queued_before_kill"] = len(before)
        out["repairs_pending_at_kill"] = sum(not d.status.finished for d in before)
        cap.kill()
        killed_at = time.time()
        say(f"capture SIGKILLed with {out['repairs_pending_at_kill']} repair dumps pending; restarting it")
        cap.start()
        while time.perf_counter() - t_load < seconds:
            load.check()
            cap.check()
            time.sleep(0.2)
        out["updates"] = load.stop()
        t_stop = time.perf_counter()
        out["updates_per_s"] = round(out["updates"] / (t_stop - t_load), 1)
        load = None
        sentinel = rows + 1
        db._run(f"INSERT INTO {table} VALUES ({sentinel}, 0, 'sentinel')")
        say(f"{out['updates']:,} updates; waiting for the capture to drain")

        def drained() -> bool:
            inserts = _changelog(lake_dir, source_id, table, ["key"], op="c")
            if inserts is None or [sentinel] not in [json.loads(k) for k in inserts.column("key").to_pylist()]:
                return False
            # the sentinel is written: every repair its placeholders needed is recorded by now
            return all(d.status.finished for d in state.list_dumps(source_id))

        wait_for(drained, DRAIN_TIMEOUT, "the capture to drain", cap.check, interval=0.5)
        out["drain_s"] = round(time.perf_counter() - t_stop, 1)

        updates = _changelog(lake_dir, source_id, table, ["key", "after"], op="u")
        marker = f'"{UNCHANGED_TOAST_KEY}"'
        held = [
            k
            for k, a in zip(updates.column("key").to_pylist(), updates.column("after").to_pylist())
            if a and marker in a
        ]
        out["placeholders"] = len(held)
        out["keys_updated"] = len(set(held))  # with the backfill last, each lacks a full row once
        repairs = _repair_dumps(state, source_id)
        performed = [d for d in repairs if d.status is DumpStatus.DONE and _rows(d) > 0]
        out["repairs_queued"] = len(repairs)
        out["repairs_performed"] = len(performed)
        out["repair_rows_read"] = sum(_rows(d) for d in repairs)
        out["repair_rows_per_placeholder"] = (
            round(out["repair_rows_read"] / out["placeholders"], 2) if out["placeholders"] else None
        )
        after = [d for d in repairs if d.spec.created_at >= killed_at]
        out["repairs_queued_after_restart"] = len(after)
        out["repair_rows_read_after_restart"] = sum(_rows(d) for d in after)
        out["repairs_not_done"] = sum(d.status is not DumpStatus.DONE for d in repairs)
        if backfill == "last":  # for the convergence check: keys never updated have no row yet
            backfill_dump()
        cap.stop()

        verify = _dblog(config, "verify", "--table", table, check=False)
        out["verify_exit"] = verify.returncode
        out["verify"] = verify.stdout.strip()
        m = re.search(r"(\d+) mismatches", verify.stdout)
        out["mismatches"] = int(m.group(1)) if m else None
        return out
    finally:
        if load is not None:
            load.stop()
        cap.stop(10)
        try:
            db.cleanup([source_id])
        except Exception as exc:  # noqa: BLE001 - report, keep the result
            say(f"clean-up of {db.ns} failed: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)


def markdown(r: dict) -> str:
    per = r["repair_rows_per_placeholder"]
    rows = [
        ("updates (all leave `doc` unchanged)", f"{_n(r['updates'])} ({r['updates_per_s']:,.0f}/s)"),
        ("placeholders in the changelog", _n(r["placeholders"])),
        ("keys updated", _n(r["keys_updated"])),
        ("repair dumps queued before the SIGKILL", _n(r["repairs_queued_before_kill"])),
        ("repair dumps pending at the SIGKILL", _n(r["repairs_pending_at_kill"])),
        ("repair dumps queued", _n(r["repairs_queued"])),
        ("… of them after the restart", _n(r["repairs_queued_after_restart"])),
        ("repair dumps performed (done, rows > 0)", _n(r["repairs_performed"])),
        ("rows read by repair dumps", _n(r["repair_rows_read"])),
        ("… by those queued after the restart", _n(r["repair_rows_read_after_restart"])),
        ("rows read per placeholder", f"{per:.2f}" if per is not None else "–"),
        ("drain after the workload stopped", f"{r['drain_s']:.1f} s"),
        ("`dblog verify`", f"{r['mismatches']} mismatches (exit {r['verify_exit']})"),
    ]
    head = (
        f"TOAST repairs: {r['rows']:,} rows with a {r['doc_chars']:,}-character doc, {r['threads']} update threads "
        f"for {r['seconds']:g} s, capture SIGKILLed and restarted halfway, backfill {r['backfill']} (seed {r['seed']})"
    )
    return "\n".join([head, "", "| | |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in rows])


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.toast_repairs", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000, help="rows in the table (default 1000)")
    p.add_argument("--seconds", type=float, default=40.0, help="length of the update workload (default 40)")
    p.add_argument("--threads", type=int, default=4, help="update connections (default 4)")
    p.add_argument("--seed", type=int, default=1, help="seeds the docs and the keys updated (default 1)")
    p.add_argument(
        "--backfill",
        choices=("first", "last"),
        default="first",
        help="dump the table before the updates (no key lacks a row: default) or after them "
        "(every key updated lacks a row until its repair)",
    )
    a = p.parse_args(argv)
    if a.rows < 1 or a.seconds <= 0 or a.threads < 1:
        p.error("--rows and --threads must be >= 1 and --seconds > 0")
    r = run(a.rows, a.seconds, a.threads, a.seed, a.backfill)
    print(json.dumps(r, indent=2))
    print(markdown(r))
    return 0 if r["mismatches"] == 0 and r["verify_exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
