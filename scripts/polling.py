"""``wait_for``: poll a condition until it holds, or fail after a timeout.

The one copy for the tests (tests/integration/capture_proc.py re-exports it), the Airflow
stack of the demo and the end-to-end test (scripts/airflow_stack.py) and the benchmarks
(bench/engine_runs.py). It lives here and not in ``airflow_provider_dblog`` because no
production code waits this way; scripts/ is already what tests, demo and benchmarks share.
Each caller picks the exception it raises on timeout (``error``): AssertionError in tests,
AirflowError for the stack, TimeoutError with a "bench:" prefix in the benchmarks.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional


def wait_for(
    cond: Callable[[], Any],
    timeout: float,
    what: str,
    alive: Optional[Callable[[], None]] = None,
    interval: float = 0.2,
    detail: Optional[Callable[[], str]] = None,
    error: Callable[[str], BaseException] = AssertionError,
) -> Any:
    """Poll ``cond`` every ``interval`` seconds until it returns a true value, and return
    that value. ``alive`` (e.g. a process's assert_alive) runs before each poll and may raise
    early; on timeout ``error(message)`` is raised, the message naming ``what`` and ending
    with ``detail()`` (e.g. a log tail) when given."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if alive is not None:
            alive()
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise error(f"timed out after {timeout:g} s waiting for {what}" + (f"\n{detail()}" if detail else ""))
