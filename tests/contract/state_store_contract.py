"""The StateStore contract: every store (local SQLite now, ZooKeeper later) passes these.

A store's test module imports ``StateStoreContract`` and provides a ``store`` fixture plus a
``reopen`` fixture (a second handle on the same state, as another process would have).
"""

import threading
import time

import pytest

from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus, TableProgress
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import Position


class StateStoreContract:
    def test_checkpoint_round_trip_per_source(self, store, reopen):
        assert store.get_checkpoint("a") is None
        store.set_checkpoint("a", Position("0001", 3))
        store.set_checkpoint("b", Position("0009"))
        store.set_checkpoint("a", Position("0002"))
        other = reopen()
        assert other.get_checkpoint("a") == Position("0002")
        assert other.get_checkpoint("b") == Position("0009")
        other.clear_checkpoint("a")
        assert store.get_checkpoint("a") is None

    def test_dump_lifecycle(self, store, reopen):
        spec = DumpSpec.new("src", ["public.t"], [(1,), (2,)])
        store.add_dump(spec, DumpControl(chunk_size=5, delay_ms=7))
        d = reopen().get_dump(spec.dump_id)
        assert d.spec == spec and d.status is DumpStatus.PENDING
        assert (d.control.chunk_size, d.control.delay_ms) == (5, 7)
        store.set_status(spec.dump_id, DumpStatus.RUNNING)
        store.save_progress(spec.dump_id, "public.t", TableProgress((2,), 2, 1, True, 2))
        store.set_status(spec.dump_id, DumpStatus.FAILED, "boom")
        d = reopen().get_dump(spec.dump_id)
        assert d.status is DumpStatus.FAILED and d.error == "boom"
        assert d.progress == {"public.t": TableProgress((2,), 2, 1, True, 2)}

    def test_control_and_progress_do_not_overwrite_each_other(self, store, reopen):
        spec = DumpSpec.new("src", None)
        store.add_dump(spec)
        user = reopen()
        user.set_control(spec.dump_id, DumpControl(paused=True, chunk_size=3))
        store.save_progress(spec.dump_id, "x.y", TableProgress((9,), 9, 3))
        d = store.get_dump(spec.dump_id)
        assert d.control.paused and d.control.chunk_size == 3
        assert d.progress["x.y"].last_key == (9,)

    def test_dumps_version_moves_when_another_handle_adds_a_dump(self, store, reopen):
        """What the scheduler polls between its reads of the requests (core/scheduler.py): a
        request from another process moves it (a ZooKeeper watch fires a moment later)."""
        before = store.dumps_version("src")
        assert store.dumps_version("src") == before  # reading it changes nothing
        reopen().add_dump(DumpSpec.new("src", ["public.t"], None))
        deadline = time.monotonic() + 10
        while store.dumps_version("src") == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.dumps_version("src") != before

    def test_list_dumps_is_per_source_and_ordered(self, store):
        ids = []
        for i in range(3):
            s = DumpSpec.new("s1" if i != 1 else "s2", None)
            store.add_dump(s)
            ids.append(s.dump_id)
        assert [d.dump_id for d in store.list_dumps("s1")] == [ids[0], ids[2]]
        assert {d.dump_id for d in store.list_dumps()} >= set(ids)

    def test_unknown_dump_is_a_clear_error(self, store):
        with pytest.raises(RequestError, match="no dump with id"):
            store.get_dump("nope")
        with pytest.raises(RequestError):
            store.set_control("nope", DumpControl())

    def test_values(self, store, reopen):
        store.put_value("status/x", '{"a": 1}')
        store.put_value("status/x", '{"a": 2}')
        assert reopen().get_value("status/x") == '{"a": 2}'
        assert store.get_value("missing") is None

    def test_concurrent_writers(self, store, reopen):
        spec = DumpSpec.new("src", None)
        store.add_dump(spec)
        errors = []

        def work(handle, n):
            try:
                for i in range(50):
                    handle.set_checkpoint(f"s{n}", Position(f"{i:04d}"))
                    handle.save_progress(spec.dump_id, f"t{n}", TableProgress((i,), i, i))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(reopen(), n)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert all(store.get_checkpoint(f"s{n}") == Position("0049") for n in range(4))
        assert len(store.get_dump(spec.dump_id).progress) == 4


