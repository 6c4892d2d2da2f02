"""The engine's raised generation-0 GC threshold: raised while engines run, restored after."""

from __future__ import annotations

import gc
import threading

import pytest

from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.gc_threshold import raised_gc_threshold

from .memory_capture import TABLE, MemoryChangelog, MemoryDatabase, MemorySource
from .test_engine import FAST, wait_until


@pytest.fixture
def default_threshold():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_the_threshold_is_raised_inside_and_restored_by_the_last_engine(default_threshold):
    with raised_gc_threshold(50_000):
        assert gc.get_threshold() == (50_000, 10, 10)
        with raised_gc_threshold(20_000):  # a second engine asking for less keeps the higher
            assert gc.get_threshold()[0] == 50_000
        assert gc.get_threshold()[0] == 50_000
    assert gc.get_threshold() == (700, 10, 10)
    with raised_gc_threshold(None):
        assert gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(90_000, 10, 10)  # an application's own higher setting is kept
    with raised_gc_threshold(50_000):
        assert gc.get_threshold()[0] == 90_000
    assert gc.get_threshold()[0] == 90_000


def test_an_engine_runs_with_the_raised_threshold(default_threshold, state):
    seen: list[int] = []

    class Watching(MemoryChangelog):
        def write(self, events, epoch=None):
            seen.append(gc.get_threshold()[0])
            super().write(events, epoch)

    db = MemoryDatabase()
    db.upsert(TABLE, {"id": 1, "v": "x"})
    stop = threading.Event()
    engine = Engine(MemorySource(db), Watching(), state, EngineConfig(**{**FAST, "gc_threshold": 40_000}))
    thread = threading.Thread(target=engine.run, args=(stop,), daemon=True)
    thread.start()
    wait_until(lambda: seen, what="a commit")
    stop.set()
    thread.join(30)
    assert seen[0] == 40_000
    assert gc.get_threshold() == (700, 10, 10)
