"""The Kafka output (issue 14): events/s into Kafka against Kafka's own producer perf test, commit →
visible-to-consumer latency, and RSS.

    eval "$(scripts/services env)"
    python -m bench.kafka [--only pg|mysql] [--parts throughput,latency] [--events 300000]
        [--rate 10000] [--seconds 60] [--plot docs/img/bench-kafka.png] [--json FILE]
    python -m bench.kafka --from-json FILE [FILE ...] [--plot PNG]     (report earlier runs)

**Throughput** (per database, per value format ``dblog`` and ``debezium``): one source per
format and run mode is primed (slot / checkpoint, topics created) and stopped; N narrow-row
events are written with every capture stopped (bench/dbs.py: 90 % inserts, 10 % updates in
10k-row transactions, then a sentinel row). Each format's capture then runs in-process with
``kafka://<broker>?format=...`` and default ``EngineConfig`` and is timed from start until the
sentinel's checkpoint is stored, i.e. until every event is committed in a Kafka transaction;
CPU is this process's (engine, writer, librdkafka threads). The topic is read back with
``read_committed`` to count the records (exactly N + 1 with a positive key) and to measure
them: key + value + header bytes. Baseline, same run, same broker: Kafka's
``org.apache.kafka.tools.ProducerPerformance`` (the class behind kafka-producer-perf-test.sh,
4.1.1's kafka-tools jar fetched once into ~/.m2 by ``mvn dependency:get``, the rest from
.services/kafka/lib) producing the same number of records into a topic with the same
partition count, transactional, committing as often as our capture did (our mean time per
transaction as ``--transaction-duration-ms``), with the two settings our producer sets
explicitly (``linger.ms=5``, ``compression.type=lz4``); twice: ``--record-size`` = our mean
record size (Kafka's usual random-letter payload, which lz4 cannot shrink) and ``--payload-file``
holding a sample of our records flattened into one value each (value + key + headers: same
sizes, same compressibility). Ratio = ours / perf test in records/s. Peak RSS: the same capture
as ``dblog capture`` in a child process over the same log range (its VmHWM at the end; "idle"
one second after its first commit).

**Latency** (per database, ``format=dblog``): bench/latency.py's paced writer (10k events/s =
200 transactions/s of 50 rows) for warm-up + S seconds into a table the capture reads; a
``read_committed`` consumer in a process of its own records when each record reached it. Per
record of a transaction committed in the measured window: consumer receive time − the time
COMMIT returned to the writer (same host clock); also the time ``output.write`` returned (the
Kafka transaction committed). The same writer then runs against the same capture with the
default Delta changelog output (commit → durable in Delta, as bench/latency.py measures it),
for a same-run comparison.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, Optional

from . import debezium
from .common import NAMES, run_kinds, say
from .common import fmt_n as _n
from .dbs import DATABASES, need_env
from .engine_runs import SENTINEL_KEY, ChildCapture, InProcessCapture, SentinelWatch, wait_for
from .wide import WIDE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = {
    "parts": ["throughput", "latency"],
    "events": 300_000,  # log events per throughput run (plus one sentinel row)
    "formats": ["dblog", "debezium"],
    "payload_sample": 20_000,  # records of ours in the perf test's --payload-file
    "rate": 10_000,  # latency: target events/s
    "seconds": 60,  # latency: measured seconds per output
    "warmup": 5,  # latency: seconds written first and not measured
    "max_txn_rate": 200,  # latency: transactions/s at most (bench/latency.py's pacing)
    "drain_timeout": 120,
}
PERF_CLASS = "org.apache.kafka.tools.ProducerPerformance"
# What our producer sets explicitly (outputs/kafka.py); everything else stays each client's default.
PRODUCER_PROPS = {"linger.ms": "5", "compression.type": "lz4"}
FORMAT_NAMES = {"dblog": "`format=dblog`", "debezium": "`format=debezium`"}


# -- pure helpers (tests/unit/test_bench_kafka.py) ------------------------------------------------
def record_bytes(key: Optional[bytes], value: Optional[bytes], headers) -> int:
    """What one record carries: key + value + header names and values (Kafka's framing aside)."""
    return len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers or ())


def flat_payload(key: Optional[bytes], value: Optional[bytes], headers) -> bytes:
    """One record as one perf-test payload line: the same bytes, so the same size
    (``record_bytes``) and compressibility; the perf test splits its file on newlines."""
    out = (value or b"") + (key or b"") + b"".join(k.encode() + (v or b"") for k, v in headers or ())
    return out.replace(b"\n", b" ")


def key_of(raw: Optional[bytes]) -> Optional[int]:
    """The integer key of a record key or ``dblog.key`` header: ``[42]`` or ``{"id":42}``."""
    m = re.fullmatch(rb'\s*(?:\[|\{"[^"]*":)\s*(-?\d+)\s*[\]}]\s*', raw or b"")
    return int(m.group(1)) if m else None


def kafka_version(jar_names) -> str:
    """The Kafka version of a lib directory, from its kafka-clients jar."""
    for name in jar_names:
        m = re.fullmatch(r"kafka-clients-(\d[\w.\-]*)\.jar", os.path.basename(name))
        if m:
            return m.group(1)
    raise RuntimeError("bench: no kafka-clients-*.jar in the Kafka lib directory (run scripts/kafka-jars)")


