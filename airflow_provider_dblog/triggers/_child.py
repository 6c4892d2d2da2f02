"""What the triggers that supervise a child process share: its lines into the task log, and
a graceful stop (SIGTERM, then SIGKILL after a grace period)."""

from __future__ import annotations

import asyncio
import collections
import signal
from typing import Any, Optional


async def pump_lines(
    stream: Any,  # the child's asyncio.StreamReader
    log: Any,  # the trigger's logger (Airflow's, structlog-backed)
    last: Optional[list[str]] = None,
    tail: Optional[collections.deque] = None,
    error_prefix: str = "dblog: error",
) -> None:
    """Copy the child's lines into the task log (the triggerer routes ``log`` there); keep the
    last line in ``last`` and the last lines in ``tail`` (for a failure message)."""
    while True:
        raw = await stream.readline()
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip()
        if not line:
            continue
        if tail is not None:
            tail.append(line)
        if last is not None:
            last[:] = [line]
        (log.error if line.startswith(error_prefix) else log.info)("%s", line)


async def stop_child(proc: Optional[asyncio.subprocess.Process], log: Any, what: str, grace: float) -> None:
    """SIGTERM (the child stops at a checkpoint), SIGKILL if it is still there after ``grace``."""
    try:
        if proc is None or proc.returncode is not None:
            return
        log.info("stopping %s pid %d", what, proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except asyncio.TimeoutError:
            log.warning("%s pid %d ignored SIGTERM for %.0f s: killing it", what, proc.pid, grace)
            proc.kill()
            await proc.wait()
    except ProcessLookupError:
        pass
