"""The capture's Prometheus endpoint (docs/operations.md), scraped from a real ``dblog
capture --metrics-port`` on PostgreSQL while it captures writes and runs a dump:

* the events counter moves with the writes, the dump's rows appear under its id while it
  runs, and the process's own memory and CPU are there (prometheus_client's collectors);
* a capture whose loop is stuck (its dump's chunk read waits behind a lock the test holds on
  the table) still answers, with ``dblog_capture_report_age_seconds`` growing past three
  status intervals, and back under one after the lock is released; the writes made meanwhile
  are then counted;
* its labels carry ids only, no connection setting;
* the same capture exports by OTLP (the standard environment) to a receiver in the test,
  which decodes the requests with the OpenTelemetry protobufs;
* under a steady insert load, a capture paused with SIGSTOP (its whole process: the endpoint
  answers nothing meanwhile) shows after SIGCONT a lag in seconds of a good part of the pause
  and log unread far above the steady level, both back down once it has caught up, and its
  events counter reaches the rows written.
"""

from __future__ import annotations

import http.server
import random
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS

pytestmark = pytest.mark.integration


class OTLPReceiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP metrics endpoint: keeps each request's (metric name, source id, value)."""

    def __init__(self):
        self.points: list[tuple[str, str, float]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportMetricsServiceRequest.FromString(body)
                for rm in request.resource_metrics:
                    for sm in rm.scope_metrics:
                        for m in sm.metrics:
                            kind = m.WhichOneof("data")
                            for p in getattr(m, kind).data_points:
                                attrs = {a.key: a.value.string_value for a in p.attributes}
                                if kind == "histogram":  # its count: one per commit
                                    v = p.count
                                else:
                                    v = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                                receiver.points.append((m.name, attrs.get("dblog.source.id", ""), v))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def latest(self, name: str, source_id: str) -> float:
        found = [v for n, s, v in self.points if n == name and s == source_id]
        return found[-1] if found else 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> tuple[str, dict[str, list]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return text, samples


def reported(port: int) -> bool:
    """The endpoint is up (the child has started it) and holds a first report."""
    try:
        return "dblog_capture_events_total" in scrape(port)[1]
    except urllib.error.URLError:  # not listening yet
        return False


def value(samples: dict, name: str, **labels) -> float:
    """The one sample of ``name`` with ``labels``; 0 while there is none (not reported yet)."""
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) <= 1, (name, labels, samples.get(name))
    return found[0] if found else 0.0


def test_the_metrics_endpoint_follows_the_capture_and_shows_a_stuck_loop(tmp_path, monkeypatch):
    receiver = OTLPReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{receiver.server_port}/v1/metrics")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
    db = ADAPTERS["postgres"]()
    db.create()
    source_id = f"metrics_{uuid.uuid4().hex[:6]}"
    capture = None
    try:
        db.seed(random.Random(5), 200)
        config = write_config(
            tmp_path / "dblog.toml", db.source_config(source_id), tmp_path / "state.db", f"delta://{tmp_path / 'lake'}"
        )
        port = free_port()
        capture = Capture(config, tmp_path / "capture.log", "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
        capture.start()  # --status-interval 1
        src = source_id
        wait_for(
            lambda: reported(port),
            90,
            "the first report",
            capture.assert_alive,
            detail=capture.detail,
        )
        _, first = scrape(port)
        assert value(first, "dblog_capture_leader_epoch", dblog_source_id=src) == 1
        assert value(first, "process_resident_memory_bytes") > 50 * 2**20
        events0 = value(first, "dblog_capture_events_total", dblog_source_id=src)

        c = db.connect()
        for i in range(1000, 1030):
            c.cursor().execute(f"UPDATE {db.ns}.accounts SET note = %s WHERE id = %s", (f"m{i}", i - 999))
            c.commit()
        written0 = value(first, "dblog_capture_output_events_total", dblog_source_id=src)
        # read, and written: the output's counters under their documented names
        for name, at_least in (
            ("dblog_capture_events_total", events0),
            ("dblog_capture_output_events_total", written0),
        ):
            wait_for(
                lambda name=name, at_least=at_least: value(scrape(port)[1], name, dblog_source_id=src) >= at_least + 30,
                60,
                f"the 30 updates to be counted in {name}",
                capture.assert_alive,
                detail=capture.detail,
            )
        after = scrape(port)[1]
        assert value(after, "dblog_capture_output_commits_total", dblog_source_id=src) >= 1
        assert value(after, "dblog_capture_output_commit_time_seconds_total", dblog_source_id=src) > 0
        # each commit in the histogram as it happens (the counter above lags a report behind)
        commits = value(after, "dblog_capture_output_commit_duration_seconds_count", dblog_source_id=src)
        assert commits >= value(after, "dblog_capture_output_commits_total", dblog_source_id=src) >= 1
        assert value(after, "dblog_capture_output_commit_duration_seconds_bucket", dblog_source_id=src, le="30.0") == (
            commits
        )
        assert value(after, "dblog_capture_output_failures_total", dblog_source_id=src) == 0
        assert value(after, "dblog_capture_output_outage_seconds", dblog_source_id=src) == 0

        # A dump, then its table locked: the chunk read waits, the capture's loop with it.
        dump_id = dblog(
            config, "dump", "--table", f"{db.ns}.accounts", "--chunk-size", "10", "--delay-ms", "200"
        ).stdout.strip()
        wait_for(
            lambda: value(scrape(port)[1], "dblog_dump_rows", dblog_source_id=src, dblog_dump_id=dump_id) > 0,
            60,
            "the dump's rows on the endpoint",
            capture.assert_alive,
            detail=capture.detail,
        )
        lock = db.connect()
        lock.cursor().execute(f"LOCK TABLE {db.ns}.accounts IN ACCESS EXCLUSIVE MODE")
        try:
            wait_for(
                lambda: value(scrape(port)[1], "dblog_capture_report_age_seconds", dblog_source_id=src) > 3,
                60,
                "the report age of the stuck capture to grow",
                capture.assert_alive,
                detail=capture.detail,
            )
            stuck_events = value(scrape(port)[1], "dblog_capture_events_total", dblog_source_id=src)
            for i in range(1, 21):  # writes the stuck capture cannot count yet
                c.cursor().execute(f"UPDATE {db.ns}.orders SET status = %s WHERE order_no = %s", (f"s{i}", i))
                c.commit()
        finally:
            lock.rollback()
            lock.close()
        wait_for(
            lambda: value(scrape(port)[1], "dblog_capture_report_age_seconds", dblog_source_id=src) < 1.5,
            60,
            "the capture to report again",
            capture.assert_alive,
            detail=capture.detail,
        )
        wait_for(
            lambda: value(scrape(port)[1], "dblog_capture_events_total", dblog_source_id=src) >= stuck_events + 20,
            60,
            "the writes made while stuck to be counted",
            capture.assert_alive,
            detail=capture.detail,
        )
        state = LocalStateStore(str(tmp_path / "state.db"))
        wait_for(lambda: state.get_dump(dump_id).status is DumpStatus.DONE, 120, "the dump", capture.assert_alive)
        wait_for(
            lambda: (
                "dblog_dump_rows" not in scrape(port)[1]
                or not any(lab.get("dblog_dump_id") == dump_id for lab, _ in scrape(port)[1]["dblog_dump_rows"])
            ),
            30,
            "the finished dump to leave the endpoint",
            capture.assert_alive,
        )
        # OTLP: the same counter, received by the test's collector, and the commit histogram.
        wait_for(
            lambda: receiver.latest("dblog.capture.events", src) >= stuck_events + 20,
            30,
            "the OTLP export of the events counter",
            capture.assert_alive,
            detail=capture.detail,
        )
        assert receiver.latest("dblog.capture.output.commit.duration", src) >= 1
        # Labels name the source, the dump and the exporter, never a connection setting.
        labels = {k for samples in scrape(port)[1].values() for lab, _ in samples for k in lab}
        allowed = {"dblog_source_id", "dblog_dump_id", "service_name", "service_instance_id"}
        allowed |= {"otel_scope_name", "otel_scope_schema_url", "otel_scope_version"}
        allowed |= {"telemetry_sdk_language", "telemetry_sdk_name", "telemetry_sdk_version", "generation"}
        allowed |= {"implementation", "major", "minor", "patchlevel", "version"}  # python_info
        allowed |= {"le"}  # a histogram's bucket bound
        assert labels <= allowed, labels - allowed
        c.close()
        assert capture.stop() == 0, capture.tail()
    finally:
        if capture is not None:
            capture.close()
        receiver.shutdown()
        db.drop(source_id)


class InsertLoad(threading.Thread):
    """A steady write load: rows inserted into ``accounts`` in transactions of ``batch`` rows,
    ``rate`` rows per second, until ``stop``; ``written`` counts the rows committed."""

    def __init__(self, db, rate: int, batch: int = 100, first_id: int = 10**6):
        super().__init__(daemon=True)
        self.db, self.rate, self.batch, self.next_id = db, rate, batch, first_id
        self.written = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            c = self.db.connect()
            try:
                t0 = time.monotonic()
                while not self._halt.is_set():
                    c.cursor().execute(
                        f"INSERT INTO {self.db.ns}.accounts (id, name) "
                        "SELECT g, 'load ' || g FROM generate_series(%s, %s) g",
                        (self.next_id, self.next_id + self.batch - 1),
                    )
                    c.commit()
                    self.next_id += self.batch
                    self.written += self.batch
                    self._halt.wait(self.written / self.rate - (time.monotonic() - t0))  # keep the pace
            finally:
                c.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def assert_running(self) -> None:
        assert self.is_alive() and self.error is None, f"the insert load stopped: {self.error!r}"

    def stop(self) -> int:
        self._halt.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error
        return self.written


PAUSE_S = 10.0  # the capture's SIGSTOP: at least this long, ...
PAUSE_ROWS = 20_000  # ... and until the load wrote this many rows: several of the engine's polls (5,000 items)
LOAD_RATE = 2_000  # rows/s
KiB = 1024


def lag_now(port: int, src: str) -> dict[str, float]:
    """The lag, the unread log, the report's age and the events counters, from one scrape."""
    s = scrape(port)[1]
    return {
        name: value(s, f"dblog_capture_{metric}", dblog_source_id=src)
        for name, metric in (
            ("lag", "lag_seconds"),
            ("unread", "log_unread_bytes"),
            ("age", "report_age_seconds"),
            ("events", "events_total"),
            ("written", "output_events_total"),
        )
    }


def test_lag_rises_while_the_capture_is_stopped_and_falls_once_it_caught_up(tmp_path):
    """SIGSTOP stops the whole capture, its endpoint too: nothing can be scraped during the
    pause. What shows it is the first report made after SIGCONT (the engine reports at once,
    after one poll of the log): the log written during the pause is more than one poll, so
    that report's newest processed commit is from early in the pause (lag: most of the pause)
    and most of the backlog is still unread; the reports after it, once the capture caught
    up, show both near their steady level again. Only reports made after the resume count
    (their age at the scrape is below the time since SIGCONT): the scrapes right after it
    still read the report from before the pause."""
    db = ADAPTERS["postgres"]()
    db.create()
    source_id = f"lag_{uuid.uuid4().hex[:6]}"
    src = source_id
    capture = load = None
    try:
        db.seed(random.Random(7), 10)
        config = write_config(
            tmp_path / "dblog.toml", db.source_config(source_id), tmp_path / "state.db", f"delta://{tmp_path / 'lake'}"
        )
        port = free_port()
        # A report every 2 s: the one report made right after the resume stays on the endpoint that long.
        extra = ("--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--status-interval", "2")
        capture = Capture(config, tmp_path / "capture.log", *extra)
        capture.start()
        wait_for(lambda: reported(port), 90, "the first report", capture.assert_alive, detail=capture.detail)
        start = lag_now(port, src)

        load = InsertLoad(db, LOAD_RATE)
        load.start()
        wait_for(
            lambda: lag_now(port, src)["events"] >= start["events"] + LOAD_RATE,
            60,
            "the capture to count the load",
            capture.assert_alive,
            detail=capture.detail,
        )
        steady = []  # the steady level under the load, over two reports
        end = time.monotonic() + 4
        while time.monotonic() < end:
            steady.append(lag_now(port, src))
            time.sleep(0.2)
        steady_lag = max(m["lag"] for m in steady)
        steady_unread = max(m["unread"] for m in steady)
        assert steady_lag < 1.0, ("the capture does not keep up with the load", steady)

        capture.proc.send_signal(signal.SIGSTOP)
        paused_at, rows_at_pause = time.monotonic(), load.written
        try:
            with pytest.raises(OSError):  # a timeout: the stopped process answers nothing
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1)
            wait_for(
                lambda: time.monotonic() - paused_at >= PAUSE_S and load.written - rows_at_pause >= PAUSE_ROWS,
                30,
                f"the load to write {PAUSE_ROWS} rows during the pause",
                load.assert_running,
            )
        finally:
            capture.proc.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        pause = resumed - paused_at

        after: list[dict] = []  # scrapes of reports made after the resume

        def caught_up() -> bool:
            m = lag_now(port, src)
            if m["age"] >= time.monotonic() - resumed:
                return False  # still the report from before the pause
            after.append(m)
            return m["lag"] < 1.0 and m["unread"] < max(4 * steady_unread, 256 * KiB)  # caught up

        wait_for(caught_up, 60, "the lag to fall again", capture.assert_alive, detail=capture.detail, interval=0.1)
        peak_lag = max(m["lag"] for m in after)
        peak_unread = max(m["unread"] for m in after)
        # The newest commit processed at the first report is from early in the pause (about
        # 0.75 of it here), and most of what was written during the pause is still unread
        # (about 2 MiB, 20 times the steady level at least).
        assert peak_lag >= 0.4 * pause, (f"lag after a {pause:.1f} s pause", after)
        assert peak_unread >= max(10 * steady_unread, 512 * KiB), (
            f"unread log after the pause, steady {steady_unread}",
            after,
        )

        written = load.stop()
        load = None
        wait_for(
            lambda: lag_now(port, src)["written"] >= start["written"] + written,
            60,
            f"the {written} rows written to be captured",
            capture.assert_alive,
            detail=capture.detail,
        )
        final = lag_now(port, src)
        # each row once: read, and committed to the output
        assert final["events"] == start["events"] + written
        assert final["written"] == start["written"] + written
        assert capture.stop() == 0, capture.tail()
    finally:
        if load is not None:
            load.stop()
        if capture is not None:
            capture.close()
        db.drop(source_id)
