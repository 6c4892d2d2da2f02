"""Declared capabilities (core/protocols.py): the sources and outputs that declare them, and
the fenced output, which declares exactly those of the output it wraps."""

from __future__ import annotations

from airflow_provider_dblog.core.fencing import fenced_output
from airflow_provider_dblog.core.protocols import (
    FullRowIndex,
    Output,
    ParallelChunkReaders,
    RangeDigests,
    RowTextChunks,
    RowTextLog,
    RowTextOutput,
    WholeRowConsumers,
)
from airflow_provider_dblog.sources.mysql.source import MySQLSource
from airflow_provider_dblog.sources.postgres.source import PostgresSource


class _Lease:
    def check(self) -> None:
        pass


class _PlainOutput:
    def open(self):
        pass

    def register_schema(self, schema):
        pass

    def register_schemas(self, schemas):
        pass

    def write(self, events, epoch=None):
        pass

    def last_position(self, source_id):
        return None

    def close(self):
        pass


class _IndexedTextOutput(_PlainOutput):
    takes_row_text = True

    def full_row_keys(self, source_id, table):
        return [(1,)]


def test_both_sources_declare_every_source_capability():
    for cls in (PostgresSource, MySQLSource):
        for capability in (ParallelChunkReaders, RangeDigests, RowTextChunks, RowTextLog):
            assert capability in cls.__mro__, (cls, capability)  # declared, not only matching
        assert cls.selects_row_text and cls.logs_row_text


def test_the_delta_output_declares_row_text_and_its_full_row_index():
    from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput

    assert RowTextOutput in DeltaChangelogOutput.__mro__ and FullRowIndex in DeltaChangelogOutput.__mro__


def test_a_fenced_output_declares_exactly_the_capabilities_of_its_output():
    plain = fenced_output(_PlainOutput(), _Lease())
    assert isinstance(plain, Output)
    assert not isinstance(plain, FullRowIndex)
    assert not (isinstance(plain, RowTextOutput) and plain.takes_row_text)

    rich = fenced_output(_IndexedTextOutput(), _Lease())
    assert isinstance(rich, Output) and isinstance(rich, FullRowIndex)
    assert isinstance(rich, RowTextOutput) and rich.takes_row_text
    assert rich.full_row_keys("s", "t") == [(1,)]


def test_the_kafka_output_declares_whole_row_consumers_and_the_fence_passes_it_on():
    """Debezium's envelope goes to sinks that write ``after`` whole (every unchanged-TOAST
    placeholder gets a repair dump); the changelog format does not."""
    from airflow_provider_dblog.outputs.kafka import KafkaOutput

    assert WholeRowConsumers in KafkaOutput.__mro__
    debezium, dblog = KafkaOutput("b:9092", {"format": "debezium"}), KafkaOutput("b:9092", {})
    assert debezium.needs_whole_rows() and not dblog.needs_whole_rows()
    assert fenced_output(debezium, _Lease()).needs_whole_rows()
    assert not fenced_output(dblog, _Lease()).needs_whole_rows()
    assert not fenced_output(_PlainOutput(), _Lease()).needs_whole_rows()
