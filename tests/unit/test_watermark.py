"""Algorithm 1 against a model database and log, over random interleavings (hypothesis).

The model: one table of integer keys. Writers commit upserts and deletes (each appended to
the log); the dumper writes LW, SELECTs a chunk from the *current* state, writes HW; the
engine processes the log with an arbitrary lag. Checked:
  * no time travel: every dump row equals its key's state as of the HW in the log;
  * order: every log event is emitted, in log order, and dump rows sit exactly at their HW;
  * convergence: replaying the output (last write per key wins) gives the final table.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.errors import WatermarkSequenceError
from airflow_provider_dblog.core.events import ChangeEvent, Op, Position, WatermarkEvent
from airflow_provider_dblog.core.watermark import ChunkAborted, ChunkDone, WatermarkWindow, WindowState

T = "public.t"


def pos(i: int) -> Position:
    return Position(f"{i:010d}")


TRUNCATE = -1  # a "write" of this key is a TRUNCATE of the table


def ev(i: int, key: int, value, txid=None) -> ChangeEvent:
    if key == TRUNCATE:
        return ChangeEvent("s", T, Op.TRUNCATE, (), None, None, pos(i), txid=txid or f"x{i}")
    op = Op.DELETE if value is None else Op.UPDATE
    after = None if value is None else {"id": key, "v": value}
    return ChangeEvent("s", T, op, (key,), None, after, pos(i), txid=txid or f"x{i}")


actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 15), st.one_of(st.none(), st.integers(0, 1000))),
        st.tuples(st.just("chunk"), st.integers(1, 6), st.integers(0, 3)),
        st.tuples(st.just("process"), st.integers(0, 8)),
    ),
    max_size=120,
)
# The same with TRUNCATEs among the writes, so some land inside chunk windows.
truncating_actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(TRUNCATE, 15), st.one_of(st.none(), st.integers(0, 1000))),
        st.tuples(st.just("chunk"), st.integers(1, 6), st.integers(0, 3)),
        st.tuples(st.just("truncating chunk"), st.integers(1, 6)),  # a TRUNCATE right after its SELECT
        st.tuples(st.just("process"), st.integers(0, 8)),
    ),
    max_size=120,
)


@dataclasses.dataclass
class Sim:
    invisible_bug: bool = False  # model PostgreSQL's commit/visibility race
    report_invisible: bool = True

    def __post_init__(self):
        self.db: dict[int, int] = {}
        self.log: list = []  # ChangeEvent | WatermarkEvent
        self.state_at: list[dict] = []  # db snapshot after each log entry
        self.cursor = 0
        self.window = WatermarkWindow()
        self.out: list = []  # (position, key, value) in emission order
        self.last_key = -1
        self.pending = None  # writes committed in the log but not yet visible

    def commit(self, key, value, visible=True):
        i = len(self.log)
        e = ev(i, key, value)
        self.log.append(e)
        if visible:
            self._apply(key, value)
        else:
            self.pending = (key, value, e.txid)
        self.state_at.append(dict(self.db))
        return e

    def _apply(self, key, value):
        if key == TRUNCATE:
            self.db.clear()
        elif value is None:
            self.db.pop(key, None)
        else:
            self.db[key] = value

    def watermark(self, uuid):
        self.log.append(WatermarkEvent(uuid, pos(len(self.log))))
        self.state_at.append(dict(self.db))

    def process(self, n):
        for _ in range(n):
            if self.cursor >= len(self.log):
                return
            item = self.log[self.cursor]
            self.cursor += 1
            for em in self.window.process(item):
                if isinstance(em, ChangeEvent) and em.op is Op.TRUNCATE:
                    self.out.append((em.position, TRUNCATE, None, "log"))
                elif isinstance(em, ChangeEvent):
                    self.out.append((em.position, em.key[0], em.after["v"] if em.after else None, "log"))
                elif isinstance(em, ChunkDone):
                    for j, row in enumerate(em.rows):
                        self.out.append((em.hw.with_sub(j + 1), row["id"], row["v"], "dump"))
                    self.last_key = em.context

    def chunk(self, size, lag_writes, rng_writes):
        if self.window.busy:
            return
        n = len(self.log)
        lw, hw = f"lw{n}", f"hw{n}"
        invisible = frozenset()
        if self.invisible_bug and rng_writes:
            # A transaction whose commit record lands before LW but is not yet visible.
            k, v = rng_writes[0]
            self.commit(k, v, visible=False)
            if self.report_invisible:
                invisible = frozenset({self.pending[2]})
        self.watermark(lw)
        keys = sorted(k for k in self.db if k > self.last_key)[:size]
        rows = [((k,), {"id": k, "v": self.db[k]}) for k in keys]
        if self.pending:
            self._apply(self.pending[0], self.pending[1])
            self.pending = None
        for k, v in rng_writes[1 : 1 + lag_writes]:
            self.commit(k, v)  # concurrent writes inside the window
        self.watermark(hw)
        new_last = keys[-1] if len(keys) == size else 10**9
        ems = self.window.open(lw, hw, T, rows, invisible, context=new_last)
        assert not [e for e in ems if not isinstance(e, ChunkAborted)]

    def finish(self):
        self.process(len(self.log) + 1)


def run(actions, **kw) -> Sim:
    sim = Sim(**kw)
    writes = [(a[1], a[2]) for a in actions if a[0] == "write"] or [(0, 1)]
    wi = 0
    for a in actions:
        if a[0] == "write":
            sim.commit(a[1], a[2])
        elif a[0] == "chunk":
            sim.chunk(a[1], a[2], writes[wi : wi + a[2] + 1])
            wi = (wi + 1) % len(writes)
        elif a[0] == "truncating chunk":  # (invisible_bug: the TRUNCATE before LW is invisible too)
            sim.chunk(a[1], 1, [(TRUNCATE, None), (TRUNCATE, None)])
        else:
            sim.process(a[1])
    sim.finish()
    # finish every dump so convergence covers the whole table
    while sim.last_key < 10**9:
        sim.chunk(4, 0, [])
        sim.finish()
    return sim


def check(sim: Sim) -> None:
    positions = [p for p, *_ in sim.out]
    assert positions == sorted(positions), "output is not in position order"
    logged = [(e.position, e.key[0] if e.key else TRUNCATE) for e in sim.log if isinstance(e, ChangeEvent)]
    assert [(p, k) for p, k, _, o in sim.out if o == "log"] == logged, "a log event was lost or reordered"
    for p, k, v, origin in sim.out:
        if origin == "dump":
            hw_index = int(p.coord)
            assert sim.state_at[hw_index].get(k) == v, f"time travel: dump row {k}={v} at {p}"
    replay: dict[int, int] = {}
    for _, k, v, _ in sim.out:
        if k == TRUNCATE:
            replay.clear()
        elif v is None:
            replay.pop(k, None)
        else:
            replay[k] = v
    assert replay == sim.db, "replaying the output does not give the table"
    assert sim.window.state is WindowState.IDLE


@settings(max_examples=400, deadline=None)
@given(actions)
def test_algorithm1_no_time_travel_order_and_convergence(acts):
    check(run(acts))


@settings(max_examples=300, deadline=None)
@given(actions)
def test_invisible_transactions_before_lw_are_window_events(acts):
    check(run(acts, invisible_bug=True, report_invisible=True))


@settings(max_examples=400, deadline=None)
@given(truncating_actions)
def test_truncates_inside_windows_abort_the_chunk_and_converge(acts):
    check(run(acts))


@settings(max_examples=300, deadline=None)
@given(truncating_actions)
def test_invisible_truncates_before_lw_abort_the_chunk_and_converge(acts):
    check(run(acts, invisible_bug=True, report_invisible=True))


def test_unreported_invisible_transaction_would_time_travel():
    """Negative control: without invisible_txids the model race really produces a stale row."""
    sim = Sim(invisible_bug=True, report_invisible=False)
    sim.commit(1, 10)
    sim.chunk(5, 0, [(1, 20)])  # commit of 1=20 lands before LW but the SELECT sees 1=10
    sim.finish()
    with pytest.raises(AssertionError, match="time travel"):
        check_dump_rows_only(sim)


def check_dump_rows_only(sim: Sim) -> None:
    for p, k, v, origin in sim.out:
        if origin == "dump":
            assert sim.state_at[int(p.coord)].get(k) == v, f"time travel: dump row {k}={v} at {p}"


def test_emitted_invisible_transaction_aborts_the_chunk():
    w = WatermarkWindow()
    w.process(ev(0, 1, 5, txid="tx9"))
    out = w.open("a", "b", T, [((1,), {"id": 1, "v": 4})], frozenset({"tx9"}), context="c")
    assert len(out) == 1 and isinstance(out[0], ChunkAborted)
    assert not w.busy


def test_stale_watermarks_are_dropped_and_never_emitted():
    w = WatermarkWindow()
    assert w.process(WatermarkEvent("old-lw", pos(0))) == []
    w.open("lw", "hw", T, [((1,), {"id": 1, "v": 1})], context=None)
    assert w.process(WatermarkEvent("old-hw", pos(1))) == []
    assert w.state is WindowState.AWAITING_LW


def test_high_watermark_before_low_is_a_bug():
    w = WatermarkWindow()
    w.open("lw", "hw", T, [], context=None)
    with pytest.raises(WatermarkSequenceError, match="before its low watermark"):
        w.process(WatermarkEvent("hw", pos(0)))


def test_delete_and_update_in_window_remove_keys_other_tables_do_not():
    w = WatermarkWindow()
    rows = [((k,), {"id": k, "v": 0}) for k in (1, 2, 3, 4)]
    w.open("lw", "hw", T, rows, context=None)
    w.process(ev(0, 1, 9))  # before LW: no effect
    w.process(WatermarkEvent("lw", pos(1)))
    w.process(ev(2, 2, None))  # delete in window
    w.process(ev(3, 3, 7))  # update in window
    other = dataclasses.replace(ev(4, 4, 1), table="public.other")
    w.process(other)
    (done,) = w.process(WatermarkEvent("hw", pos(5)))
    assert [r["id"] for r in done.rows] == [1, 4]
    assert done.selected == 4 and done.hw == pos(5)


def test_window_cannot_open_twice():
    w = WatermarkWindow()
    w.open("a", "b", T, [], context=None)
    with pytest.raises(WatermarkSequenceError):
        w.open("c", "d", T, [], context=None)


def test_truncate_inside_the_window_aborts_the_chunk_and_is_passed_on():
    w = WatermarkWindow()
    w.open("lw", "hw", T, [((1,), {"id": 1, "v": 0})], context="c")
    w.process(WatermarkEvent("lw", pos(0)))
    t = ev(1, TRUNCATE, None)
    out = w.process(t)
    assert out[0] is t and isinstance(out[1], ChunkAborted) and out[1].context == "c"
    assert "truncated" in out[1].reason and not w.busy
    assert w.process(WatermarkEvent("hw", pos(2))) == []  # the aborted chunk's HW is stale


def test_truncate_before_lw_or_of_another_table_keeps_the_chunk():
    w = WatermarkWindow()
    w.open("lw", "hw", T, [((1,), {"id": 1, "v": 0})], context=None)
    assert w.process(ev(0, TRUNCATE, None)) == [ev(0, TRUNCATE, None)]  # the SELECT came after it
    w.process(WatermarkEvent("lw", pos(1)))
    w.process(dataclasses.replace(ev(2, TRUNCATE, None), table="public.other"))
    (done,) = w.process(WatermarkEvent("hw", pos(3)))
    assert isinstance(done, ChunkDone) and [r["id"] for r in done.rows] == [1]


def test_truncate_in_a_transaction_invisible_to_the_select_aborts_the_chunk():
    w = WatermarkWindow()
    w.open("lw", "hw", T, [((1,), {"id": 1, "v": 0})], frozenset({"tx5"}), context=None)
    out = w.process(ev(0, TRUNCATE, None, txid="tx5"))  # before LW, but the SELECT did not see it
    assert isinstance(out[-1], ChunkAborted) and not w.busy
