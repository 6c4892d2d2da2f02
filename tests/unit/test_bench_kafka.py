"""bench/kafka.py's pure helpers: record sizes and the perf test's payload, keys, the perf test's
summary line, transaction pacing, per-record latencies and percentiles."""

import pytest

from bench import kafka

HEADERS = [("dblog.key", b"[42]"), ("dblog.op", b"c"), ("dblog.epoch", None)]


def test_record_bytes_counts_key_value_and_headers():
    assert kafka.record_bytes(b"[42]", b'{"a":1}', HEADERS) == 4 + 7 + (9 + 4) + (8 + 1) + 11
    assert kafka.record_bytes(None, None, None) == 0


def test_flat_payload_has_the_record_size_and_no_newline():
    value = b'{"s":"a\nb"}'
    flat = kafka.flat_payload(b"[42]", value, HEADERS)
    assert len(flat) == kafka.record_bytes(b"[42]", value, HEADERS)
    assert b"\n" not in flat and flat.startswith(b'{"s":"a b"}[42]dblog.key[42]')


def test_key_of_both_formats():
    assert kafka.key_of(b"[42]") == 42
    assert kafka.key_of(b"[-3]") == -3
    assert kafka.key_of(b'{"id":1000000000000}') == 10**12
    assert kafka.key_of(b'{"id": 7}') == 7
    assert kafka.key_of(b'[7,"eu"]') is None and kafka.key_of(None) is None


def test_kafka_version_from_the_clients_jar():
    names = ["/x/kafka-tools-api-4.1.1.jar", "/x/kafka-clients-4.1.1.jar", "/x/kafka_2.13-4.1.1.jar"]
    assert kafka.kafka_version(names) == "4.1.1"
    with pytest.raises(RuntimeError, match="kafka-jars"):
        kafka.kafka_version(["/x/kafka-server-4.1.1.jar"])


def test_parse_perf_takes_the_final_summary():
    out = (
        "18576 records sent, 3710.0 records/sec (1.06 MB/sec), 74.2 ms avg latency, 501.0 ms max latency.\n"
        "20000 records sent, 3892.6 records/sec (1.11 MB/sec), 70.76 ms avg latency, 501.00 ms max latency, "
        "60 ms 50th, 173 ms 95th, 197 ms 99th, 498 ms 99.9th.\n"
    )
    r = kafka.parse_perf(out)
    assert r["records"] == 20000 and r["records_per_s"] == 3892.6 and r["mb_per_s"] == 1.11
    assert r["p50_latency_ms"] == 60 and r["p99_latency_ms"] == 197
    with pytest.raises(RuntimeError, match="no summary line"):
        kafka.parse_perf(out.splitlines()[0])


def test_txn_interval_is_the_mean_time_per_transaction():
    assert kafka.txn_interval_ms([(10.0, 10.2, 5), (10.2, 10.5, 5), (10.5, 11.0, 5), (11.0, 11.2, 5)]) == 300
    assert kafka.txn_interval_ms([(1.0, 1.0001, 1)]) == 1
    assert kafka.txn_interval_ms([]) == 1000


def test_per_record_latency_only_in_the_window_and_counts_missing():
    txns = [(1, 2, 100.0), (3, 5, 101.0), (6, 6, 200.0)]  # the last one is outside [100, 150)
    seen = {1: 100.5, 2: 100.25, 3: 101.125, 4: 101.5}.get
    lat, missing = kafka.per_record(txns, seen, 100.0, 150.0)
    assert lat == [0.5, 0.25, 0.125, 0.5] and missing == 1


def test_summarize_nearest_rank_percentiles():
    s = kafka.summarize([i / 1000 for i in range(100, 0, -1)], missing=2)  # 1..100 ms, unsorted
    assert s["records"] == 100 and s["missing"] == 2
    assert (s["p50_s"], s["p90_s"], s["p99_s"], s["max_s"]) == (0.05, 0.09, 0.099, 0.1)
    assert len(s["percentiles_s"]) == 100 and s["percentiles_s"][-1] == 0.1
    assert kafka.percentile([1.0, 2.0, 3.0], 0.99) == 3.0
    assert "p99_s" not in kafka.summarize([])


def test_ratio():
    assert kafka.ratio(5_000, 20_000) == 0.25
    assert kafka.ratio(None, 1.0) is None and kafka.ratio(1.0, 0) is None
