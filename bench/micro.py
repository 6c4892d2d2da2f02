"""Per-event CPU of two in-process steps, without servers: pgoutput decoding and the Delta
output's changelog columns, for one-row transactions and for 10,000-row ones.

    python -m bench.micro [--events 30000] [--repeat 7]

* ``decode``: ``LogDecoder.pgoutput_many`` (row images as text, as the capture runs it) on
  hand-built protocol-1 messages of a 3-column table (Begin, Insert..., Commit), fed in reads
  of 600 messages. Baseline: a Python loop that only reads each message's tag byte, the floor
  of any per-message Python code.
* ``columns``: ``changelog_batch`` of one writer batch made of log blocks of 1 or 10,000
  changes (what the decoders hand the writer). Baseline: ``pyarrow.array`` of the batch's
  row texts alone, one of the twelve columns.

CPU time (``time.process_time``) per event, the median of ``--repeat`` runs, and the ratio
to the baseline measured in the same run (docs/benchmarks.md, "One-row transactions").
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time
from typing import Callable

import pyarrow as pa

from airflow_provider_dblog.core.batch import EventBatch, LogRows
from airflow_provider_dblog.core.events import Column, Op, Position, TableSchema
from airflow_provider_dblog.outputs.delta import changelog_batch
from airflow_provider_dblog.sources.postgres.catalog import TableInfo
from airflow_provider_dblog.sources.postgres.log import LogDecoder

COLUMNS = [("id", 20, "bigint"), ("v", 23, "integer"), ("s", 25, "text")]
TABLE = "public.ev"


def _s(text: str) -> bytes:
    return text.encode() + b"\x00"


def _messages(events: int, per_txn: int) -> list[bytes]:
    rel = b"R" + struct.pack("!I", 300) + _s("public") + _s("ev") + b"d" + struct.pack("!h", len(COLUMNS))
    for name, oid, _ in COLUMNS:
        rel += struct.pack("!b", 1 if name == "id" else 0) + _s(name) + struct.pack("!Ii", oid, -1)
    out, lsn = [rel], 0x1000
    for first in range(0, events, per_txn):
        out.append(b"B" + struct.pack("!QqI", lsn + 0x100, 1_000 + first, 5 + first))
        for k in range(first, min(first + per_txn, events)):
            values = (str(k), str(k % 1000), "abcdefghij")
            tup = struct.pack("!h", len(values)) + b"".join(
                b"t" + struct.pack("!i", len(v)) + v.encode() for v in values
            )
            out.append(b"I" + struct.pack("!I", 300) + b"N" + tup)
        out.append(b"C" + struct.pack("!bQQq", 0, lsn, lsn + 0x100, 1_000 + first))
        lsn += 0x200
    return out


def _decoder() -> LogDecoder:
    schema = TableSchema(TABLE, tuple(Column(n, t, n != "id") for n, _, t in COLUMNS), ("id",))
    info = TableInfo(schema, 1, {n: t for n, _, t in COLUMNS}, "d", ("id",))
    types = {oid: name for _, oid, name in COLUMNS}
    return LogDecoder(
        "src1",
        "dblog.watermarks",
        {TABLE},
        lambda t, refresh=False: info,
        types.__getitem__,
        lambda oid, mod: types[oid],
        texts=True,
    )


def _median_cpu(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def decode(events: int, per_txn: int, repeat: int) -> dict:
    messages = _messages(events, per_txn)

    def ours() -> None:
        d = _decoder()
        for at in range(0, len(messages), 600):
            d.pgoutput_many(messages[at : at + 600])
            d.pending.clear()
            d.block_extra = 0

    def floor() -> None:
        n = 0
        for at in range(0, len(messages), 600):
            for m in messages[at : at + 600]:
                n += m[0] == 73

    return _result(_median_cpu(ours, repeat), _median_cpu(floor, repeat), events)


def columns(events: int, per_block: int, repeat: int) -> dict:
    blocks = []
    for first in range(0, events, per_block):
        ks = range(first, min(first + per_block, events))
        blocks.append(
            LogRows(
                "src1",
                TABLE,
                Op.CREATE,
                "sch1",
                1_700_000_000_000_000,
                str(first),
                [(k,) for k in ks],
                [None] * len(ks),
                ['{"id":%d,"v":%d,"s":"abcdefghij"}' % (k, k % 1000) for k in ks],
                [Position("%016X%010d" % (0x1000 + first, i + 1)) for i in range(len(ks))],
            )
        )
    batch = EventBatch(blocks)
    texts = [a for b in blocks for a in b.afters]
    return _result(
        _median_cpu(lambda: changelog_batch(batch, 1), repeat),
        _median_cpu(lambda: pa.array(texts, pa.string()), repeat),
        events,
    )


def _result(ours: float, floor: float, events: int) -> dict:
    return {
        "us_per_event": round(ours / events * 1e6, 3),
        "baseline_us_per_event": round(floor / events * 1e6, 3),
        "ratio": round(ours / floor, 1) if floor else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.micro", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--events", type=int, default=30_000)
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args()
    print("| Step | Changes per transaction / block | CPU µs per event | baseline µs | ours / baseline |")
    print("|---|---:|---:|---:|---:|")
    for name, fn in (
        ("pgoutput decoding (`LogDecoder.pgoutput_many`)", decode),
        ("changelog columns (`changelog_batch`)", columns),
    ):
        for size in (1, 10_000):
            r = fn(a.events, size, a.repeat)
            print(f"| {name} | {size:,} | {r['us_per_event']} | {r['baseline_us_per_event']} | {r['ratio']}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
