"""Fault injection for tests: wrappers that make the capture slow where a test needs it.

``SlowOutput`` makes every output commit take longer (half before and half after the real
write) and appends a line to a marker file when a commit begins, so a test can SIGKILL the
process in the middle of a writer flush. ``WideWindowSource`` sleeps after each chunk SELECT
returns, i.e. between the SELECT and the high-watermark write, widening the window in which
concurrent writes must remove keys from the chunk. Both delegate everything else to the
object they wrap.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from airflow_provider_dblog import cli, config


class SlowOutput:
    def __init__(self, inner: Any, delay_s: float, marker: Optional[str] = None):
        self._inner, self._delay, self._marker = inner, delay_s, marker

    def write(self, events, epoch=None):
        if self._marker and events:
            with open(self._marker, "a") as f:
                f.write(f"{time.time():.3f} {len(events)}\n")
        time.sleep(self._delay / 2)
        self._inner.write(events, epoch)
        time.sleep(self._delay / 2)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class WideWindowSource:
    def __init__(self, inner: Any, delay_s: float):
        self._inner, self._delay = inner, delay_s

    def select_chunk(self, schema, after_key, limit, *upper_key):
        result = self._inner.select_chunk(schema, after_key, limit, *upper_key)
        time.sleep(self._delay)
        return result

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
        return SlowOutput(inner, write_delay_s, write_marker) if write_delay_s or write_marker else inner

    return cli.Parts(source=source, output=output)
