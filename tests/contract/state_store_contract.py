"""The StateStore contract: every store (local SQLite now, ZooKeeper later) passes these.

A store's test module imports ``StateStoreContract`` and provides a ``store`` fixture plus a
``reopen`` fixture (a second handle on the same state, as another process would have).
"""

import threading

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
