"""Lock-wait sampling for bench/impact.py: every wait seen while a phase runs, classified as
involving the capture (must be zero), load-only, or other jobs on the shared server."""

from __future__ import annotations

import threading
import time
from typing import Optional

PG_WAITS = (
    "SELECT a.pid, a.application_name, a.wait_event, l.locktype, l.mode, "
    "l.relation::regclass::text, pg_blocking_pids(a.pid) FROM pg_stat_activity a "
    "LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted "
    "WHERE a.wait_event_type = 'Lock' OR l.pid IS NOT NULL"
)
PG_SESSIONS = "SELECT pid, application_name FROM pg_stat_activity WHERE application_name = ANY(%s)"
MY_WAITS = (
    "SELECT r.trx_mysql_thread_id, rp.DB, LEFT(r.trx_query, 300), b.trx_mysql_thread_id, bp.DB, "
    "LEFT(b.trx_query, 300) FROM information_schema.INNODB_LOCK_WAITS w "
    "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
    "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
    "LEFT JOIN information_schema.PROCESSLIST rp ON rp.ID = r.trx_mysql_thread_id "
    "LEFT JOIN information_schema.PROCESSLIST bp ON bp.ID = b.trx_mysql_thread_id"
)
MY_MDL = (
    "SELECT ID, DB, STATE, LEFT(INFO, 300) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for%lock%'"
)


class LockSampler(threading.Thread):
    """Every ~50 ms: the sessions waiting for a lock, each wait classified once (the same wait
    seen in many samples is one wait):
      capture  the waiter or a blocker is a capture session (log reader, watermark writes,
               chunk SELECTs), or the lock is on the dumped or the watermark table;
      load     between the load's own clients only (PostgreSQL relation-extension waits of
               concurrent INSERTs, say): present without any capture, reported apart;
      other    sessions of other jobs on the shared server, not counted."""

    def __init__(self, db, kind: str, load_app: str, capture_app: str, interval: float):
        super().__init__(name="lock-sampler", daemon=True)
        self.db, self.kind, self.interval = db, kind, interval
        self.load_app, self.capture_app = load_app, capture_app
        self.phase: Optional[str] = None
        self.stats: dict[str, dict] = {}
        self.halt = threading.Event()
        self.error: Optional[str] = None

    def set_phase(self, phase: Optional[str]) -> None:
        if phase is not None:
            self.stats[phase] = {
                "samples": 0,
                "samples_with_waits": 0,
                "examples": [],
                "capture": set(),
                "load": set(),
                "other": set(),
            }
        self.phase = phase

    def _sample(self, cur) -> list[tuple[str, tuple]]:
        if self.kind == "pg":
            cur.execute(PG_SESSIONS, ([self.load_app, self.capture_app],))
            apps = dict(cur.fetchall())
            load = {p for p, a in apps.items() if a == self.load_app}
            capture = set(apps) - load
            cur.execute(PG_WAITS)
            out = []
            for pid, app, wait, locktype, mode, rel, blockers in cur.fetchall():
                blockers = set(blockers or [])
                if pid in capture or blockers & capture or rel in (self.db.dump_table, "dblog.watermarks"):
                    cls = "capture"
                elif pid in load and blockers <= load:
                    cls = "load"
                else:
                    cls = "capture" if (rel or "").startswith(self.db.ns + ".") else "other"
                out.append((cls, (pid, app, wait, locktype, mode, rel)))
            return out
        # MariaDB: the load's clients are the sessions whose default database is the run's
        # schema; the capture's sessions have none, but only they and the load touch its tables.
        cur.execute(MY_WAITS)
        out = []
        for row in cur.fetchall():
            r_load, b_load = row[1] == self.db.ns, row[4] == self.db.ns
            mine = r_load or b_load or self.db.tag in " ".join(str(x) for x in row)
            out.append(("load" if r_load and b_load else "capture" if mine else "other", ("row",) + tuple(row)))
        cur.execute(MY_MDL)  # DML never waits for DML on a metadata lock: ours means the capture
        return out + [
            ("capture" if self.db.tag in " ".join(str(x) for x in row) else "other", ("mdl",) + tuple(row))
            for row in cur.fetchall()
        ]

    def run(self) -> None:
        c = self.db.connect()
        try:
            if self.kind == "pg":
                c.autocommit = True
            else:
                c.autocommit(True)
            cur = c.cursor()
            while not self.halt.is_set():
                t0 = time.monotonic()
                phase = self.phase
                waits = self._sample(cur)
                st = self.stats.get(phase) if phase else None
                if st is not None:
                    st["samples"] += 1
                    st["samples_with_waits"] += bool(waits)
                    for cls, what in waits:
                        st[cls].add(what)
                        if cls != "other" and len(st["examples"]) < 5:
                            st["examples"].append(f"{cls}: " + " ".join(str(x) for x in what)[:300])
                self.halt.wait(max(0.0, self.interval - (time.monotonic() - t0)))
        except Exception as exc:  # reported with the results: a silent sampler would read as "zero"
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            c.close()

    def summary(self, phase: str) -> dict:
        st = self.stats.get(phase, {})
        return {
            "samples": st.get("samples", 0),
            "samples_with_waits": st.get("samples_with_waits", 0),
            "waits_capture": len(st.get("capture", ())),
            "waits_load_only": len(st.get("load", ())),
            "waits_other_jobs": len(st.get("other", ())),
            "examples": st.get("examples", []),
        }


def row_lock_waits(db, kind: str) -> Optional[int]:
    if kind != "mysql":
        return None
    return int(db._run("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'")[0][1])


# -- the dump of phase c ------------------------------------------------------------------------
