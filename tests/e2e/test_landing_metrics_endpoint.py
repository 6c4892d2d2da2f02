"""The landing job's Prometheus endpoint (docs/operations.md, "The landing job's metrics"),
scraped from a real ``land_changelog --continuous --metrics-port`` child process while it
lands two rounds of changelog commits: after each round, the events of each table equal what
was written, one mirror commit per table and round is counted (and one latency sample), the
newest source commit of each mirror is its newest event's, and the landing's series carry
only the source id and the table as labels. The in-process instruments are checked by
tests/e2e/test_landing.py and tests/unit/test_landing_metrics.py; this is the exporter, in
the driver process Spark runs in.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from scripts.polling import wait_for  # noqa: E402
from tests.e2e.test_landing import REPO, Changelog, spark_jars  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """Every sample by name, ``{}`` while the endpoint does not answer yet."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def by_table(samples: dict, name: str, source_id: str) -> dict[str, float]:
    """``name``'s value per table of ``source_id``."""
    found: dict[str, float] = {}
    for labels, v in samples.get(name, []):
        if labels.get("dblog_source_id") == source_id:
            assert labels["dblog_table"] not in found, (name, samples[name])
            found[labels["dblog_table"]] = v
    return found


class Landing:
    """``python -m airflow_provider_dblog.spark.land_changelog ... --continuous`` as a child
    (its own process group: the driver and its JVM); its output in ``log_path``."""

    def __init__(self, args: list[str], log_path: Path):
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": str(REPO), "DBLOG_SPARK_JARS": spark_jars()}
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "airflow_provider_dblog.spark.land_changelog", *args],
                stdin=subprocess.PIPE,  # --exit-with-parent: the job ends with this test process
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def assert_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the landing exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM: the landing stops between micro-batches and prints its stats."""
        self.assert_alive()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc.stdin.close()


@pytest.mark.soak  # 46 s on a 2-core machine; the landing's metrics themselves: tests/unit (README, "make soak")
def test_a_running_landing_serves_its_metrics_for_prometheus(tmp_path):
    src = "lmx_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)  # the capture's changelog (and schema store) under the lake
    a = log.schema("s.a", [("id", "integer"), ("v", "text")])
    b = log.schema("s.b", [("id", "bigint"), ("n", "numeric(10,2)")])
    port = free_port()
    landing = Landing(
        [
            "--lake",
            str(tmp_path),
            "--source",
            src,
            "--continuous",
            "--trigger-seconds",
            "1",
            "--max-seconds",
            "600",  # a bound in case nothing else stops it
            "--exit-with-parent",
            "--metrics-port",
            str(port),
            "--metrics-host",
            "127.0.0.1",
        ],
        tmp_path / "landing.log",
    )
    try:
        # The endpoint is served before Spark starts (the process's own collectors), without
        # landing series until a batch is landed.
        wait_for(
            lambda: "process_cpu_seconds_total" in scrape(port),
            60,
            "the endpoint",
            landing.assert_alive,
            detail=landing.tail,
        )
        assert not by_table(scrape(port), "dblog_landing_events_total", src)

        rounds = [
            # round 1: inserts in both tables (one changelog commit)
            [log.ev(a, "c", {"id": i, "v": f"a{i}"}) for i in range(12)]
            + [log.ev(b, "c", {"id": i, "n": f"{i}.50"}) for i in range(5)],
            # round 2: updates and deletes (another commit), landed by the same running query
            [log.ev(a, "u", {"id": 1, "v": "b1"}), log.ev(a, "d", key=[2]), log.ev(a, "u", {"id": 3, "v": "b3"})]
            + [log.ev(b, "u", {"id": i, "n": "9.99"}) for i in range(4)]
            + [log.ev(b, "d", key=[4]), log.ev(b, "c", {"id": 7, "n": "7.00"}), log.ev(b, "c", {"id": 8, "n": None})],
        ]
        for n, events in enumerate(rounds, 1):
            log.append(*events)
            expected = {t: sum(e.table == t for e in log.events) for t in ("s.a", "s.b")}
            wait_for(
                lambda expected=expected: by_table(scrape(port), "dblog_landing_events_total", src) == expected,
                120,
                f"round {n}'s events on the endpoint ({expected})",
                landing.assert_alive,
                interval=0.5,
                detail=lambda: f"{by_table(scrape(port), 'dblog_landing_events_total', src)}\n{landing.tail()}",
            )
            samples = scrape(port)
            # one mirror commit per table and round: each round is one changelog commit, one micro-batch
            assert by_table(samples, "dblog_landing_batches_total", src) == {"s.a": n, "s.b": n}
            assert by_table(samples, "dblog_landing_merge_duration_seconds_count", src) == {"s.a": n, "s.b": n}
            # log events carry their source commit time: one freshness sample per batch, and the
            # newest commit of each mirror (``time() - it``: how stale the mirror is)
            assert by_table(samples, "dblog_landing_latency_seconds_count", src) == {"s.a": n, "s.b": n}
            newest = by_table(samples, "dblog_landing_commit_newest_seconds", src)
            for t in ("s.a", "s.b"):
                assert newest[t] == pytest.approx(max(e.commit_ts for e in log.events if e.table == t) / 1e6, abs=1e-6)
            assert not samples.get("dblog_landing_stopped")  # no mirror stopped

        # The landing's series carry the source id and the table, nothing of the lake's path.
        landing_labels = {
            k
            for name, found in samples.items()
            if name.startswith("dblog_landing_")
            for labels, _ in found
            for k in labels
        }
        scope = {"otel_scope_name", "otel_scope_schema_url", "otel_scope_version"}
        assert landing_labels - scope - {"le"} == {"dblog_source_id", "dblog_table"}, landing_labels
        values = [v for found in samples.values() for labels, _ in found for v in labels.values()]
        assert not [v for v in values if str(tmp_path) in v]

        assert landing.stop() == 0, landing.tail()
        assert f'"events": {len(log.events)}' in landing.tail(), landing.tail()
    finally:
        landing.close()
