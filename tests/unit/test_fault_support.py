"""tests/support: the fault-injecting wrappers and the ``faulty_dblog`` entry point."""

from __future__ import annotations

import time

from airflow_provider_dblog.core.protocols import Source
from airflow_provider_dblog.state.local import LocalStateStore
from tests.support import faulty_dblog
from tests.support.faults import SlowOutput, WideWindowSource


class Recorder:
    source_id = "x"

    def __init__(self):
        self.calls = []

    def select_chunk(self, schema, after_key, limit, upper_key=None, where=None, texts=False):
        self.calls.append(("chunk", after_key, limit))
        return "rows"

    def select_keys(self, schema, keys):
        self.calls.append(("keys", tuple(keys)))
        return "rows"

    def write(self, events, epoch=None):
        self.calls.append(("write", list(events), epoch))

    def tables(self):
        return ["s.t"]


def test_wide_window_source_sleeps_after_the_select():
    inner = Recorder()
    src = WideWindowSource(inner, 0.05)
    t0 = time.monotonic()
    assert src.select_chunk(None, (1,), 10) == "rows" and src.select_keys(None, [(2,)]) == "rows"
    assert time.monotonic() - t0 >= 0.1
    assert inner.calls == [("chunk", (1,), 10), ("keys", ((2,),))]
    assert src.tables() == ["s.t"] and src.source_id == "x"  # everything else is the source's


def test_wide_window_source_is_still_a_source():
    from airflow_provider_dblog.config import make_source

    real = make_source({"type": "postgres", "id": "s"})  # builds, does not connect
    assert isinstance(WideWindowSource(real, 0.01), Source)


def test_slow_output_marks_each_flush(tmp_path):
    inner, marker = Recorder(), tmp_path / "flushes"
    out = SlowOutput(inner, 0.02, str(marker))
    out.write([1, 2], 7)
    out.write([], None)  # an empty write is not a flush
    assert inner.calls == [("write", [1, 2], 7), ("write", [], None)]
    assert [line.split()[1] for line in marker.read_text().splitlines()] == ["2"]


def test_faulty_dblog_runs_the_dblog_command(tmp_path, capsys):
    state = tmp_path / "state.db"
    LocalStateStore(str(state)).close()  # a capture's store: status and pause open no other
    assert (
        faulty_dblog.main(
            ["--write-delay-ms", "5", "--", "status", "--state", str(state), "--source-id", "s", "--json"]
        )
        == 0
    )
    assert '"source_id": "s"' in capsys.readouterr().out
    assert faulty_dblog.main(["--", "pause", "--state", str(state), "nope"]) == 2
    assert "no dump with id" in capsys.readouterr().err


def test_wide_window_source_declares_the_capabilities_of_the_source_it_wraps():
    from airflow_provider_dblog.config import make_source
    from airflow_provider_dblog.core.protocols import ParallelChunkReaders, RangeDigests, RowTextChunks, RowTextLog

    wrapped = WideWindowSource(make_source({"type": "postgres", "id": "s"}), 0.01)
    for capability in (ParallelChunkReaders, RangeDigests, RowTextChunks, RowTextLog):
        assert isinstance(wrapped, capability), capability
    assert wrapped.selects_row_text and wrapped.logs_row_text
    # Around a source that gives no texts, the wrapper says so and never asks for them.
    plain = WideWindowSource(Recorder(), 0.0)
    assert not plain.selects_row_text and not plain.logs_row_text
    assert plain.select_chunk(None, (1,), 10, None, None, texts=True) == "rows"
