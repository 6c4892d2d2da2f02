"""The capture's metrics (metrics/capture.py) from a status report, read by the
OpenTelemetry SDK's in-memory reader: each instrument reports the report's value under
its documented name and unit, the dumps each under their id, the report's age at collection,
and nothing before the first report (docs/operations.md)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.metrics import CaptureMetrics, start_metrics

STATUS = {
    "source_id": "orders",
    "updated_at": 1000.0,
    "events_total": 1234,
    "buffered": 7,
    "buffered_bytes": 4096,
    "window": "open",
    "lag_seconds": 2.5,
    "lag_bytes": 900,
    "warnings": ["slot WAL at risk"],
    "heartbeats": 3,
    "reconnects": 1,
    "dumps": {"d1": {"rows": 40, "estimated_total": 100, "rows_per_s": 20.0, "eta_seconds": 3.0, "paused": False}},
    "leader": {"identity": "a", "epoch": 4},
    "log": {"retained_bytes": 65536},
    "events_written": 1200,
    "output_commits": 12,
    "output_commit_seconds": 3.5,
    "output_failures": 2,
    "output_commit_pending_seconds": 4.0,
    "output_outage": {"since": 990.0, "seconds": 12.5, "attempts": 2, "error": "down", "gives_up_at": None},
}


def collect(metrics: CaptureMetrics, reader: InMemoryMetricReader) -> dict:
    data = reader.get_metrics_data()
    out = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = (m.unit, [(dict(p.attributes), p.value) for p in m.data.data_points])
    return out


def test_every_instrument_reports_the_status_reports_value():
    reader = InMemoryMetricReader()
    metrics = CaptureMetrics("orders", MeterProvider(metric_readers=[reader]), clock=lambda: 1012.0)
    assert collect(metrics, reader) == {}  # nothing before the first report
    metrics.update(STATUS)
    got = collect(metrics, reader)
    src = {"dblog.source.id": "orders"}
    expected = {
        "dblog.capture.events": ("{event}", 1234),
        "dblog.capture.reconnects": ("{reconnect}", 1),
        "dblog.capture.heartbeats": ("{heartbeat}", 3),
        "dblog.capture.lag": ("s", 2.5),
        "dblog.capture.log.unread": ("By", 900),
        "dblog.capture.log.retained": ("By", 65536),
        "dblog.capture.writer.buffered": ("{event}", 7),
        "dblog.capture.writer.buffered.size": ("By", 4096),
        "dblog.capture.window.open": ("1", 1),
        "dblog.capture.leader.epoch": ("1", 4),
        "dblog.capture.warnings": ("{warning}", 1),
        "dblog.capture.report.age": ("s", 12.0),
        "dblog.capture.output.events": ("{event}", 1200),
        "dblog.capture.output.commits": ("{commit}", 12),
        "dblog.capture.output.commit.time": ("s", 3.5),
        "dblog.capture.output.failures": ("{attempt}", 2),
        "dblog.capture.output.commit.pending": ("s", 4.0),
        "dblog.capture.output.outage": ("s", 12.5),
    }
    for name, (unit, value) in expected.items():
        assert got[name] == (unit, [(src, value)]), name
    dump = {**src, "dblog.dump.id": "d1"}
    assert got["dblog.dump.rows"] == ("{row}", [(dump, 40)])
    assert got["dblog.dump.rows.estimated"] == ("{row}", [(dump, 100)])
    assert got["dblog.dump.eta"] == ("s", [(dump, 3.0)])
    assert got["dblog.dump.paused"] == ("1", [(dump, 0)])
    # the next report replaces the last: a finished dump and an idle window leave
    metrics.update({**STATUS, "dumps": {}, "window": "idle", "lag_bytes": None, "output_outage": None})
    got = collect(metrics, reader)
    assert got["dblog.capture.output.outage"] == ("s", [(src, 0.0)])  # the output accepts writes again
    assert "dblog.dump.rows" not in got or got["dblog.dump.rows"][1] == []
    assert got["dblog.capture.window.open"] == ("1", [(src, 0)])
    assert "dblog.capture.log.unread" not in got or got["dblog.capture.log.unread"][1] == []


def test_no_exporter_asked_for_means_no_metrics(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert start_metrics("orders") is None


def test_a_port_in_use_is_refused_with_the_fix():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError) as e:
            start_metrics("orders", port, "127.0.0.1")
    assert f"127.0.0.1:{port}" in str(e.value) and "--metrics-port" in str(e.value)
