"""Python's cyclic garbage collector, made to run less often while a capture runs.

The capture allocates container objects at a high rate (row dicts, tuples, events) that live
until their batch is committed. With CPython's default generation-0 threshold (700
allocations) the collector ran every few rows and re-examined every event still buffered:
on 30-column MariaDB rows it was a quarter of the rows decoder's time (py-spy, docs/benchmarks.md).
None of these objects form cycles, so collecting less often frees the same memory.

The threshold is process-wide: while any engine runs it is raised to the highest one asked
for, and the previous thresholds come back when the last engine stops.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Optional

_lock = threading.Lock()
_held: list[int] = []  # the generation-0 thresholds asked for by the engines running now
_saved: Optional[tuple[int, int, int]] = None


def _apply() -> None:
    assert _saved is not None
    gen0, gen1, gen2 = _saved
    gc.set_threshold(max([gen0, *_held]), gen1, gen2)


@contextlib.contextmanager
def raised_gc_threshold(gen0: Optional[int]) -> Iterator[None]:
    """Generation 0 collects after at least ``gen0`` allocations inside the block (None or
    0: the interpreter's setting stays). A threshold already higher is kept."""
    global _saved
    if not gen0:
        yield
        return
    with _lock:
        if not _held:
            _saved = gc.get_threshold()
        _held.append(gen0)
        _apply()
    try:
        yield
    finally:
        with _lock:
            _held.remove(gen0)
            if _held:
                _apply()
            else:
                assert _saved is not None
                gc.set_threshold(*_saved)
