"""``DumpTrigger``: waits for a recorded dump to finish, logging its progress.

The dump itself runs inside the capture (DESIGN: a dump never runs outside it); this trigger
only polls the state store. The store clients block (SQLite, kazoo), so every poll runs in a
worker thread via ``asyncio.to_thread`` — short calls, unlike the capture's decoding.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..core.dump_requests import control_dump, dump_status
from ..hooks.connections import STATE_ONLY, DBLogConnections
from ..hooks.dblog import DBLogHook

FINISHED = ("done", "failed", "cancelled")
# A finished dump's lifecycle event (what a notifier receives): "completed", not the status "done".
FINAL_EVENT = {"done": "completed", "failed": "failed", "cancelled": "cancelled"}


def seen_state(d: dict[str, Any]) -> dict[str, Any]:
    """What ``lifecycle`` compares: small enough to travel in a trigger's arguments."""
    return {
        "status": d["status"],
        "paused": bool(d.get("paused")),
        "done": sorted(t for t, p in d["progress"].items() if p["done"]),
    }


def lifecycle(seen: Optional[dict[str, Any]], d: dict[str, Any]) -> list[dict[str, Any]]:
    """The lifecycle events between the state last seen and the dump now, in the order they
    happen: ``started``, ``paused`` / ``resumed``, ``table_done`` per table, and at the end
    ``completed``, ``failed`` or ``cancelled`` (with the error). Each carries the dump id."""
    was = seen or {"status": "pending", "paused": False, "done": []}
    base = {"dump_id": d["dump_id"], "source_id": d.get("source_id")}
    events: list[dict[str, Any]] = []
    if was["status"] == "pending" and d["status"] != "pending":
        events.append({**base, "event": "started"})
    paused = bool(d.get("paused"))
    if paused != was["paused"] and d["status"] not in FINISHED:
        events.append({**base, "event": "paused" if paused else "resumed"})
    for table, p in d["progress"].items():
        if p["done"] and table not in was["done"]:
            events.append({**base, "event": "table_done", "table": table, "rows": p["rows"], "chunks": p.get("chunks")})
    if d["status"] in FINISHED and was["status"] not in FINISHED:
        final = {**base, "event": FINAL_EVENT[d["status"]], "rows": d["rows"], "chunks": d["chunks"]}
        events.append({**final, "error": d["error"]} if d.get("error") else final)
    return events


def progress_line(d: dict[str, Any]) -> str:
    """``dump 1a2b running: 3 chunks, 30,000 rows (42.0% of ~71,000 estimated rows)`` — one
    line per change. The estimate is the database's statistics (MariaDB's TABLE_ROWS,
    PostgreSQL's reltuples), stale until the table is analyzed: once the rows pass it, the
    line says the estimate was low instead of a percentage stuck at 100."""
    tables = d["progress"].values()
    est = sum(t.get("estimated_rows", 0) for t in tables)
    paused = " (paused)" if d.get("paused") else ""
    text = f"dump {d['dump_id']} {d['status']}{paused}: {d['chunks']} chunks, {d['rows']:,} rows"
    if est and d["rows"] > est:
        text += f" (estimate ~{est:,} was low)"
    elif est:
        done_est = sum(t.get("estimated_rows", 0) for t in tables if t["done"])
        running = sum(min(t["rows"], t.get("estimated_rows", 0)) for t in tables if not t["done"])
        text += f" ({min(100.0, 100 * (done_est + running) / est):.1f}% of ~{est:,} estimated rows)"
    if d.get("error"):
        text += f"; error: {d['error']}"
    return text


class DumpTrigger(BaseTrigger):
    """Poll a dump's status in the state store; fire when it is done, failed or cancelled.

    With ``notify``, fire also at each lifecycle event before that (``lifecycle``), with the
    status ``progress``: the operator hands the events to its notifiers and defers again with
    ``seen``, the state they were computed against, so no event is delivered twice."""

    def __init__(
        self,
        dump_id: str,
        *,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        poll_interval: float = 5.0,
        notify: bool = False,
        seen: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.dump_id = dump_id
        self.connections = DBLogConnections(state_conn_id=state_conn_id, state=state)
        self.poll_interval = float(poll_interval)
        self.notify = bool(notify)
        self.seen = seen

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_dblog.triggers.dump.DumpTrigger",
            {
                "dump_id": self.dump_id,
                **self.connections.kwargs(*STATE_ONLY),
                "poll_interval": self.poll_interval,
                "notify": self.notify,
                "seen": self.seen,
            },
        )

    def hook(self) -> DBLogHook:
        return self.connections.hook()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        await hook.aprefetch_connections()
        store = await asyncio.to_thread(hook.get_state)  # one store (one ZooKeeper session) for all polls
        try:
            last = None
            while True:
                d = await asyncio.to_thread(dump_status, store, self.dump_id)
                line = progress_line(d)
                if line != last:
                    self.log.info("%s", line)
                    last = line
                events = lifecycle(self.seen, d)
                if d["status"] in FINISHED:
                    yield TriggerEvent({"status": d["status"], "dump": d, "events": events})
                    return
                if self.notify and events:
                    yield TriggerEvent({"status": "progress", "dump": d, "events": events, "seen": seen_state(d)})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.close)

    async def on_kill(self) -> None:
        """The user cleared or marked the deferred task: cancel the dump (Airflow 3.3+ calls this)."""
        self.log.info("task killed: cancelling dump %s", self.dump_id)
        hook = self.hook()
        await hook.aprefetch_connections()
        await asyncio.to_thread(self._cancel, hook)

    def _cancel(self, hook: DBLogHook) -> None:
        state = hook.get_state()
        try:
            control_dump(state, self.dump_id, "cancel")
        finally:
            state.close()
