"""Run the capture in this process (a thread, as tests/integration/test_engine.py does) or as
``python -m airflow_provider_dblog.cli capture`` in a child process whose memory is sampled.

Completion is measured the same way for both: the generated load ends with one *sentinel*
row in a transaction of its own. The in-process run learns the sentinel's position from the
output's write calls; a capture is done when the source's stored checkpoint (written only
after the output made everything up to it durable, invariant 5) reaches that position.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus
from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.state.local import LocalStateStore
from scripts import polling

from .common import raise_if_exited, terminate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTINEL_KEY = 10**12


def _bench_timeout(message: str) -> TimeoutError:
    return TimeoutError(f"bench: {message}")


# scripts/polling.py's wait_for, polling faster and raising TimeoutError (a primer catches it);
# the fourth positional argument is a check run before each poll (e.g. a capture's check()).
wait_for = functools.partial(polling.wait_for, interval=0.02, error=_bench_timeout)


class SentinelWatch:
    """Wraps an output; remembers the position of the sentinel row once it is written."""

    def __init__(self, output, table: str):
        self._output, self._table = output, table
        self.position: Optional[Position] = None

    def write(self, events, epoch=None):
        self._output.write(events, epoch=epoch)
        if events:  # the sentinel is the last change of the load, so the last of its batch
            last = events[-1]
            if last.table == self._table and last.key == (SENTINEL_KEY,):
                self.position = last.position

    def __getattr__(self, name):
        return getattr(self._output, name)


class Capture:
    """What both runners share: the state store, dumps and waiting for a checkpoint."""

    def __init__(self, db, source_id: str, workdir: str):
        self.db, self.source_id = db, source_id
        self.dir = os.path.join(workdir, source_id)
        os.makedirs(self.dir, exist_ok=True)
        self.lake = f"delta://{os.path.join(self.dir, 'lake')}"
        self.state_path = os.path.join(self.dir, "state.db")
        self.state = LocalStateStore(self.state_path)

    def check(self) -> None:  # raise if the capture died
        raise NotImplementedError

    def checkpoint(self) -> Optional[Position]:
        return self.state.get_checkpoint(self.source_id)

    def prime(self, first_key: int) -> int:
        """Make the source's slot and checkpoint exist: write primer rows until one is
        checkpointed (a row written before the capture reached the log end is not seen).
        Returns the next unused primer key."""
        key = first_key
        end = time.monotonic() + 90
        while self.checkpoint() is None:
            if time.monotonic() > end:
                why = self.db.blockers() if hasattr(self.db, "blockers") else ""
                raise TimeoutError(
                    f"bench: no checkpoint for {self.source_id} after 90 s"
                    + (f"; creating the replication slot waits for: {why}" if why else "")
                )
            self.db.insert_primer(key)
            key -= 1
            try:
                wait_for(lambda: self.checkpoint() is not None, 2.0, "primer", self.check)
            except TimeoutError:
                pass
        return key

    def wait_checkpoint(self, target: Position, timeout: float) -> float:
        wait_for(
            lambda: (cp := self.checkpoint()) is not None and cp >= target,
            timeout,
            f"checkpoint {target} of {self.source_id}",
            self.check,
        )
        return time.perf_counter()

    def dump(
        self, table: str, chunk_size: int, timeout: float, on_tick: Callable[[], None] = lambda: None, readers: int = 1
    ) -> dict:
        """Request a dump, time it to DONE; also the rate between the first and last chunk."""
        spec = DumpSpec.new(self.source_id, [table], None)
        t0 = time.perf_counter()
        self.state.add_dump(spec, DumpControl(chunk_size=chunk_size, readers=readers))
        first: Optional[tuple[float, int]] = None
        last: tuple[float, int] = (t0, 0)
        end = time.monotonic() + timeout
        while True:
            self.check()
            on_tick()
            d = self.state.get_dump(spec.dump_id)
            now = time.perf_counter()
            rows = sum(p.rows for p in d.progress.values())
            chunks = sum(p.chunks for p in d.progress.values())
            if rows and first is None:
                first = (now, rows)
            if rows != last[1]:
                last = (now, rows)
            if d.status is DumpStatus.DONE:
                break
            if d.status.finished:
                raise RuntimeError(f"bench: dump {spec.dump_id} ended {d.status.value}: {d.error}")
            if time.monotonic() > end:
                raise TimeoutError(f"bench: dump of {table} not done after {timeout:.0f} s")
            time.sleep(0.02)
        seconds = now - t0
        out = {
            "chunk_size": chunk_size,
            "readers": readers,
            "rows": rows,
            "chunks": chunks,
            "seconds": round(seconds, 3),
            "rows_per_s": rows / seconds,
        }
        if first is not None and last[0] > first[0]:
            out["chunk_phase_rows_per_s"] = (last[1] - first[1]) / (last[0] - first[0])
            out["first_chunk_after_s"] = round(first[0] - t0, 3)
        return out


class InProcessCapture(Capture):
    def __init__(self, db, source_id: str, workdir: str, config: Optional[EngineConfig] = None):
        super().__init__(db, source_id, workdir)
        self.config = config or EngineConfig()
        self.error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None
        self.watch: Optional[SentinelWatch] = None
        self.on_progress: Optional[Callable[[dict], None]] = None  # the engine's, e.g. a metrics update
        self.on_commit: Optional[Callable[[float, int], None]] = None  # each output commit (a metrics histogram)

    def wrap_source(self, source):
        """Hook for scenarios that observe the source (e.g. when rows were polled)."""
        return source

    def wrap_output(self, output) -> SentinelWatch:
        """Hook for scenarios that observe the output (capture_until_sentinel needs a SentinelWatch)."""
        return SentinelWatch(output, self.db.event_table)

    def start(self) -> "InProcessCapture":
        source = self.wrap_source(make_source(self.db.source_config(self.source_id)))
        self.watch = self.wrap_output(make_output(self.lake))
        self.engine = Engine(source, self.watch, self.state, self.config, self.on_progress, on_commit=self.on_commit)
        self.stop_event = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, name="dblog-engine", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.engine.run(self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - surfaced by check()
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"bench: the capture of {self.source_id} failed: {self.error}") from self.error
        if self.thread is not None and not self.thread.is_alive() and not self.stop_event.is_set():
            raise RuntimeError(f"bench: the capture of {self.source_id} stopped by itself")

    def stop(self, timeout: float = 120) -> None:
        if self.thread is None:
            return
        self.stop_event.set()
        self.thread.join(timeout)
        self.thread = None
        if self.error is not None:
            raise RuntimeError(f"bench: the capture of {self.source_id} failed: {self.error}") from self.error

    def capture_until_sentinel(self, n_events: int, timeout: float) -> dict:
        """Start, time until the sentinel's checkpoint is stored; the engine keeps running."""
        t0 = time.perf_counter()
        self.start()
        opened: list[float] = []

        def check() -> None:
            self.check()
            if not opened and self.engine.writer is not None:  # source and output are open
                opened.append(time.perf_counter())

        wait_for(lambda: self.watch.position is not None, timeout, f"the sentinel row in {self.source_id}", check)
        t1 = self.wait_checkpoint(self.watch.position, timeout)
        seconds = t1 - t0
        out = {
            "events": n_events,
            "seconds": round(seconds, 3),
            "events_per_s": n_events / seconds,
            "sentinel_position": self.watch.position.encode(),
        }
        if opened:
            out["startup_s"] = round(opened[0] - t0, 3)
            out["events_per_s_after_startup"] = n_events / (t1 - opened[0])
        return out


