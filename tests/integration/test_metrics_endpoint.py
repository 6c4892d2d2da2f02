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
  which decodes the requests with the OpenTelemetry protobufs.
"""

from __future__ import annotations

import http.server
import random
import socket
import threading
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
