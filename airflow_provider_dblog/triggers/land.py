"""``LandTrigger``: supervises one session of the continuous Spark landing in a child process.

Continuous mode (issue 12): one long-running Structured Streaming query lands the changelog
every ``trigger_seconds`` (a processing-time trigger), so mirrors trail their sources by
seconds instead of a schedule. Like the capture, it runs as a child process (a Spark driver
JVM and its Python side), never in the triggerer's event loop, for a bounded session after
which the operator defers again; a crash or a triggerer restart resumes from the streaming
checkpoint, and replayed micro-batches change nothing (idempotent merges).
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ._child import pump_lines, stop_child

STOP_GRACE_SECONDS = 60.0  # SIGTERM -> SIGKILL: the query stops between micro-batches
STDERR_TAIL = 30


class LandTrigger(BaseTrigger):
    """Run ``land_changelog --continuous`` for one session and report how it ended:
    ``{"status": "session_end", ...}`` or ``{"status": "error", "returncode": n, "message": ...}``."""

    def __init__(
        self,
        lake: str,
        *,
        source: Optional[str] = None,
        mirrors: Optional[str] = None,
        trigger_seconds: float = 5.0,
        session_seconds: float = 3600.0,
        session: int = 1,
        python: Optional[str] = None,
        jars: Optional[str] = None,
        parallel_tables: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.parallel_tables = parallel_tables
        self.lake = lake
        self.source = source
        self.mirrors = mirrors
        self.trigger_seconds = float(trigger_seconds)
        self.session_seconds = float(session_seconds)
        self.session = int(session)
        self.python = python
        self.jars = jars
        self._proc: Optional[asyncio.subprocess.Process] = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_dblog.triggers.land.LandTrigger",
            {
                "lake": self.lake,
                "source": self.source,
                "mirrors": self.mirrors,
                "trigger_seconds": self.trigger_seconds,
                "session_seconds": self.session_seconds,
                "session": self.session,
                "python": self.python,
                "jars": self.jars,
                "parallel_tables": self.parallel_tables,
            },
        )

    def argv(self) -> list[str]:
        args = [self.python or sys.executable, "-m", "airflow_provider_dblog.spark.land_changelog"]
        args += ["--lake", self.lake, "--continuous", "--trigger-seconds", str(self.trigger_seconds)]
        args += ["--max-seconds", str(self.session_seconds), "--exit-with-parent"]
        if self.source:
            args += ["--source", self.source]
        if self.mirrors:
            args += ["--mirrors", self.mirrors]
        if self.parallel_tables is not None:
            args += ["--parallel-tables", str(self.parallel_tables)]
        return args

    def environ(self) -> dict[str, str]:
        """The child's environment: the triggerer's, and the jars when the DAG resolved them
        (else the child's ``get_session`` resolves them from this same environment)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.jars:
            env["DBLOG_SPARK_JARS"] = self.jars
        return env

    async def run(self) -> AsyncIterator[TriggerEvent]:
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        last: list[str] = []
        self._proc = proc = await asyncio.create_subprocess_exec(
            *self.argv(),
            stdin=asyncio.subprocess.PIPE,  # never written to: its end stops the child (parent_pipe.py)
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.environ(),
            start_new_session=True,  # a Ctrl-C aimed at the triggerer does not skip our SIGTERM
        )
        self.log.info("continuous landing session %d: pid %d for %.0f s", self.session, proc.pid, self.session_seconds)
        await asyncio.gather(
            pump_lines(proc.stdout, self.log, last=last, tail=tail),
            pump_lines(proc.stderr, self.log, tail=tail, error_prefix="error:"),
        )
        rc = await proc.wait()
        if rc == 0:
            yield TriggerEvent({"status": "session_end", "session": self.session, "last": last[-1] if last else None})
        else:
            message = "\n".join(tail) or f"the landing process exited with code {rc}"
            yield TriggerEvent({"status": "error", "session": self.session, "returncode": rc, "message": message})

    async def cleanup(self) -> None:
        proc, self._proc = self._proc, None
        await stop_child(proc, self.log, "continuous landing", STOP_GRACE_SECONDS)