class ChildCapture(Capture):
    """``dblog capture`` as a child process; samples its RSS every 20 ms per phase."""

    def __init__(self, db, source_id: str, workdir: str, python: str = sys.executable):
        super().__init__(db, source_id, workdir)
        self.python = python
        self.config_path = os.path.join(self.dir, "dblog.toml")
        self.log_path = os.path.join(self.dir, "capture.log")
        self._write_config()
        self.proc: Optional[subprocess.Popen] = None
        self.phase_peak: dict[str, float] = {}
        self._phase = "start"
        self._sampler: Optional[threading.Thread] = None

    def _write_config(self) -> None:
        cfg = self.db.source_config(self.source_id)
        lines = ["[source]"]
        for k, v in cfg.items():
            lines.append(f"{k} = {json.dumps(v)}")  # JSON strings/lists/ints are valid TOML here
        lines += [
            "",
            "[state]",
            f"path = {json.dumps(self.state_path)}",
            "",
            "[output]",
            f"url = {json.dumps(self.lake)}",
            "",
        ]
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))

    def start(self) -> "ChildCapture":
        cmd = [self.python, "-m", "airflow_provider_dblog.cli", "--config", self.config_path, "capture"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def set_phase(self, phase: str) -> None:
        self._phase = phase

    def _sample(self) -> None:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            while self.proc.poll() is None:
                rss = p.memory_info().rss / 2**20
                ph = self._phase
                self.phase_peak[ph] = max(self.phase_peak.get(ph, 0.0), rss)
                time.sleep(0.02)
        except psutil.Error:
            pass

    def rss_mb(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB from /proc: HWM is the kernel's exact peak, not sampled."""
        vals = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    vals[line.split(":")[0]] = int(line.split()[1]) / 1024
        return vals["VmRSS"], vals["VmHWM"]

    def check(self) -> None:
        raise_if_exited(self.proc, self.log_path, f"capture process of {self.source_id}")

    def stop(self, timeout: float = 120) -> None:
        if self.proc is None:
            return
        terminate(self.proc, timeout)
        self._sampler.join(5)
        self._log.close()
        self.proc = None
