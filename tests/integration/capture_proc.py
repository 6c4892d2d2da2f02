"""Run ``dblog`` as real child processes (capture, dump, verify) the way a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from scripts.polling import wait_for  # noqa: F401 - the tests' one wait_for, imported from here

REPO = Path(__file__).resolve().parents[2]


def dblog_command(config: Path, *args: str, faults: Sequence[str] = ()) -> list[str]:
    """argv of ``dblog --config CONFIG ARGS``; with ``faults`` (options of
    tests/support/faulty_dblog.py, e.g. ``("--window-delay-ms", "30")``) the same command
    through the fault-injecting test entry point."""
    if faults:
        return [sys.executable, "-m", "tests.support.faulty_dblog", *faults, "--", "--config", str(config), *args]
    return [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", str(config), *args]


def child_env() -> dict[str, str]:
    """This environment, with the repository importable (tests.support) from any directory."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def write_config(
    path: Path, source: dict, state_path: Optional[Path], output_url: str, state: Optional[dict] = None
) -> Path:
    """``state``: further [state] keys (e.g. auth_user and auth_password_env; a ZooKeeper
    ``url`` with ``state_path`` None)."""
    lines = ["[source]"]
    for k, v in source.items():
        lines.append(f"{k} = {json.dumps(v)}")
    lines += ["", "[state]"] + ([f"path = {json.dumps(str(state_path))}"] if state_path is not None else [])
    lines += [f"{k} = {json.dumps(v)}" for k, v in (state or {}).items()]
    lines += ["", "[output]", f"url = {json.dumps(output_url)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def dblog(config: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        dblog_command(config, *args), capture_output=True, text=True, timeout=timeout, env=child_env()
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"dblog {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


class Capture:
    """A ``dblog capture`` child process that can be SIGKILLed and restarted; ``faults``:
    options of tests/support/faulty_dblog.py, applied to every start."""

    def __init__(self, config: Path, log_path: Path, *extra: str, faults: Sequence[str] = ()):
        self.config, self.log_path, self.extra, self.faults = config, log_path, extra, tuple(faults)
        self.proc: Optional[subprocess.Popen] = None
        self.kills = 0
        self.starts = 0

    def start(self, *once: str) -> None:
        """Start the capture; ``once``: options for this start only (e.g. --reset-position)."""
        log = open(self.log_path, "a")
        log.write(f"\n=== start {self.starts} at {time.time():.3f} {' '.join(once)}\n")
        log.flush()
        self.proc = subprocess.Popen(
            dblog_command(self.config, "capture", "--status-interval", "1", *self.extra, *once, faults=self.faults),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
        )
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        self.assert_alive()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.kills += 1

    def stop(self, timeout: float = 120) -> int:
        assert self.proc is not None
        self.assert_alive()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def assert_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"capture exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def detail(self) -> str:
        """What a test that gives up on this capture shows: of a running capture its thread
        stacks too (SIGUSR1, cli.py), so the log says where it was waiting; then the tail."""
        if self.proc is not None and self.proc.poll() is None and self.catches(signal.SIGUSR1):
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            return self.tail(180)
        return self.tail()

    def catches(self, sig: int) -> bool:
        """The process has a handler for ``sig`` (its SigCgt mask in /proc): a SIGUSR1 before
        the capture set its handler would end it."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return False
        caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
        return bool(int(caught, 16) >> (sig - 1) & 1)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