def parse_perf(text: str) -> dict:
    """ProducerPerformance's final summary line (the interim lines lack the percentiles)."""
    pat = re.compile(
        r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
        r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
    )
    for line in reversed(text.splitlines()):
        m = pat.search(line)
        if m:
            return {
                "records": int(m.group(1)),
                "records_per_s": float(m.group(2)),
                "mb_per_s": float(m.group(3)),
                "avg_latency_ms": float(m.group(4)),
                "max_latency_ms": float(m.group(5)),
                "p50_latency_ms": int(m.group(6)),
                "p99_latency_ms": int(m.group(8)),
            }
    raise RuntimeError(f"bench: no summary line from the producer perf test: {text[-800:]!r}")


def txn_interval_ms(writes: list) -> int:
    """Our mean time per Kafka transaction (first write's start to last write's end over the
    number of writes), for the perf test's --transaction-duration-ms."""
    if not writes:
        return 1000
    return max(1, round((writes[-1][1] - writes[0][0]) * 1000 / len(writes)))


def percentile(sorted_v: list, q: float) -> float:
    """Nearest-rank percentile of an ascending list (as bench/latency.py's)."""
    return sorted_v[max(0, min(len(sorted_v) - 1, math.ceil(q * len(sorted_v)) - 1))]


def per_record(txns: list, seen: Callable[[int], Optional[float]], lo_t: float, hi_t: float) -> tuple[list, int]:
    """Latencies of every row of the transactions (lo, hi, commit time) committed in
    [lo_t, hi_t): ``seen(key)`` - commit time; rows never seen are counted, not guessed."""
    lat, missing = [], 0
    for lo, hi, tc in txns:
        if not lo_t <= tc < hi_t:
            continue
        for k in range(lo, hi + 1):
            t = seen(k)
            if t is None:
                missing += 1
            else:
                lat.append(t - tc)
    return lat, missing


def summarize(lat: list, missing: int = 0) -> dict:
    out: dict = {"records": len(lat), "missing": missing}
    if lat:
        v = sorted(lat)
        out.update({f"p{round(q * 100)}_s": round(percentile(v, q), 4) for q in (0.5, 0.9, 0.99)})
        out.update(max_s=round(v[-1], 4), mean_s=round(sum(v) / len(v), 4))
        out["percentiles_s"] = [round(percentile(v, i / 100), 4) for i in range(1, 101)]
    return out


def ratio(ours: Optional[float], base: Optional[float]) -> Optional[float]:
    return round(ours / base, 3) if ours and base else None


# -- Kafka plumbing -----------------------------------------------------------------------------
def bootstrap() -> str:
    return need_env("DBLOG_KAFKA_BOOTSTRAP")


def output_url(fmt: str, db) -> str:
    url = f"kafka://{bootstrap()}?format={fmt}"
    if fmt == "debezium" and db.kind == "postgres":
        url += f"&connector=postgresql&database={db.db}"
    elif fmt == "debezium":
        url += "&connector=mysql"
    return url


_ADMIN: list = []


def _admin():
    """One client for the run: a temporary one is destroyed before its futures resolve."""
    if not _ADMIN:
        from confluent_kafka.admin import AdminClient

        _ADMIN.append(AdminClient({"bootstrap.servers": bootstrap()}))
    return _ADMIN[0]


def create_topic(name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    for f in _admin().create_topics([NewTopic(name, num_partitions=partitions, replication_factor=-1)]).values():
        f.result()


def delete_topics(prefixes: list[str], log=say) -> None:
    admin = _admin()
    names = [t for t in admin.list_topics(timeout=30).topics if t.startswith(tuple(prefixes))]
    if names:
        for name, f in admin.delete_topics(names, operation_timeout=30).items():
            try:
                f.result()
            except Exception as exc:  # best effort: a leftover topic costs disk only
                log(f"deleting topic {name}: {exc}")


def tools_classpath(log=say) -> str:
    """.services/kafka/lib (scripts/kafka-jars) plus the kafka-tools jar of the same version,
    which the broker's jar set lacks: fetched once into the local Maven repository."""
    lib = os.path.join(os.environ.get("DBLOG_SERVICES_DIR", os.path.join(REPO, ".services")), "kafka", "lib")
    version = kafka_version(glob.glob(os.path.join(lib, "kafka-clients-*.jar")))
    m2 = os.environ.get("DBLOG_BENCH_M2", os.path.expanduser("~/.m2/repository"))
    jar = os.path.join(m2, "org", "apache", "kafka", "kafka-tools", version, f"kafka-tools-{version}.jar")
    if not os.path.exists(jar):
        mvn = shutil.which("mvn")
        if not mvn:
            raise RuntimeError("bench: the producer perf test needs kafka-tools; install Maven (mvn) to fetch it")
        log(f"kafka: fetching org.apache.kafka:kafka-tools:{version} into {m2} (once)")
        subprocess.run(
            [mvn, "-q", "-B", "dependency:get", f"-Dartifact=org.apache.kafka:kafka-tools:{version}"]
            + ["-Dtransitive=false", f"-Dmaven.repo.local={m2}"],
            check=True,
            timeout=600,
        )
    return f"{lib}/*{os.pathsep}{jar}"


def perf_test(cp: str, topic: str, n: int, txn_ms: int, tid: str, size_or_file, timeout: float) -> dict:
    """One ProducerPerformance run; its own records/s, plus the JVM's CPU and peak RSS
    (os.wait4: this child only, JVM start-up included)."""
    how = ["--record-size", str(size_or_file)] if isinstance(size_or_file, int) else ["--payload-file", size_or_file]
    cmd = [shutil.which("java") or "java", "-cp", cp, PERF_CLASS, "--topic", topic, "--num-records", str(n)]
    cmd += ["--throughput", "-1", "--transactional-id", tid, "--transaction-duration-ms", str(txn_ms), *how]
    cmd += ["--producer-props", f"bootstrap.servers={bootstrap()}", *(f"{k}={v}" for k, v in PRODUCER_PROPS.items())]
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        killer = threading.Timer(timeout, p.kill)
        killer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            killer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"bench: the producer perf test exited {p.returncode}: {text[-1500:]}")
    r = parse_perf(text)
    r.update(
        process_s=round(wall, 2),
        cpu_s=round(ru.ru_utime + ru.ru_stime, 2),
        cpu_us_per_record=round((ru.ru_utime + ru.ru_stime) / n * 1e6, 1),
        peak_rss_mb=round(ru.ru_maxrss / 1024, 1),
        transaction_ms=txn_ms,
    )
    return r


