"""native/src/mysql_result.rs on protocol bytes made here: a chunk's row packets split into
blocks anywhere, a payload longer than one packet, the end packets, and the bytes it refuses."""

from __future__ import annotations

import pytest

native = pytest.importorskip("airflow_provider_dblog._rows_native")
pymysql = pytest.importorskip("pymysql")

from airflow_provider_dblog.core.row_text import dumps  # noqa: E402
from airflow_provider_dblog.core.text_column import TextColumn  # noqa: E402
from airflow_provider_dblog.sources.mysql.select_native import TEXT_KINDS  # noqa: E402

EOF_OK = b"\xfe" + (0).to_bytes(2, "little") + (0x0002).to_bytes(2, "little")  # autocommit status


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def lenenc(b: bytes) -> bytes:
    assert len(b) < 251
    return bytes([len(b)]) + b


def reader(next_seq=5):
    plan = native.MyTextPlan(["id", "t"], [TEXT_KINDS.index("int"), TEXT_KINDS.index("text")])
    return native.MyRowsReader(plan, [0], next_seq)


def read(r, data: bytes, block: int) -> tuple[list, list, bool]:
    keys, done = [], False
    for at in range(0, len(data), block):
        assert not done, "bytes after the end were asked for"
        done = r.feed(data[at : at + block])
        keys += r.take()
    texts, key_texts = (list(TextColumn.from_pieces(p)) for p in r.texts())
    assert key_texts == [dumps(list(k)) for k in keys] or not done
    return keys, texts, done


@pytest.mark.parametrize("block", [1, 3, 7, 1 << 16])
def test_rows_split_anywhere_give_the_texts_and_keys(block):
    rows = [lenenc(b"1") + lenenc('é\t"'.encode()), lenenc(b"-2") + b"\xfb"]
    data = packet(5, rows[0]) + packet(6, rows[1]) + packet(7, EOF_OK)
    r = reader()
    keys, texts, done = read(r, data, block)
    assert done and keys == [(1,), (-2,)]
    assert texts == ['{"id":1,"t":"é\\t\\""}', '{"id":-2,"t":null}']
    assert r.end() == ("eof", 0, 2, None) and r.next_seq == 8


def test_a_payload_longer_than_one_packet_is_joined():
    size = 0xFFFFFF
    payload = lenenc(b"3") + b"\xfe" + size.to_bytes(8, "little") + b"x" * size
    data = packet(5, payload[:0xFFFFFF]) + packet(6, payload[0xFFFFFF:]) + packet(7, EOF_OK)
    r = reader()
    keys, texts, done = read(r, data, 1 << 20)
    assert done and keys == [(3,)] and len(texts[0]) == size + len('{"id":3,"t":""}')
    assert r.next_seq == 8


def test_an_error_packet_ends_the_result_as_pymysql_raises_it():
    err = b"\xff" + (1146).to_bytes(2, "little") + b"#42S02" + b"Table 'd.t' doesn't exist"
    r = reader()
    assert read(r, packet(5, lenenc(b"1") + lenenc(b"a")) + packet(6, err), 4)[2]
    kind, payload = r.end()
    assert kind == "error"
    with pytest.raises(pymysql.err.ProgrammingError, match="doesn't exist"):
        pymysql.err.raise_mysql_exception(payload)


def test_a_wrong_sequence_number_or_bytes_after_the_end_are_refused():
    r = reader()
    assert r.feed(packet(6, lenenc(b"1") + lenenc(b"a")))
    assert r.end() == ("broken", "Packet sequence number wrong - got 6 expected 5")
    r = reader()
    assert r.feed(packet(5, EOF_OK) + b"\x01")
    assert r.end() == ("broken", "bytes after the end of the result")
    r = reader()
    more_results = b"\xfe" + (0).to_bytes(2, "little") + (0x000A).to_bytes(2, "little")
    assert r.feed(packet(5, more_results))
    assert r.end()[0] == "broken"


def test_a_value_it_does_not_write_is_read_to_the_end_and_named():
    rows = [lenenc(b"1") + lenenc(b"a"), lenenc(b"x1") + lenenc(b"b"), lenenc(b"3") + lenenc(b"c")]
    data = b"".join(packet(5 + i, row) for i, row in enumerate(rows)) + packet(8, EOF_OK)
    r = reader()
    keys, _, done = read(r, data, 5)
    assert done and keys == [(1,)]  # what came before; the caller selects again
    assert r.end() == ("eof", 0, 2, "column 0: no integer") and r.next_seq == 9
