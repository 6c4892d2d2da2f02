"""``CaptureTrigger``: supervises one bounded capture session in a child process.

The engine decodes the log (CPU-heavy) and blocks on sockets, so it runs as
``python -m airflow_provider_dblog.cli capture`` — never in the triggerer's event loop or one
of its threads, where the GIL would starve every other trigger (DESIGN, "Airflow runtime
model"). The trigger only reads the child's lines. After ``session_seconds`` the child exits 0
and the trigger yields an event: the operator defers again, so one task stays alive for days
and a triggerer restart costs at most one session (the child resumes from the checkpoint).

Secrets: the config file (private, mode 0600, deleted when the child exits) holds no password;
the child gets it in its environment under ``password_env``; it is never in argv or the trigger
kwargs (which Airflow stores in its database).
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..config import write_private_config
from ..hooks.connections import DBLogConnections
from ..hooks.dblog import PASSWORD_ENV, DBLogHook
from ._child import pump_lines, stop_child

STOP_GRACE_SECONDS = 30.0  # SIGTERM -> SIGKILL: the engine flushes its writer and checkpoints
STDERR_TAIL = 20  # lines of the child's stderr kept for the failure message


class CaptureTrigger(BaseTrigger):
    """Run ``dblog capture`` for one session and report how it ended.

    Events: ``{"status": "session_end", ...}`` after a clean exit (defer again), or
    ``{"status": "error", "returncode": n, "message": <last stderr lines>}``.
    """

    def __init__(
        self,
        source_conn_id: str,
        *,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        output: Optional[str] = None,
        output_conn_id: Optional[str] = None,
        source_id: Optional[str] = None,
        session_seconds: float = 3600.0,
        status_interval: float = 30.0,
        session: int = 1,
        python: Optional[str] = None,
        redump_on_position_lost: bool = False,
        metrics_port: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.connections = DBLogConnections(source_conn_id, state_conn_id, state, output, output_conn_id, source_id)
        self.session_seconds = float(session_seconds)
        self.status_interval = float(status_interval)
        self.session = int(session)
        self.python = python
        self.redump_on_position_lost = bool(redump_on_position_lost)
        self.metrics_port = None if metrics_port is None else int(metrics_port)
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._config_path: Optional[str] = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_provider_dblog.triggers.capture.CaptureTrigger",
            {
                **self.connections.kwargs(),
                "session_seconds": self.session_seconds,
                "status_interval": self.status_interval,
                "session": self.session,
                "python": self.python,
                "redump_on_position_lost": self.redump_on_position_lost,
                "metrics_port": self.metrics_port,
            },
        )

    def hook(self) -> DBLogHook:
        return self.connections.hook()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        await hook.aprefetch_connections()
        config = hook.engine_config()  # no I/O left: the connections are cached
        env = dict(os.environ)
        env[PASSWORD_ENV] = hook.source_password() or ""
        env.update(hook.output_env())  # e.g. a Kafka connection's client settings
        env["PYTHONUNBUFFERED"] = "1"
        stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._config_path = write_private_config(config)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.python or sys.executable,
                "-m",
                "airflow_provider_dblog.cli",
                "--config",
                self._config_path,
                "capture",
                "--max-seconds",
                str(self.session_seconds),
                "--status-interval",
                str(self.status_interval),
                *(["--redump-on-position-lost"] if self.redump_on_position_lost else []),
                # the Prometheus endpoint (docs/operations.md); OTLP follows the environment
                *(["--metrics-port", str(self.metrics_port)] if self.metrics_port is not None else []),
                "--exit-with-parent",
                # never written to: its end, when this process dies however it dies, stops the
                # child (parent_pipe.py), so no orphan keeps the lease or the slot
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                # own process group: a Ctrl-C aimed at the triggerer does not skip our SIGTERM path
                start_new_session=True,
            )
            self.log.info(
                "capture session %d of source %s: pid %d for %.0f s",
                self.session,
                config["source"]["id"],
                self._proc.pid,
                self.session_seconds,
            )
            last_status: list[str] = []
            # stderr: the engine's logging, and its error on failure
            await asyncio.gather(
                pump_lines(self._proc.stdout, self.log, last=last_status),
                pump_lines(self._proc.stderr, self.log, tail=stderr_tail),
            )
            rc = await self._proc.wait()
        finally:
            self._remove_config()
        if rc == 0:
            yield TriggerEvent(
                {
                    "status": "session_end",
                    "session": self.session,
                    "source_id": config["source"]["id"],
                    "last_status": last_status[-1] if last_status else None,
                }
            )
        else:
            message = "\n".join(stderr_tail) or f"the capture process exited with code {rc}"
            yield TriggerEvent({"status": "error", "session": self.session, "returncode": rc, "message": message})

    def _remove_config(self) -> None:
        if self._config_path:
            try:
                os.unlink(self._config_path)
            except FileNotFoundError:
                pass
            self._config_path = None

    async def cleanup(self) -> None:
        """Stop the child: SIGTERM (the engine stops at a checkpoint), SIGKILL after a grace."""
        proc, self._proc = self._proc, None
        try:
            await stop_child(proc, self.log, "capture", STOP_GRACE_SECONDS)
        finally:
            self._remove_config()
