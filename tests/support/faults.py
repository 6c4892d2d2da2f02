"""Fault injection for tests: wrappers that make the capture slow where a test needs it.

``SlowOutput`` makes every output commit take longer (half before and half after the real
write) and appends a line to a marker file when a commit begins, so a test can SIGKILL the
process in the middle of a writer flush. ``WideWindowSource`` sleeps after each chunk SELECT
returns, i.e. between the SELECT and the high-watermark write, widening the window in which
concurrent writes must remove keys from the chunk. Both delegate everything else to the
object they wrap, and declare the capabilities (core/protocols.py) of what they wrap
explicitly: ``isinstance`` does not see ``__getattr__`` delegation on Python 3.12 and later.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from airflow_provider_dblog import cli, config
from airflow_provider_dblog.core.protocols import FullRowIndex, RowTextChunks, RowTextLog, RowTextOutput


class SlowOutput:
    def __init__(self, inner: Any, delay_s: float, marker: Optional[str] = None):
        self._inner, self._delay, self._marker = inner, delay_s, marker
        self.takes_row_text = isinstance(inner, RowTextOutput) and inner.takes_row_text

    def write(self, events, epoch=None):
        if self._marker and events:
            with open(self._marker, "a") as f:
                f.write(f"{time.time():.3f} {len(events)}\n")
        time.sleep(self._delay / 2)
        self._inner.write(events, epoch)
        time.sleep(self._delay / 2)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _SlowFullRowIndex(SlowOutput):
    def full_row_keys(self, source_id, table):
        return self._inner.full_row_keys(source_id, table)


def slow_output(inner: Any, delay_s: float, marker: Optional[str] = None) -> SlowOutput:
    """``SlowOutput`` with the capabilities of ``inner`` (a FullRowIndex stays one)."""
    return (_SlowFullRowIndex if isinstance(inner, FullRowIndex) else SlowOutput)(inner, delay_s, marker)


class WideWindowSource:
    """Wraps a real source (config.make_source), so it declares what both real sources do:
    parallel chunk readers, range digests, and rows as JSON text if the source gives them."""

    def __init__(self, inner: Any, delay_s: float):
        self._inner, self._delay = inner, delay_s

    @property
    def selects_row_text(self) -> bool:  # protocols.RowTextChunks
        return isinstance(self._inner, RowTextChunks) and self._inner.selects_row_text

    @property
    def logs_row_text(self) -> bool:  # protocols.RowTextLog
        return isinstance(self._inner, RowTextLog) and self._inner.logs_row_text

    def select_chunk(self, schema, after_key, limit, upper_key=None, where=None, texts=False):
        if texts and self.selects_row_text:
            result = self._inner.select_chunk(schema, after_key, limit, upper_key, where, texts=True)
        else:
            result = self._inner.select_chunk(schema, after_key, limit, upper_key, where)
        time.sleep(self._delay)
        return result

    def start_log(self, after, from_end=False, floor=None, texts=False):
        if texts and self.logs_row_text:
            self._inner.start_log(after, from_end, floor, texts=True)
        else:
            self._inner.start_log(after, from_end, floor)

    def chunk_readers(self, n):  # protocols.ParallelChunkReaders: the inner's, not slowed
        return self._inner.chunk_readers(n)

    def range_digest(self, schema, after_key, upper_key):  # protocols.RangeDigests
        return self._inner.range_digest(schema, after_key, upper_key)

    def row_hasher(self, schema):
        return self._inner.row_hasher(schema)

    def select_keys(self, schema, keys):
        result = self._inner.select_keys(schema, keys)
        time.sleep(self._delay)
        return result

    def __getattr__(self, name):
        return getattr(self._inner, name)


def faulty_parts(
    window_delay_s: float = 0.0, write_delay_s: float = 0.0, write_marker: Optional[str] = None
) -> cli.Parts:
    """The ``dblog`` command's parts (cli.Parts) with these faults (0 / None: none)."""

    def source(src: dict) -> Any:
        inner = config.make_source(src)
        return WideWindowSource(inner, window_delay_s) if window_delay_s else inner

    def output(out: dict) -> Any:
        inner = config.make_output(out)
        return slow_output(inner, write_delay_s, write_marker) if write_delay_s or write_marker else inner

    return cli.Parts(source=source, output=output)
