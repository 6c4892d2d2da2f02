"""``ChangelogCommitTrigger``: an asset watcher that fires when the changelog has new commits.

It watches every changelog table of the lake (one per source, outputs/lake_layout.py; the one
shared table of a lake written before), or one source's (``source=``). Its version is the sum
of theirs: it grows with every commit of any of them (a table is never removed, and a new
one adds its own), so one number is stored and compared as before. New sources' tables are
looked for every ``discover_interval`` seconds (one LIST request on an object store).

Event-driven landing (Airflow 3 ``AssetWatcher``): the ``dblog_land`` DAG runs when data has
arrived instead of on a clock, so a mirror is as fresh as one Spark run allows. The trigger
polls the changelog's Delta log (delta-rs reads only the log entries added since its last
look), in a thread so the triggerer's event loop never waits on storage, and fires at most
once per ``min_interval`` so a busy capture (a commit per second) does not queue a landing
per commit: the next landing takes everything committed meanwhile.

The last version fired for is kept in the asset's state store (Airflow 3.3+), so a triggerer
restart fires only for what is new; without a stored version it fires once at start (a
landing run with nothing new is cheap and changes nothing).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from ..outputs.lake_layout import absolute, changelog_path, require_segment

STATE_KEY = "dblog_changelog_version"
# A trigger's arguments are stored in Airflow's database and shown in its UI: storage options
# that look like credentials are refused there; they come from a connection (conn_id).
_SECRET_OPTION = re.compile(
    r"secret|token|password|passwd|credential|sas|access_key|account_key|service_account|private", re.I
)


class ChangelogCommitTrigger(BaseEventTrigger):
    """Fire ``{"changelog_version": v, ...}`` when the changelog under ``lake`` (of
    ``source``, or of every source) has a version after the last one fired for, at most once
    per ``min_interval`` seconds."""

    def __init__(
        self,
        lake: str,
        *,
        poll_interval: float = 5.0,
        min_interval: float = 60.0,
        storage_options: Optional[dict[str, str]] = None,
        conn_id: Optional[str] = None,
        source: Optional[str] = None,
        discover_interval: float = 60.0,
    ) -> None:
        super().__init__()
        secret = sorted(k for k in (storage_options or {}) if _SECRET_OPTION.search(str(k)))
        if secret:
            from ..core.errors import ConfigurationError

            raise ConfigurationError(
                f"ChangelogCommitTrigger got credentials in storage_options ({', '.join(secret)}): a "
                "trigger's arguments are stored in Airflow's database and shown in its UI.",
                "pass conn_id= (an aws connection: docs/deploy.md) or set the AWS_* variables in the "
                "triggerer's environment; keep only non-secret options (region, endpoint) here.",
            )
        self.lake = lake
        self.poll_interval = float(poll_interval)
        self.min_interval = float(min_interval)
        self.storage_options = storage_options
        self.conn_id = conn_id
        self.source = require_segment(source) if source else None
        self.discover_interval = float(discover_interval)
        self._tables: dict[str, Any] = {}  # uri -> DeltaTable, kept up to date incrementally
        self._shared = False  # the lake was written before the table per source
        self._looked = float("-inf")  # when the lake was last listed for new tables

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_dblog.triggers.changelog.ChangelogCommitTrigger",
            {
                "lake": self.lake,
                "poll_interval": self.poll_interval,
                "min_interval": self.min_interval,
                "storage_options": self.storage_options,
                "conn_id": self.conn_id,
                "source": self.source,
                "discover_interval": self.discover_interval,
            },
        )

    @property
    def root(self) -> str:
        return absolute(self.lake)

    def _uris(self, options: Optional[dict[str, str]]) -> list[str]:
        """The tables to watch now: those known, and every ``discover_interval`` new ones."""
        if self._shared or time.monotonic() - self._looked < self.discover_interval:
            return list(self._tables)
        from ..outputs.delta import list_sources, written_before

        self._looked = time.monotonic()
        if written_before(self.root, options):
            self._shared = True
            return [changelog_path(self.root)]
        sources = [self.source] if self.source else list_sources(self.root, options)
        return sorted({*self._tables, *(changelog_path(self.root, s) for s in sources)})

    def _version(self) -> Optional[int]:
        """The sum of the changelog tables' latest versions (None before a capture created
        one). Blocking."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        options = self._options()
        for uri in self._uris(options):
            try:
                table = self._tables.get(uri)
                if table is None:
                    self._tables[uri] = DeltaTable(uri, storage_options=options)
                else:
                    table.update_incremental()  # reads only the new log entries
            except TableNotFoundError:
                continue  # a source's directory before its table's first commit
        if not self._tables:
            return None
        return sum(int(table.version()) for table in self._tables.values())

    def _options(self) -> Optional[dict[str, str]]:
        """The storage options: the given ones and the connection's keys (read in the
        triggerer, at run time; never serialized). Blocking."""
        if not self.conn_id:
            return self.storage_options
        from airflow.sdk import BaseHook

        from ..hooks.object_store import aws_settings

        return {**(self.storage_options or {}), **aws_settings(self.conn_id, BaseHook.get_connection(self.conn_id))}

    async def _stored(self) -> Optional[int]:
        store = self.asset_state_store
        if store is None:
            return None
        value = await store.aget(STATE_KEY)
        return int(value) if isinstance(value, (int, str)) else None

    async def _store(self, version: int) -> None:
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(STATE_KEY, version)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        fired = await self._stored()
        last_fire = float("-inf")
        while True:
            version = await asyncio.to_thread(self._version)
            if version is not None and (fired is None or version > fired):
                wait = last_fire + self.min_interval - time.monotonic()
                if wait > 0:  # coalesce: the landing after the pause takes every commit since
                    await asyncio.sleep(wait)
                    continue
                self.log.info("changelog of %s: version %d (after %s): landing", self.root, version, fired)
                yield TriggerEvent({"changelog_version": version, "previous_version": fired, "lake": self.lake})
                fired, last_fire = version, time.monotonic()
                await self._store(version)
            await asyncio.sleep(self.poll_interval)
