"""The landing job's instruments (metrics/landing.py) and its --metrics-port, without Spark.
Recorded by a real landing in tests/e2e/test_landing.py::test_landing_is_incremental_and_idempotent."""

from __future__ import annotations

import socket

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from airflow_provider_dblog.metrics.landing import LATENCY_BUCKETS, LandingMetrics
from tests.support.otel import collected


def test_each_table_batch_counts_its_events_merge_time_and_freshness():
    reader = InMemoryMetricReader()
    m = LandingMetrics(MeterProvider(metric_readers=[reader]))
    m.landed("shop", "s.orders", 100, 2.0, newest_commit=1000.0, now=1004.0)
    m.landed("shop", "s.orders", 5, 0.5, newest_commit=1010.0, now=1040.0)
    m.landed("shop", "s.lines", 7, 0.2, newest_commit=None, now=1041.0)  # dump rows: no commit time
    m.stopped("shop", "s.bad")
    seen = collected(reader)
    orders = (("dblog.source.id", "shop"), ("dblog.table", "s.orders"))
    lines = (("dblog.source.id", "shop"), ("dblog.table", "s.lines"))
    assert seen["dblog.landing.events"][orders].value == 105 and seen["dblog.landing.events"][lines].value == 7
    assert seen["dblog.landing.batches"][orders].value == 2
    latency = seen["dblog.landing.latency"][orders]
    assert latency.count == 2 and latency.sum == 34.0 and tuple(latency.explicit_bounds) == LATENCY_BUCKETS
    assert lines not in seen["dblog.landing.latency"]  # no commit time, no freshness sample
    assert seen["dblog.landing.merge.duration"][lines].count == 1
    assert seen["dblog.landing.commit.newest"][orders].value == 1010.0
    assert seen["dblog.landing.stopped"][(("dblog.source.id", "shop"),)].value == 1


def test_a_taken_metrics_port_stops_the_job_before_spark(capsys, tmp_path):
    from airflow_provider_dblog.spark.land_changelog import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--lake", str(tmp_path), "--metrics-port", str(port), "--metrics-host", "127.0.0.1"]) == 2
    err = capsys.readouterr().err
    assert f"cannot serve the landing job's metrics on 127.0.0.1:{port}" in err and "--metrics-port" in err