class FencedStateContract:
    """``StateStore.fenced`` (invariant 7): the lease holder's writes land while it holds the
    lease and are refused, changing nothing, once a newer holder took the lease; fenced
    checkpoints never move backwards. Needs the ``store`` and ``reopen`` fixtures."""

    def _lead(self, store, identity):
        from airflow_provider_dblog.state.lease import make_lease

        lease = make_lease(store, "src", identity)
        assert lease.acquire(threading.Event()) is not None
        return lease

    def test_writes_land_while_held_and_are_refused_after_a_newer_epoch(self, store, reopen):
        from airflow_provider_dblog.core.errors import StaleEpochError

        spec = DumpSpec.new("src", ["public.t"])
        store.add_dump(spec)
        a = self._lead(store, "a")
        fenced = store.fenced(a.fence())
        fenced.set_checkpoint("src", Position("0002"))
        fenced.set_status(spec.dump_id, DumpStatus.RUNNING)
        fenced.save_progress(spec.dump_id, "public.t", TableProgress((1,), 1, 1))
        fenced.put_value("status/src", "a's report")
        own = DumpSpec.new("src", ["public.t"], [(7,)])  # one the capture requests itself
        fenced.add_dump(own)
        seen = reopen()
        assert seen.get_dump(own.dump_id).spec == own
        assert seen.get_checkpoint("src") == Position("0002")
        assert seen.get_dump(spec.dump_id).status is DumpStatus.RUNNING
        assert seen.get_value("status/src") == "a's report"

        a.release()  # as if deposed: a newer holder takes the next epoch
        b = self._lead(reopen(), "b")
        assert b.epoch == 2
        writes = [
            lambda: fenced.set_checkpoint("src", Position("0009")),
            lambda: fenced.clear_checkpoint("src"),
            lambda: fenced.set_status(spec.dump_id, DumpStatus.DONE),
            lambda: fenced.save_progress(spec.dump_id, "public.t", TableProgress((9,), 9, 9, True)),
            lambda: fenced.save_progress(spec.dump_id, "public.other", TableProgress((9,), 9, 9, True)),
            lambda: fenced.put_value("status/src", "a woke up"),
            lambda: fenced.put_value("status/new-key", "a woke up"),
            lambda: fenced.add_dump(DumpSpec.new("src", ["public.t"], [(8,)])),
        ]
        for write in writes:
            with pytest.raises(StaleEpochError, match="lost the leader lease"):
                write()
        seen = reopen()
        assert seen.get_checkpoint("src") == Position("0002")
        dump = seen.get_dump(spec.dump_id)
        assert dump.status is DumpStatus.RUNNING
        assert dump.progress == {"public.t": TableProgress((1,), 1, 1)}
        assert seen.get_value("status/src") == "a's report"
        assert seen.get_value("status/new-key") is None
        assert len(seen.list_dumps("src")) == 2
        # The new holder's own fenced writes land.
        store_b = reopen().fenced(b.fence())
        store_b.set_checkpoint("src", Position("0003"))
        assert reopen().get_checkpoint("src") == Position("0003")
        b.release()

    def test_fenced_checkpoints_never_move_backwards(self, store, reopen):
        lease = self._lead(store, "a")
        fenced = store.fenced(lease.fence())
        fenced.set_checkpoint("src", Position("0005", 2))
        fenced.set_checkpoint("src", Position("0005", 1))
        fenced.set_checkpoint("src", Position("0004"))
        assert reopen().get_checkpoint("src") == Position("0005", 2)
        fenced.set_checkpoint("src", Position("0007"))
        assert reopen().get_checkpoint("src") == Position("0007")
        fenced.clear_checkpoint("src")  # a reset (--reset-position) is the only way back
        fenced.set_checkpoint("src", Position("0001"))
        assert reopen().get_checkpoint("src") == Position("0001")
        lease.release()
