"""Reading the Kafka output's topics back with ``read_committed``: the committed tails (where
a restarted capture resumes) and whole topics (``scan``, ``dblog verify``, tests)."""

from __future__ import annotations

import time
from typing import Any, Iterator, Optional

from ..core.events import Position
from .kafka_format import H_EPOCH, H_POSITION, H_SOURCE

_FIRST_WINDOW = 16  # records read back from each partition's end, widened until one is ours


def _consumer(conf: dict[str, Any]):
    import confluent_kafka

    return confluent_kafka.Consumer(
        {
            **conf,
            "group.id": "dblog-reader",  # never joins the group (assign only), never commits
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )


def _partitions(consumer, topics: list[str], timeout: float) -> list[tuple[str, int, int, int]]:
    """(topic, partition, low, high) of every partition; ``high`` is the last stable offset
    for a read_committed consumer."""
    import confluent_kafka

    meta = consumer.list_topics(timeout=timeout).topics
    out = []
    for t in topics:
        if t not in meta:
            continue
        for p in sorted(meta[t].partitions):
            tp = confluent_kafka.TopicPartition(t, p)
            lo, hi = _retrying(lambda tp=tp: consumer.get_watermark_offsets(tp, timeout=timeout, cached=False), timeout)
            out.append((t, p, lo, hi))
    return out


def _retrying(call, timeout: float):
    """``call()``, again while Kafka answers with a transient error (a broker that just
    restarted has no partition leaders for a moment)."""
    import confluent_kafka

    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            transient = err.retriable() or err.code() in (
                confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
                confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
            )
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _read_range(consumer, topic: str, partition: int, start: int, end: int, timeout: float) -> Iterator[Any]:
    """Committed records of one partition with ``start <= offset < end`` (aborted records and
    transaction markers are skipped by the client)."""
    import confluent_kafka

    if start >= end:
        return
    consumer.assign([confluent_kafka.TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout
    try:
        while True:
            msg = consumer.poll(0.5)
            if msg is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic}[{partition}] {start}..{end} timed out")
                continue
            err = msg.error()
            if err is not None:
                if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return
                raise confluent_kafka.KafkaException(err)
            if msg.offset() >= end:
                return
            yield msg
            if msg.offset() >= end - 1:
                return
    finally:
        consumer.unassign()


def read_tails(
    conf: dict[str, Any], topics: list[str], source_id: str, timeout: float
) -> Optional[tuple[Position, Optional[int]]]:
    """The highest committed position of ``source_id`` in ``topics`` and the epoch it was
    written with. Per partition, positions of one source only grow (one writer at a time,
    each resuming above the last), so the source's newest record in each partition is that
    partition's highest: read backwards from the end in widening windows until one is found."""
    best: Optional[tuple[Position, Optional[int]]] = None
    consumer = _consumer(conf)
    try:
        for topic, part, lo, hi in _partitions(consumer, topics, timeout):
            end, window = hi, _FIRST_WINDOW
            while end > lo:
                start = max(lo, end - window)
                found = None
                for msg in _read_range(consumer, topic, part, start, end, timeout):
                    h = dict(msg.headers() or ())
                    if h.get(H_SOURCE, b"").decode() == source_id and H_POSITION in h:
                        epoch = int(h[H_EPOCH]) if H_EPOCH in h else None
                        found = (Position.parse(h[H_POSITION].decode()), epoch)
                if found is not None:
                    if best is None or found[0] > best[0]:
                        best = found
                    break
                end, window = start, window * 4
    finally:
        consumer.close()
    return best


def read_all(conf: dict[str, Any], topics: list[str], timeout: float = 60.0) -> Iterator[tuple[list, bytes]]:
    """(headers, value) of every committed record of ``topics``, partition by partition."""
    for _, headers, value in read_records(conf, topics, timeout):
        yield headers, value


def read_records(
    conf: dict[str, Any], topics: list[str], timeout: float = 60.0
) -> Iterator[tuple[Optional[bytes], list, bytes]]:
    """(key, headers, value) of every committed record of ``topics``, partition by partition."""
    consumer = _consumer(conf)
    try:
        for topic, part, lo, hi in _partitions(consumer, topics, timeout):
            for msg in _read_range(consumer, topic, part, lo, hi, timeout):
                yield msg.key(), msg.headers() or [], msg.value()
    finally:
        consumer.close()
