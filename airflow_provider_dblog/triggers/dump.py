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
    """Poll a dump's status in the state store; fire when it is done, failed or cancelled."""

    def __init__(
        self,
        dump_id: str,
        *,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.dump_id = dump_id
        self.connections = DBLogConnections(state_conn_id=state_conn_id, state=state)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_dblog.triggers.dump.DumpTrigger",
            {
                "dump_id": self.dump_id,
                **self.connections.kwargs(*STATE_ONLY),
                "poll_interval": self.poll_interval,
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
                if d["status"] in FINISHED:
                    yield TriggerEvent({"status": d["status"], "dump": d})
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
