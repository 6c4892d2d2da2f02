"""ChangelogCommitTrigger: fires on new changelog commits (a real Delta table written with
deltalake), coalesces them by ``min_interval``, resumes from the asset's stored version."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pyarrow as pa  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("airflow.sdk")

from deltalake import write_deltalake  # noqa: E402

from airflow_provider_dblog.triggers.changelog import STATE_KEY, ChangelogCommitTrigger  # noqa: E402


def commit(lake, n: int = 1, source: str = "pg1") -> None:
    for _ in range(n):
        write_deltalake(str(lake / "changelogs" / source), pa.table({"x": [1]}), mode="append")


class StateStore:
    """The accessor Airflow injects for the watched asset (aget/aset), in memory."""

    def __init__(self, **values):
        self.values = dict(values)

    async def aget(self, key, default=None):
        return self.values.get(key, default)

    async def aset(self, key, value):
        self.values[key] = value


async def next_event(gen, timeout: float = 5.0):
    return (await asyncio.wait_for(gen.__anext__(), timeout)).payload


def test_serialises_to_plain_data():
    t = ChangelogCommitTrigger("delta:///lake", poll_interval=2, min_interval=30)
    classpath, kwargs = t.serialize()
    json.dumps(kwargs)
    module, name = classpath.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)
    assert t.root == "/lake"
    with_source = ChangelogCommitTrigger("/lake", source="pg1", discover_interval=5)
    assert ChangelogCommitTrigger(**with_source.serialize()[1]).serialize() == with_source.serialize()


def test_fires_for_new_commits_and_coalesces_them(tmp_path):
    async def scenario():
        t = ChangelogCommitTrigger(f"delta://{tmp_path}", poll_interval=0.05, min_interval=0.6, discover_interval=0)
        t.asset_state_store = StateStore()
        gen = t.run()
        first = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.3)
        assert not first.done()  # no changelog yet: nothing to land
        commit(tmp_path)
        assert (await asyncio.wait_for(first, 5)).payload["changelog_version"] == 0
        commit(tmp_path, 3)  # three commits inside min_interval: one event for all of them
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ev = await next_event(gen)
        assert ev["changelog_version"] == 3 and ev["previous_version"] == 0
        assert t.asset_state_store.values[STATE_KEY] == 0  # stored once the first event was taken
        assert loop.time() - t0 >= 0.3  # held back until min_interval had passed
        await gen.aclose()

    asyncio.run(scenario())


def test_resumes_after_the_stored_version(tmp_path):
    commit(tmp_path, 2)  # versions 0 and 1

    async def scenario():
        t = ChangelogCommitTrigger(str(tmp_path), poll_interval=0.05, min_interval=0, discover_interval=0)
        t.asset_state_store = StateStore(**{STATE_KEY: 1})  # landed up to 1 before a restart
        gen = t.run()
        pending = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.3)
        assert not pending.done()
        commit(tmp_path)
        assert (await asyncio.wait_for(pending, 5)).payload["changelog_version"] == 2
        await gen.aclose()

    asyncio.run(scenario())


def test_watches_every_source_table_and_finds_new_ones(tmp_path):
    """A table per source: a commit to any of them fires, a source whose first commit comes
    later is found at the next look, and the version (their sum) only grows."""
    commit(tmp_path, 2, "a")  # versions 0, 1

    async def scenario():
        t = ChangelogCommitTrigger(str(tmp_path), poll_interval=0.05, min_interval=0, discover_interval=0.2)
        gen = t.run()
        assert (await next_event(gen))["changelog_version"] == 1
        commit(tmp_path, 1, "b")  # a new source: version 0 of its table, found by the next look
        commit(tmp_path, 1, "b")
        ev = await next_event(gen)
        assert ev["changelog_version"] == 2 and ev["previous_version"] == 1  # 1 + 1
        commit(tmp_path, 1, "a")
        assert (await next_event(gen))["changelog_version"] == 3
        await gen.aclose()
        only_b = ChangelogCommitTrigger(str(tmp_path), poll_interval=0.05, min_interval=0, source="b")
        gen = only_b.run()
        assert (await next_event(gen))["changelog_version"] == 1  # b's own version
        await gen.aclose()

    asyncio.run(scenario())


def test_a_lake_of_the_shared_layout_is_watched_as_before(tmp_path):
    write_deltalake(str(tmp_path / "changelog"), pa.table({"x": [1]}), mode="append")
    commit(tmp_path, 3, "ignored")  # not read in a lake whose sources share one table

    async def scenario():
        t = ChangelogCommitTrigger(str(tmp_path), poll_interval=0.05, min_interval=0, discover_interval=0)
        gen = t.run()
        assert (await next_event(gen))["changelog_version"] == 0
        write_deltalake(str(tmp_path / "changelog"), pa.table({"x": [1]}), mode="append")
        assert (await next_event(gen))["changelog_version"] == 1
        await gen.aclose()

    asyncio.run(scenario())