def read_topic(topic: str, every: int, sample: int, payload_path: str, timeout: float = 300) -> dict:
    """Every committed record of a topic: counts and sizes; every ``every``-th record (at
    most ``sample``) flattened into ``payload_path``, one per line, for the perf test."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap(),
            "group.id": f"bench-kafka-{uuid.uuid4().hex[:8]}",  # assign only, never commits
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        eof: set = set()
        st = {"records": 0, "positive_keys": 0, "key_bytes": 0, "value_bytes": 0, "header_bytes": 0}
        total, kept = 0, 0
        pf = open(payload_path, "wb")
        end = time.monotonic() + timeout
        while len(eof) < len(parts):
            if time.monotonic() > end:
                raise TimeoutError(f"bench: reading {topic} back took over {timeout:.0f} s")
            for m in c.consume(10_000, 1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise RuntimeError(f"bench: reading {topic}: {m.error()}")
                key, value, headers = m.key(), m.value(), m.headers() or []
                st["records"] += 1
                st["key_bytes"] += len(key or b"")
                st["value_bytes"] += len(value or b"")
                st["header_bytes"] += record_bytes(None, None, headers)
                k = key_of(dict(headers).get("dblog.key"))
                st["positive_keys"] += k is not None and k > 0
                total += record_bytes(key, value, headers)
                if st["records"] % every == 0 and kept < sample:
                    pf.write(flat_payload(key, value, headers) + b"\n")
                    kept += 1
        pf.close()
    finally:
        c.close()
    st["mean_record_bytes"] = round(total / st["records"], 1) if st["records"] else 0
    st["payload_lines"] = kept
    return st


# -- throughput ---------------------------------------------------------------------------------
class _Watch(SentinelWatch):
    """The sentinel, plus (start, end, events) of every write: one Kafka transaction each."""

    def __init__(self, output, table: str):
        super().__init__(output, table)
        self.writes: list[tuple[float, float, int]] = []

    def write(self, events, epoch=None):
        t0 = time.perf_counter()
        super().write(events, epoch)
        self.writes.append((t0, time.perf_counter(), len(events)))


class KafkaCapture(InProcessCapture):
    def __init__(self, db, source_id: str, workdir: str, url: str):
        super().__init__(db, source_id, workdir)
        self.lake = url  # what start() hands to make_output

    def wrap_output(self, output):
        return _Watch(output, self.db.event_table)


class KafkaChildCapture(ChildCapture):
    """``dblog capture`` with the Kafka output URL in its config file."""

    def __init__(self, db, source_id: str, workdir: str, url: str):
        self.url = url
        super().__init__(db, source_id, workdir)

    def _write_config(self) -> None:
        self.lake = self.url
        super()._write_config()

    def cpu_s(self) -> float:
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system


def _topic(source_id: str, table: str) -> str:
    from airflow_provider_dblog.outputs.kafka_format import topic_name

    return topic_name(f"{source_id}.{table}")  # the output's default: prefix = the source id


def throughput(kind: str, o: dict, workdir: str, log) -> dict:
    db = (WIDE[kind] if o.get("wide") else DATABASES[kind])()
    n, fmts = int(o["events"]), list(o["formats"])
    # "delta": the same capture into the Delta changelog, the same-run baseline
    ids = db.source_ids([f"{f}{suffix}" for f in fmts for suffix in ("", "_child")] + ["delta"])
    timeout = max(300.0, n / 500)
    out: dict = {"label": db.label, "events": n, "rows": "30 columns" if o.get("wide") else "narrow", "formats": {}}
    live: list = []
    try:
        cp = tools_classpath(log)
        db.create()
        with_dbz = bool(o.get("debezium", True))
        log(f"priming {', '.join(ids.values())} (slot / checkpoint, topics)")
        key, idle = -1, {}
        for role, sid in ids.items():
            fmt = role.removesuffix("_child")
            if role == "delta":
                cap = InProcessCapture(db, sid, workdir)
            else:
                cap = (KafkaChildCapture if role.endswith("_child") else KafkaCapture)(
                    db, sid, workdir, output_url(fmt, db)
                )
            live.append(cap)
            key = cap.start().prime(key)
            if role.endswith("_child"):
                time.sleep(1.0)  # the idle footprint after the first commit
                idle[fmt] = cap.rss_mb()[0]
            cap.stop()
        if with_dbz:  # where Debezium's range starts (PostgreSQL: its slot and the publication)
            db.prepare_log_baseline()
            debezium.prepare(db, ("kafka",))
        log(f"writing {n} log events with every capture stopped")
        gen = db.generate(n)
        db.insert_primer(SENTINEL_KEY)
        out["load"] = {k: round(v, 2) if isinstance(v, float) else v for k, v in gen.items()}
        caps = {role: c for role, c in zip(ids, live)}
        log("delta: capture in-process into the Delta changelog (the baseline)")
        cpu0 = time.process_time()
        r = caps["delta"].capture_until_sentinel(n, timeout)
        cpu = time.process_time() - cpu0
        caps["delta"].stop()
        out["delta"] = {
            "events_per_s": round(r["events_per_s"], 1),
            "seconds": r["seconds"],
            "cpu_us_per_event": round(cpu / n * 1e6, 1),
        }
        log(f"delta: {out['delta']['events_per_s']:,.0f} events/s, {out['delta']['cpu_us_per_event']} CPU µs/event")
        for fmt in fmts:
            cap, sid = caps[fmt], ids[fmt]
            log(f"{fmt}: capture in-process")
            cpu0 = time.process_time()
            r = cap.capture_until_sentinel(n, timeout)
            cpu = time.process_time() - cpu0
            writes = list(cap.watch.writes)
            pos = cap.watch.position
            cap.stop()
            ours = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items() if k != "sentinel_position"}
            ours.update(
                cpu_s=round(cpu, 2),
                cpu_us_per_event=round(cpu / n * 1e6, 1),
                transactions=len(writes),
                events_per_transaction=round(sum(w[2] for w in writes) / max(1, len(writes)), 1),
                transaction_ms=txn_interval_ms(writes),
            )
            topic = _topic(sid, db.event_table)
            payload = os.path.join(workdir, f"payload-{kind}-{fmt}.txt")
            sample = int(o["payload_sample"])
            rec = read_topic(topic, max(1, n // sample), sample, payload)
            rec["exactly_once"] = rec["positive_keys"] == n + 1  # the N events and the sentinel
            log(
                f"{fmt}: {ours['events_per_s']:,.0f} events/s, {ours['cpu_us_per_event']} CPU µs/event, "
                f"{len(writes)} transactions of {ours['events_per_transaction']} events; {rec['records']} records "
                f"read back, mean {rec['mean_record_bytes']} B"
            )
            size = max(1, round(rec["mean_record_bytes"]))
            partitions = len(_admin().list_topics(topic, timeout=30).topics[topic].partitions)
            res: dict = {
                "ours": ours,
                "records": rec,
                "partitions": partitions,
                "ratio_to_delta": ratio(ours["events_per_s"], out["delta"]["events_per_s"]),
            }
            for variant, arg in (("perf_size", size), ("perf_payload", payload)):
                ptopic = f"bench_perf_{db.tag}_{fmt}_{variant}"
                create_topic(ptopic, partitions)
                log(f"{fmt}: {PERF_CLASS.rsplit('.', 1)[1]} {variant} ({n} records, {ours['transaction_ms']} ms txns)")
                p = perf_test(cp, ptopic, n, ours["transaction_ms"], f"{ptopic}-tid", arg, timeout)
                p["ratio"] = ratio(ours["events_per_s"], p["records_per_s"])
                p["ratio_after_startup"] = ratio(ours.get("events_per_s_after_startup"), p["records_per_s"])
                res[variant] = p
                log(f"{fmt}: perf test {p['records_per_s']:,.0f} records/s; ours / perf test {p['ratio']}")
            # peak RSS: the same range in a `dblog capture` child process
            child = caps[f"{fmt}_child"]
            log(f"{fmt}: capture in a child process (peak RSS)")
            t0 = time.perf_counter()
            child.start()
            t1 = child.wait_checkpoint(pos, timeout)
            rss, hwm = child.rss_mb()
            ccpu = child.cpu_s()
            child.stop()
            res["child"] = {
                "seconds": round(t1 - t0, 3),
                "events_per_s": round(n / (t1 - t0), 1),
                "cpu_s": round(ccpu, 2),
                "idle_rss_mb": round(idle[fmt], 1),
                "peak_rss_mb": round(hwm, 1),
                "rss_end_mb": round(rss, 1),
            }
            log(f"{fmt}: child {res['child']['events_per_s']:,.0f} events/s, peak RSS {hwm:.0f} MiB")
            out["formats"][fmt] = res
        if with_dbz:
            out["debezium_kafka"] = _debezium_kafka(db, n, timeout, log, partitions)
            for res in out["formats"].values():
                res["ratio_to_debezium"] = ratio(res["ours"]["events_per_s"], out["debezium_kafka"]["events_per_s"])
        return out
    finally:
        for c in live:
            try:
                c.stop(10)
            except Exception as exc:  # keep cleaning up
                log(f"stopping {c.source_id}: {exc}")
        try:
            delete_topics(list(ids.values()) + [f"bench_perf_{db.tag}_", f"bench_dbz_{db.tag}"], log)
        except Exception as exc:
            log(f"deleting the topics failed: {exc}")
        try:
            db.cleanup(list(ids.values()))
            debezium.cleanup(db, ("kafka",))
        except Exception as exc:
            log(f"clean-up of {db.ns} failed: {exc}")


def _debezium_kafka(db, n: int, timeout: float, log, partitions: int) -> dict:
    """Debezium's embedded engine over the same log range, its JSON records (payload only, as
    our format=debezium) sent by a Kafka producer to a topic with our partition count, each
    batch finished once the broker acknowledged it (bench/debezium.py, consumer ``kafka``)."""
    topic = f"bench_dbz_{db.tag}"
    create_topic(topic, partitions)
    log("debezium: the embedded engine → a Kafka producer, same log range")
    extra = {"bootstrap": bootstrap(), "kafka_topic": topic, "dbz.converter.schemas.enable": "false"}
    res = debezium.run(db, "kafka", db.event_table, n, timeout, log, extra=extra)
    rate = debezium.rate(res, n)
    rate["records_in_topic"] = _record_count(topic, partitions)
    log(
        f"debezium: {rate['events_per_s']:,.0f} events/s, {rate['cpu_us_per_event']} CPU µs/event, "
        f"{rate['records_in_topic']} records in its topic"
    )
    return rate


def _record_count(topic: str, partitions: int) -> int:
    """Records in ``topic`` (its partitions' end offsets: it is written without transactions)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap(), "group.id": f"bench-count-{uuid.uuid4().hex[:8]}"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        c.close()


# -- latency -------------------------------------------------------------------------------------
def _visible_consumer(servers: str, topic: str, path: str, ready, stop) -> None:
    """Own process: "<key> <time>" for every record the moment a read_committed consumer
    got it (poll per record: a batch call would wait to fill its batch)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bench-kafka-lat-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    ready.put(1)
    with open(path, "w") as out:
        lines, flushed = [], time.monotonic()
        while not stop.is_set():
            m = c.poll(0.05)
            now = time.time()
            if m is not None and not m.error():
                k = key_of(m.key())
                if k is not None and k > 0:  # primer rows have negative keys
                    lines.append(f"{k} {now}\n")
            if lines and now - flushed > 0.05:
                out.write("".join(lines))
                out.flush()
                lines, flushed = [], now
        out.write("".join(lines))
    c.close()


def _paced(kind: str, db, first_key: int, o: dict, workdir: str, ctx, tick) -> tuple[list, float]:
    """bench/latency.py's writer for warm-up + seconds; returns its (lo, hi, commit time)
    transactions and the start time."""
    from .latency import _conn, _writer, plan

    txn_rate, rows = plan(int(o["rate"]), int(o["max_txn_rate"]))
    path = os.path.join(workdir, f"writer-{kind}-{first_key}.json")
    ready, go = ctx.Queue(), ctx.Event()
    args = (kind, _conn(db, kind), db.event_table, first_key, rows, txn_rate, o["warmup"] + o["seconds"], path)
    p = ctx.Process(target=_writer, daemon=True, args=(*args, ready, go))
    p.start()
    try:
        ready.get(timeout=120)
        t_go = time.time()
        go.set()
        while p.is_alive():
            tick()
            p.join(0.2)
        if p.exitcode != 0:
            raise RuntimeError(f"bench: the paced writer exited with {p.exitcode}")
    finally:
        if p.is_alive():
            p.kill()
    with open(path) as f:
        return json.load(f)["txns"], t_go


def _window_stats(txns: list, t_go: float, o: dict, seen) -> dict:
    lo_t = t_go + o["warmup"]
    st = summarize(*per_record(txns, seen, lo_t, lo_t + o["seconds"]))
    measured = [t for t in txns if lo_t <= t[2] < lo_t + o["seconds"]]
    span = measured[-1][2] - measured[0][2] if len(measured) > 1 else 0
    st["achieved_events_per_s"] = round(sum(hi - lo + 1 for lo, hi, _ in measured) / span, 1) if span else 0.0
    return st


def latency(kind: str, o: dict, workdir: str, log) -> dict:
    from .latency import _capture_class

    db = DATABASES[kind]()
    ids = db.source_ids(["lat_kafka", "lat_delta"])
    ctx = multiprocessing.get_context("spawn")  # never fork a process running the engine's threads
    out: dict = {"label": db.label, "rate": o["rate"], "seconds": o["seconds"], "warmup": o["warmup"]}
    cap = cons = None
    stop = ctx.Event()
    try:
        db.create()
        cls = _capture_class()
        cap = cls(db, ids["lat_kafka"], workdir)
        cap.lake = output_url("dblog", db)
        log("latency: Kafka capture, priming")
        primer = cap.start().prime(-1)
        topic = _topic(ids["lat_kafka"], db.event_table)
        path = os.path.join(workdir, f"visible-{kind}.txt")
        ready = ctx.Queue()
        cons = ctx.Process(target=_visible_consumer, daemon=True, args=(bootstrap(), topic, path, ready, stop))
        cons.start()
        ready.get(timeout=120)
        log(f"latency: {o['rate']} events/s for {o['warmup']} + {o['seconds']} s into Kafka")
        txns, t_go = _paced(kind, db, 1, o, workdir, ctx, cap.check)
        recv: dict[int, float] = {}
        fh, partial = open(path), [""]

        def read_visible() -> None:
            *lines, partial[0] = (partial[0] + fh.read()).split("\n")
            for line in lines:
                k, t = line.split()
                recv.setdefault(int(k), float(t))
            cap.check()

        # every row, not just the last: the consumer may lag on another partition
        try:
            wait_for(lambda: len(recv) >= txns[-1][1], o["drain_timeout"], "every row in Kafka", read_visible)
        except TimeoutError as exc:  # reported as rows not seen
            log(f"latency: {exc}")
        read_visible()
        fh.close()
        stop.set()
        cons.join(10)
        out["kafka_visible"] = _window_stats(txns, t_go, o, recv.get)
        out["kafka_commit"] = _window_stats(txns, t_go, o, cap.watch.durable.at)
        ws = sorted(t1 - t0 for t0, t1, _ in cap.watch.writes)
        out["kafka_transactions"] = {
            "count": len(ws),
            "commit_p50_s": round(percentile(ws, 0.5), 4) if ws else None,
            "commit_p99_s": round(percentile(ws, 0.99), 4) if ws else None,
            "events_per_transaction": round(sum(n for *_, n in cap.watch.writes) / max(1, len(ws)), 1),
        }
        cap.stop()
        cap = None
        v = out["kafka_visible"]
        log(f"latency: Kafka visible p50 {v.get('p50_s')} s, p99 {v.get('p99_s')} s, {v['missing']} not seen")

        cap = cls(db, ids["lat_delta"], workdir)
        log("latency: Delta capture, priming")
        cap.start().prime(primer)
        txns, t_go = _paced(kind, db, txns[-1][1] + 1, o, workdir, ctx, cap.check)
        wait_for(lambda: cap.watch.durable.at(txns[-1][1]) is not None, o["drain_timeout"], "the last row", cap.check)
        out["delta_durable"] = _window_stats(txns, t_go, o, cap.watch.durable.at)
        d = out["delta_durable"]
        log(f"latency: Delta durable p50 {d.get('p50_s')} s, p99 {d.get('p99_s')} s")
        if "p99_s" in v and "p99_s" in d:
            out["p99_ratio_to_delta"] = round(v["p99_s"] / d["p99_s"], 2)
        return out
    finally:
        stop.set()
        if cons is not None and cons.is_alive():
            cons.terminate()
            cons.join(10)
        if cap is not None:
            try:
                cap.stop(10)
            except Exception as exc:
                log(f"latency: stopping the capture: {exc}")
        try:
            delete_topics(list(ids.values()), log)
        except Exception as exc:
            log(f"deleting the topics failed: {exc}")
        try:
            db.cleanup(list(ids.values()))
        except Exception as exc:
            log(f"clean-up of {db.ns} failed: {exc}")


def run(kind: str, opts: dict, workdir: str, log) -> dict:
    """bench/run.py's scenario contract: the parts in opts["parts"] on one database."""
    o = {**DEFAULTS, **(opts or {})}
    out: dict = {"label": DATABASES[kind].label, "opts": {k: v for k, v in o.items()}}
    if "throughput" in o["parts"]:
        out["throughput"] = throughput(kind, o, workdir, log)
    if "wide" in o["parts"]:  # the same with 30-column rows (bench/wide.py)
        out["wide"] = throughput(kind, {**o, "wide": True}, workdir, log)
    if "latency" in o["parts"]:
        out["latency"] = latency(kind, o, workdir, log)
    return out


# -- report ---------------------------------------------------------------------------------------
def _r(x) -> str:
    return f"{x:.2f}×" if isinstance(x, (int, float)) else "–"


def _ms(x) -> str:
    return f"{x * 1000:,.0f}" if isinstance(x, (int, float)) else "–"


def markdown(results: dict) -> str:
    lines = ["### Kafka output", ""]
    tp = {(k, part): r[part] for k, r in results.items() for part in ("throughput", "wide") if part in r}
    lat = {k: r["latency"] for k, r in results.items() if "latency" in r}
    failed = [f"**{NAMES.get(k, k)} failed:** `{r['error']}`" for k, r in results.items() if "error" in r]
    lines += [x for f in failed for x in (f, "")]
    if tp:
        counts = " and ".join(
            f"{n:,} ({rows})" for rows, n in sorted({(r.get("rows", "narrow"), r["events"]) for r in tp.values()})
        )
        kept = max(x["records"].get("payload_lines", 0) for r in tp.values() for x in r["formats"].values())
        lines += [
            f"Throughput: {counts} log events (90 % inserts, 10 % updates, 10k-row transactions; narrow rows: "
            "bench/dbs.py, 30 columns: bench/wide.py and `--parts wide`), written "
            "with the capture stopped, then the in-process capture with `kafka://` and default `EngineConfig` "
            "timed from start until the sentinel's checkpoint is stored (every event committed in a Kafka "
            "transaction; start-up included). The topics are read back with `read_committed`: every event is "
            "there exactly once. Baseline in the same run on the same broker: Kafka's own producer perf test "
            "(`ProducerPerformance`, Kafka 4.1.1, the class behind `kafka-producer-perf-test.sh`) producing "
            "the same number of records into a topic with the same partitions, transactional "
            "(`--transactional-id`) and committing as often as our capture did (`--transaction-duration-ms` = "
            "our mean time per transaction), with our producer's `linger.ms=5` and `compression.type=lz4`; "
            "once with `--record-size` = our mean record size (key + value + headers; Kafka's random-letter "
            f"payload) and once with `--payload-file` holding {kept:,} of our records flattened into one value each "
            "(the same bytes: same sizes and compressibility). Ratio = our events/s / its records/s. CPU: ours "
            "is this process (engine, writer, librdkafka threads), the perf test's the whole JVM (start-up "
            "included). *vs Delta*: our events/s / the same capture's into the local Delta changelog over the "
            "same log range in the same run (the issue's goal: 0.8×). *vs Debezium*: our events/s / those of "
            "Debezium 3.5's embedded engine over the same log range sending its JSON records (payload only) "
            "with a Kafka producer (`linger.ms=5`, lz4, acks=all, idempotent; each batch finished once "
            "acknowledged, as Debezium Server's Kafka sink), from building the engine to the last event "
            "(the issue's goal: 2×).",
            "",
            "| Source | Rows | Format | Mean record B | Transactions (events each) | DBLog events/s | CPU µs/event | "
            "Delta path events/s | vs Delta | Debezium → Kafka events/s | vs Debezium | "
            "Perf test `--record-size` rec/s | Ratio | Perf test `--payload-file` rec/s | Ratio | "
            "Perf test CPU µs/record | Exactly once |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in tp.values():
            for fmt, x in r["formats"].items():
                o, a, b = x["ours"], x["perf_size"], x["perf_payload"]
                lines.append(
                    f"| {r['label']} | {r.get('rows', 'narrow')} | {FORMAT_NAMES.get(fmt, fmt)} | "
                    f"{x['records']['mean_record_bytes']:,.0f} | "
                    f"{o['transactions']:,} ({o['events_per_transaction']:,.0f}) | {_n(o['events_per_s'])} | "
                    f"{o['cpu_us_per_event']:.1f} | {_n(r.get('delta', {}).get('events_per_s'))} | "
                    f"{_r(x.get('ratio_to_delta'))} | {_n(r.get('debezium_kafka', {}).get('events_per_s'))} | "
                    f"{_r(x.get('ratio_to_debezium'))} | {_n(a['records_per_s'])} | {_r(a['ratio'])} | "
                    f"{_n(b['records_per_s'])} | {_r(b['ratio'])} | {a['cpu_us_per_record']:.1f} / "
                    f"{b['cpu_us_per_record']:.1f} | {'yes' if x['records']['exactly_once'] else 'NO'} |"
                )
        starts = [
            f"{NAMES.get(k, k)} {r.get('rows', 'narrow')} {fmt} {x['ours']['startup_s']} s"
            for (k, _), r in tp.items()
            for fmt, x in r["formats"].items()
            if "startup_s" in x["ours"]
        ]
        if starts:
            lines += ["", "Start-up (connect, `init_transactions`, read the topics' tails) inside those times: "]
            lines[-1] += "; ".join(starts) + "."
        lines += [
            "",
            "Memory: the same capture as `dblog capture` in a child process over the same log range (peak = "
            "VmHWM at the end; idle = a second after its first commit); the perf test's JVM for comparison "
            "(`ru_maxrss`, default heap).",
            "",
            "| Source | Rows | Format | Child events/s (process start-up included) | Idle RSS MiB | Peak RSS MiB | "
            "Perf test JVM peak RSS MiB |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for r in tp.values():
            for fmt, x in r["formats"].items():
                c = x["child"]
                lines.append(
                    f"| {r['label']} | {r.get('rows', 'narrow')} | {FORMAT_NAMES.get(fmt, fmt)} | {_n(c['events_per_s'])} | "
                    f"{c['idle_rss_mb']:.0f} | {c['peak_rss_mb']:.0f} | {x['perf_size']['peak_rss_mb']:.0f} |"
                )
    if lat:
        x0 = next(iter(lat.values()))
        lines += [
            "",
            f"Latency: bench/latency.py's paced writer at {x0['rate']:,} events/s (transactions of 50 rows) for "
            f"{x0.get('warmup', DEFAULTS['warmup'])} s of warm-up and {x0['seconds']} s measured, into a table the capture reads with "
            "`format=dblog`; a `read_committed` consumer (confluent-kafka, default fetch settings) in a process "
            "of its own notes when each record reaches it. Per record: consumer receive time − the time COMMIT "
            "returned to the writer. *Kafka commit returned*: when the capture's `output.write` (one Kafka "
            "transaction) returned. Then the same writer against the same capture with the Delta changelog "
            "output (commit → durable in Delta, as in *Latency: commit → durable in the changelog* above) for "
            "a same-run comparison. Milliseconds.",
            "",
            "| Source | Achieved events/s | Path | p50 | p90 | p99 | max | Records (not seen) |",
            "|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for r in lat.values():
            for key, name in (
                ("kafka_visible", "commit → visible to a `read_committed` consumer"),
                ("kafka_commit", "commit → Kafka commit returned"),
                ("delta_durable", "commit → durable in the Delta changelog"),
            ):
                s = r.get(key)
                if not s:
                    continue
                lines.append(
                    f"| {r['label'] if key == 'kafka_visible' else '″'} | {_n(s['achieved_events_per_s'])} | {name} | "
                    f"{_ms(s.get('p50_s'))} | {_ms(s.get('p90_s'))} | {_ms(s.get('p99_s'))} | {_ms(s.get('max_s'))} | "
                    f"{s['records']:,} ({s['missing']:,}) |"
                )
        tx = [
            f"{NAMES.get(k, k)} {r['kafka_transactions']['count']:,} transactions of "
            f"{r['kafka_transactions']['events_per_transaction']:,.0f} events, `write` p50 "
            f"{_ms(r['kafka_transactions']['commit_p50_s'])} ms / p99 {_ms(r['kafka_transactions']['commit_p99_s'])} ms"
            for k, r in lat.items()
            if r.get("kafka_transactions")
        ]
        if tx:
            lines += ["", "Kafka transactions during the latency run: " + "; ".join(tx) + "."]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str) -> Optional[str]:
    tp = {(k, part): r[part] for k, r in results.items() for part in ("throughput", "wide") if part in r}
    lat = {k: r["latency"] for k, r in results.items() if "latency" in r}
    if not tp and not lat:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (1 if tp else 0) + (1 if lat else 0)
    widths = ([1.6] if tp else []) + ([1.0] if lat else [])
    fig, axes = plt.subplots(
        1, panels, figsize=(7 * sum(widths), 5.2), squeeze=False, gridspec_kw={"width_ratios": widths}
    )
    i = 0
    if tp:
        ax = axes[0][i]
        i += 1
        labels, groups = [], []
        for (k, part), r in tp.items():
            for fmt, x in r["formats"].items():
                rows = "narrow" if part == "throughput" else "30 col."
                labels.append(f"{NAMES.get(k, k)}\n{rows}\n{fmt}")
                groups.append(
                    (
                        x["perf_size"]["records_per_s"],
                        x["perf_payload"]["records_per_s"],
                        x["ours"]["events_per_s"],
                        r.get("debezium_kafka", {}).get("events_per_s") or 0,
                        r.get("delta", {}).get("events_per_s") or 0,
                    )
                )
        w = 0.17
        series = (
            ("perf test, --record-size", "#9e9e9e"),
            ("perf test, --payload-file (our bytes)", "#c8c8c8"),
            ("DBLog → Kafka", "#1f77b4"),
            ("Debezium engine → Kafka producer", "#d62728"),
            ("DBLog → Delta changelog (same capture)", "#2ca02c"),
        )
        for j, (name, color) in enumerate(series):
            xs = [g + (j - 2) * w for g in range(len(groups))]
            ax.bar(xs, [g[j] for g in groups], w, label=name, color=color)
            if j == 2:
                for x_, g in zip(xs, groups):
                    ax.annotate(
                        f"{g[2]:,.0f}\n{g[2] / g[0]:.2f}× / {g[2] / g[1]:.2f}×",
                        (x_, g[2]),
                        ha="center",
                        va="bottom",
                        fontsize=6,
                    )
        ax.set_xticks(list(range(len(groups))))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("records/s (log scale)")
        ax.set_title("Into Kafka, transactional: DBLog vs kafka-producer-perf-test")
        ax.legend(fontsize=7, loc="upper left")
        ax.margins(y=0.45)
    if lat:
        ax = axes[0][i]
        colors = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a"]
        for c, (k, r) in zip(colors, lat.items()):
            for key, style, name in (
                ("kafka_visible", "-", "visible to consumer"),
                ("kafka_commit", ":", "Kafka commit returned"),
                ("delta_durable", "--", "Delta changelog durable"),
            ):
                s = r.get(key) or {}
                if "percentiles_s" in s:
                    ax.plot(
                        [max(v * 1000, 0.1) for v in s["percentiles_s"]],
                        range(1, 101),
                        style,
                        color=c,
                        label=f"{NAMES.get(k, k)}: {name}",
                    )
        ax.axhline(99, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("commit → latency per record (ms, log scale)")
        ax.set_ylabel("percentile of records")
        rate = next(iter(lat.values()))["rate"]
        ax.set_title(f"Commit → visible at {rate:,} events/s")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _slim(result: dict) -> dict:
    """A result for printing: the 100 percentiles behind the plot left out."""
    if "latency" not in result:
        return result
    lat = {
        k: ({kk: vv for kk, vv in v.items() if kk != "percentiles_s"} if isinstance(v, dict) else v)
        for k, v in result["latency"].items()
    }
    return {**result, "latency": lat}


def merge(paths: list[str]) -> dict:
    """Earlier --json files into one result: later files' parts replace earlier ones per database."""
    out: dict = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for kind, r in json.load(f).items():
                if "error" in r and kind in out:
                    continue
                out.setdefault(kind, {}).update(r)
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.kafka", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES))
    p.add_argument(
        "--parts",
        default=",".join(DEFAULTS["parts"]),
        help="throughput,wide,latency (default: throughput,latency; wide: the throughput part with 30-column rows)",
    )
    p.add_argument("--events", type=int, default=DEFAULTS["events"], help="throughput: log events")
    p.add_argument("--formats", default=",".join(DEFAULTS["formats"]), help="throughput: dblog,debezium")
    p.add_argument(
        "--no-debezium", action="store_true", help="throughput: without the Debezium → Kafka baseline (needs Maven)"
    )
    p.add_argument("--rate", type=int, default=DEFAULTS["rate"], help="latency: target events/s")
    p.add_argument("--seconds", type=int, default=DEFAULTS["seconds"], help="latency: measured seconds")
    p.add_argument("--warmup", type=int, default=DEFAULTS["warmup"])
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    p.add_argument("--json", metavar="FILE", help="also write the results here")
    p.add_argument("--from-json", metavar="FILE", nargs="+", help="measure nothing: report earlier --json files")
    a = p.parse_args(argv)
    if a.from_json:
        results = merge(a.from_json)
    else:
        opts = {
            "parts": [x.strip() for x in a.parts.split(",") if x.strip()],
            "events": a.events,
            "formats": [x.strip() for x in a.formats.split(",") if x.strip()],
            "debezium": not a.no_debezium,
            "rate": a.rate,
            "seconds": a.seconds,
            "warmup": a.warmup,
        }
        workdir = tempfile.mkdtemp(prefix="dblog-bench-kafka-")
        try:
            results = run_kinds("kafka", run, [a.only] if a.only else list(DATABASES), opts, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if a.json:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2, default=str)
    print(json.dumps({k: _slim(r) for k, r in results.items()}, indent=2, default=str))
    print(markdown(results))
    if a.plot:
        say(f"plot: {plot(results, a.plot)}")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
