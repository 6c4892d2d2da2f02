"""core/chunk_step.py: LW -> read -> HW -> window as one step, its hooks, and the kind of read
each plan gets. The engine on the in-memory source (tests/unit/memory_capture.py)."""

from __future__ import annotations

import threading
import time

from airflow_provider_dblog.core.chunk_step import ChunkStepHooks, plan_kind
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus
from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.events import Origin
from airflow_provider_dblog.core.scheduler import ChunkPlan
from airflow_provider_dblog.core.verify import replay

from .memory_capture import SOURCE_ID, TABLE, MemoryChangelog, MemoryDatabase, MemorySource

FAST = dict(
    poll_timeout=0.005, flush_interval=0.005, control_interval=0.01, status_interval=0.05, heartbeat_interval=None
)


def test_hooks_run_around_each_watermark_and_a_write_after_lw_leaves_the_chunk(state):
    """A write between LW and the read (the after_lw hook) is newer than nothing the chunk
    holds, yet it is in the window: its key leaves the chunk and the log's row wins."""
    db = MemoryDatabase()
    for i in range(1, 31):
        db.upsert(TABLE, {"id": i, "v": f"initial {i}"})
    calls: list[tuple[str, int]] = []
    watermarks = lambda: sum(1 for item in db.log if item.__class__.__name__ == "WatermarkEvent")  # noqa: E731

    def hook(name):
        def record(plan: ChunkPlan) -> None:
            calls.append((name, watermarks()))
            if name == "after_lw" and plan.start.last_key is None:  # the first chunk only
                db.upsert(TABLE, {"id": 3, "v": "written after LW"})

        return record

    hooks = ChunkStepHooks(*(hook(n) for n in ("before_lw", "after_lw", "before_hw", "after_hw")))
    source, out = MemorySource(db), MemoryChangelog()
    engine = Engine(source, out, state, EngineConfig(**FAST), chunk_hooks=hooks)
    stop = threading.Event()
    thread = threading.Thread(target=engine.run, args=(stop,), daemon=True)
    thread.start()
    try:
        spec = DumpSpec.new(SOURCE_ID, [TABLE])
        state.add_dump(spec, DumpControl(chunk_size=10))
        end = time.monotonic() + 20
        while state.get_dump(spec.dump_id).status is not DumpStatus.DONE:
            assert time.monotonic() < end, "the dump did not finish"
            time.sleep(0.005)
    finally:
        stop.set()
        thread.join(30)
    names = [n for n, _ in calls]
    assert names[:4] == ["before_lw", "after_lw", "before_hw", "after_hw"] and len(names) % 4 == 0
    for at in range(0, len(calls), 4):  # LW lands between before_lw and after_lw, HW likewise
        (_, b_lw), (_, a_lw), (_, b_hw), (_, a_hw) = calls[at : at + 4]
        assert a_lw == b_lw + 1 and b_hw == a_lw and a_hw == b_hw + 1
    dumped_3 = [e for e in out.events if e.key == (3,) and e.origin is Origin.DUMP]
    assert dumped_3 == []  # removed from its chunk by the write inside the window
    assert replay(out.events) == db.snapshot(TABLE)


def test_each_kind_of_plan_gets_its_read():
    from airflow_provider_dblog.core.dumps import TableProgress

    bounded = TableProgress(upper_key=(100,))

    def plan(start=bounded, **kw):
        return ChunkPlan(**{"dump_id": "d", "table": TABLE, "start": start, "size": 10, **kw})

    assert plan_kind(plan(keys=((1,),))) == "keys"
    assert plan_kind(plan(keys=())) == "none"  # an empty key list
    assert plan_kind(plan()) == "range"
    assert plan_kind(plan(readers=3)) == "parallel"
    assert plan_kind(plan(TableProgress())) == "none"  # the table was empty when its dump started
